//! Checking the peer's certificate: it must chain to the cluster's CA, be valid now, not be
//! revoked by a list in `[security] crl_file`, and carry a role (a server's must be a node's).
//! Host names are not checked: the cluster's CA issues certificates to the cluster only, and
//! what a holder may do follows its role, checked here and, for what it asks, after the
//! handshake (`Role`). A refusal names the certificate's subject and the reason.

use super::{PeerIdentity, Role};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, OtherError, RootCertStore,
    SignatureScheme,
};
use std::fmt;
use std::sync::Arc;
use webpki::{
    CertRevocationList, ExpirationPolicy, RevocationCheckDepth, RevocationOptionsBuilder, UnknownStatusPolicy,
};

/// What a side trusts: the cluster's CA certificates and the revocation lists it issued.
#[derive(Debug)]
pub(crate) struct Trust {
    pub(crate) roots: Arc<RootCertStore>,
    /// From `[security] crl_file`; each issued by a CA in `roots` (checked at load).
    pub(crate) crls: Vec<CertRevocationList<'static>>,
    pub(crate) algs: WebPkiSupportedAlgorithms,
}

impl Trust {
    /// Checks that `end_entity` chains to a root through `intermediates`, is valid at `now`,
    /// and is on none of the revocation lists. A list's own dates are not enforced: a list
    /// past its next-update date still revokes what it names, and a certificate whose issuer
    /// published no list is not refused for that.
    pub(crate) fn verify_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<(), webpki::Error> {
        let cert = webpki::EndEntityCert::try_from(end_entity)?;
        let crls: Vec<&CertRevocationList<'_>> = self.crls.iter().collect();
        let revocation = RevocationOptionsBuilder::new(&crls).ok().map(|b| {
            b.with_depth(RevocationCheckDepth::EndEntity)
                .with_status_policy(UnknownStatusPolicy::Allow)
                .with_expiration_policy(ExpirationPolicy::Ignore)
                .build()
        });
        cert.verify_for_usage(
            self.algs.all,
            &self.roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            revocation,
            None,
        )?;
        Ok(())
    }
}

/// Why a peer's certificate was refused, naming its subject.
#[derive(Debug)]
pub struct CertificateRefused {
    pub subject: String,
    pub reason: String,
}

impl fmt::Display for CertificateRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the peer's certificate (subject {:?}) is refused: {}", self.subject, self.reason)
    }
}

impl std::error::Error for CertificateRefused {}

fn refused(cert: &CertificateDer<'_>, reason: String) -> Error {
    let subject = PeerIdentity::of_certificate(cert).subject;
    Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(CertificateRefused {
        subject,
        reason,
    }))))
}

/// Says in words why webpki refused a certificate.
pub(crate) fn reason(e: &webpki::Error) -> String {
    use webpki::Error as E;
    match e {
        E::CertExpired { .. } => "it has expired".into(),
        E::CertNotValidYet { .. } => "it is not valid yet (is this host's clock right?)".into(),
        E::UnknownIssuer => "it is not signed by this side's cluster CA ([security] ca_file)".into(),
        E::CertRevoked => "it has been revoked (it is on a list in [security] crl_file)".into(),
        E::RequiredEkuNotFoundContext(_) => {
            "its extended key usage does not allow this end of a connection".into()
        }
        e if is_list_error(e) => format!(
            "a revocation list in [security] crl_file cannot be checked against its CA ({e:?}): \
             replace it with one the cluster CA signed"
        ),
        e => format!("{e:?}"),
    }
}

/// Whether webpki could not check a revocation list itself (its signature or its issuer), the
/// list's fault rather than the certificate's.
pub(crate) fn is_list_error(e: &webpki::Error) -> bool {
    use webpki::Error as E;
    matches!(
        e,
        E::InvalidCrlSignatureForPublicKey
            | E::IssuerNotCrlSigner
            | E::UnsupportedCrlSignatureAlgorithmContext(_)
            | E::UnsupportedCrlSignatureAlgorithmForPublicKeyContext(_)
    )
}

/// Checks the chain, the validity and the revocation lists, then the role.
fn check(
    trust: &Trust,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    now: UnixTime,
    allowed: &[Role],
) -> Result<(), Error> {
    trust.verify_chain(end_entity, intermediates, now).map_err(|e| refused(end_entity, reason(&e)))?;
    let id = PeerIdentity::of_certificate(end_entity);
    match id.role {
        Some(r) if allowed.contains(&r) => Ok(()),
        Some(r) => {
            Err(refused(end_entity, format!("its role is {r}, and only {} may answer here", names(allowed))))
        }
        None => Err(refused(
            end_entity,
            format!(
                "it carries no role (one subject alternative name URI {}<node|operator|application>)",
                super::ROLE_URI_PREFIX
            ),
        )),
    }
}

fn names(roles: &[Role]) -> String {
    roles.iter().map(|r| r.name()).collect::<Vec<_>>().join(" or ")
}

/// The connecting side's check of the node it reached.
#[derive(Debug)]
pub(crate) struct NodeVerifier {
    pub(crate) trust: Arc<Trust>,
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        check(&self.trust, end_entity, intermediates, now, &[Role::Node])?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.trust.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.trust.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.trust.algs.supported_schemes()
    }
}

/// The accepting side's check of whoever connects: any role, from the cluster's CA; what the
/// role may ask is checked once the peer has said what it is.
#[derive(Debug)]
pub(crate) struct PeerVerifier {
    pub(crate) trust: Arc<Trust>,
    /// The CA's subject, offered to clients as the one to pick a certificate for.
    pub(crate) hints: Vec<DistinguishedName>,
}

impl ClientCertVerifier for PeerVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        check(&self.trust, end_entity, intermediates, now, &[Role::Node, Role::Operator, Role::Application])?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.trust.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.trust.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.trust.algs.supported_schemes()
    }
}
