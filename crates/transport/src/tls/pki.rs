//! Making a cluster's certificates: a CA, and certificates it signs for nodes, operators and
//! applications, each carrying its role (see [`super::Role`]). `mojim init --tls` uses it for
//! a quick start, and the tests for their clusters; a deployment may use any CA that issues
//! the same extensions.

use super::Role;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, ExtendedKeyUsagePurpose,
    IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevokedCertParams, SanType, SerialNumber,
};

/// A certificate and its private key, in PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
    /// Its serial number, big-endian (what a revocation list names).
    pub serial: Vec<u8>,
}

/// When a certificate is valid.
#[derive(Clone, Copy, Debug)]
pub enum Validity {
    /// From a year ago for `years` years.
    Years(u32),
    /// Ended yesterday.
    Expired,
    /// From a day ago until this time (a certificate that expires while its holder runs).
    Until(std::time::SystemTime),
}

/// A cluster's certificate authority.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    key_pem: String,
}

fn err(e: rcgen::Error) -> String {
    format!("cannot make a certificate: {e}")
}

impl Ca {
    /// A new CA named `name`, with a new ECDSA P-256 key, valid for ten years.
    pub fn new(name: &str) -> Result<Ca, String> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params, Validity::Years(10));
        let cert = params.self_signed(&key).map_err(err)?;
        let key_pem = key.serialize_pem();
        Ok(Ca { pem: cert.pem(), key_pem, issuer: Issuer::new(params, key) })
    }

    /// The CA's certificate, PEM (what `[security] ca_file` holds).
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// The CA's private key, PEM: whoever holds it can issue certificates for any role.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A certificate for `subject` with `role`.
    pub fn issue(&self, subject: &str, role: Role, validity: Validity) -> Result<Issued, String> {
        self.issue_with_uris(subject, &[role.uri()], validity)
    }

    /// A certificate for `subject` with the URI alternative names `uris` (tests use it for
    /// certificates without a role, or with two).
    pub fn issue_with_uris(
        &self,
        subject: &str,
        uris: &[String],
        validity: Validity,
    ) -> Result<Issued, String> {
        self.issue_for_hosts(subject, uris, &[], validity)
    }

    /// A certificate for `subject` with the URI alternative names `uris` and the host names or
    /// IP addresses `hosts` (DNS or IP alternative names), which a server outside the cluster
    /// checked by its host name needs (etcd, Redis).
    pub fn issue_for_hosts(
        &self,
        subject: &str,
        uris: &[String],
        hosts: &[&str],
        validity: Validity,
    ) -> Result<Issued, String> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(DnType::CommonName, subject);
        for h in hosts {
            params.subject_alt_names.push(match h.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*h).try_into().map_err(|e| format!("host {h:?}: {e}"))?),
            });
        }
        for u in uris {
            let uri = u.clone().try_into().map_err(|e| format!("URI {u:?}: {e}"))?;
            params.subject_alt_names.push(SanType::URI(uri));
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Every holder may be either end of a connection (a node accepts lanes and connects
        // to its backups).
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        set_validity(&mut params, validity);
        let serial = random_serial()?;
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            serial,
        })
    }

    /// A certificate revocation list, PEM (what `[security] crl_file` holds), signed by this
    /// CA, revoking `revoked`; number `number` (a later list has a larger one).
    pub fn revocation_list(&self, number: u64, revoked: &[&Issued]) -> Result<String, String> {
        let now = std::time::SystemTime::now();
        let day = std::time::Duration::from_secs(86_400);
        let params = CertificateRevocationListParams {
            this_update: (now - day).into(),
            next_update: (now + 30 * day).into(),
            crl_number: SerialNumber::from(number),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|c| RevokedCertParams {
                    serial_number: SerialNumber::from_slice(&c.serial),
                    revocation_time: (now - day).into(),
                    reason_code: None,
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        params.signed_by(&self.issuer).and_then(|crl| crl.pem()).map_err(err)
    }
}

/// Sixteen random bytes, positive and without a leading zero (RFC 5280 allows up to 20).
fn random_serial() -> Result<Vec<u8>, String> {
    let mut serial = vec![0u8; 16];
    let mut filled = 0;
    while filled < serial.len() {
        filled += rustix::rand::getrandom(&mut serial[filled..], rustix::rand::GetRandomFlags::empty())
            .map_err(|e| format!("cannot make a serial number: {e}"))?;
    }
    serial[0] = (serial[0] & 0x7f) | 0x40;
    Ok(serial)
}

fn set_validity(params: &mut CertificateParams, validity: Validity) {
    let day = std::time::Duration::from_secs(86_400);
    let now = std::time::SystemTime::now();
    let (from, to) = match validity {
        Validity::Years(y) => (now - 365 * day, now + 365 * day * y),
        Validity::Expired => (now - 30 * day, now - day),
        Validity::Until(end) => (now - day, end),
    };
    params.not_before = from.into();
    params.not_after = to.into();
}
