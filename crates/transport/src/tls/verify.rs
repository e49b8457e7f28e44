//! Checking the peer's certificate: it must chain to the cluster's CA, be valid now, and carry
//! a role (a server's must be a node's). Host names are not checked: the cluster's CA issues
//! certificates to the cluster only, and what a holder may do follows its role, checked here
//! and, for what it asks, after the handshake (`Role`). A refusal names the certificate's
//! subject and the reason.

use super::{PeerIdentity, Role};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, OtherError, RootCertStore,
    SignatureScheme,
};
use std::fmt;
use std::sync::Arc;

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
fn reason(e: &Error) -> String {
    match e {
        Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "it has expired".into()
        }
        Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "it is not valid yet (is this host's clock right?)".into(),
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "it is not signed by this side's cluster CA ([security] ca_file)".into()
        }
        Error::InvalidCertificate(
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. },
        ) => "its extended key usage does not allow this end of a connection".into(),
        e => e.to_string(),
    }
}

/// Checks the chain and the validity, then the role.
fn check(
    roots: &RootCertStore,
    algs: &WebPkiSupportedAlgorithms,
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    now: UnixTime,
    allowed: &[Role],
) -> Result<(), Error> {
    let parsed = ParsedCertificate::try_from(end_entity).map_err(|e| refused(end_entity, reason(&e)))?;
    rustls::client::verify_server_cert_signed_by_trust_anchor(&parsed, roots, intermediates, now, algs.all)
        .map_err(|e| refused(end_entity, reason(&e)))?;
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
    pub(crate) roots: Arc<RootCertStore>,
    pub(crate) algs: WebPkiSupportedAlgorithms,
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
        check(&self.roots, &self.algs, end_entity, intermediates, now, &[Role::Node])?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The accepting side's check of whoever connects: any role, from the cluster's CA; what the
/// role may ask is checked once the peer has said what it is.
#[derive(Debug)]
pub(crate) struct PeerVerifier {
    pub(crate) roots: Arc<RootCertStore>,
    pub(crate) algs: WebPkiSupportedAlgorithms,
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
        check(
            &self.roots,
            &self.algs,
            end_entity,
            intermediates,
            now,
            &[Role::Node, Role::Operator, Role::Application],
        )?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}
