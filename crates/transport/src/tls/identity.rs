//! Who a certificate names and what it may do: its subject's common name, and its role, carried
//! as a URI subject alternative name `mojim:role:<role>` (docs/SECURITY.md, "Mutual TLS").

use super::der::{Der, OCTET_STRING, OID, SEQUENCE, SET};
use std::fmt;

/// The URI prefix of a role in a certificate's subject alternative names.
pub const ROLE_URI_PREFIX: &str = "mojim:role:";

/// What a certificate's holder may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A mirror or backup: accepts lanes, feeds its backups, runs admin commands on them.
    Node,
    /// An operator's tools: every admin command.
    Operator,
    /// An application (a primary, `mojim kv`): opens a primary's lanes, reads status.
    Application,
}

impl Role {
    /// The name in `mojim:role:<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Operator => "operator",
            Role::Application => "application",
        }
    }

    /// The role named `name`.
    pub fn from_name(name: &str) -> Option<Role> {
        [Role::Node, Role::Operator, Role::Application].into_iter().find(|r| r.name() == name)
    }

    /// The subject alternative name URI that carries this role.
    pub fn uri(self) -> String {
        format!("{ROLE_URI_PREFIX}{}", self.name())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The subject and role of a verified certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerIdentity {
    /// The subject's common name (`?` when it has none).
    pub subject: String,
    /// The role, if the certificate carries exactly one.
    pub role: Option<Role>,
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Some(r) => write!(f, "{:?} (role {r})", self.subject),
            None => write!(f, "{:?} (no role)", self.subject),
        }
    }
}

/// 2.5.4.3, commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17, subjectAltName.
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
/// A GeneralName's uniformResourceIdentifier: [6] IMPLICIT IA5String.
const URI_NAME: u8 = 0x86;

impl PeerIdentity {
    /// Reads a DER certificate. A certificate with two different roles has none.
    pub fn of_certificate(der: &[u8]) -> PeerIdentity {
        let (subject, uris) = read(der).unwrap_or_default();
        let mut roles = uris.iter().filter_map(|u| u.strip_prefix(ROLE_URI_PREFIX)).map(Role::from_name);
        let role = match (roles.next(), roles.next()) {
            (Some(Some(r)), None) => Some(r),
            _ => None,
        };
        PeerIdentity { subject: subject.unwrap_or_else(|| "?".into()), role }
    }
}

/// The subject's common name and the URI alternative names, or `None` if the bytes are not a
/// certificate.
fn read(der: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    let cert = Der::new(der).expect(SEQUENCE)?;
    let mut tbs = Der::new(Der::new(cert).expect(SEQUENCE)?);
    tbs.optional(0xa0); // version
    tbs.next()?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    tbs.expect(SEQUENCE)?; // validity
    let subject = common_name(tbs.expect(SEQUENCE)?);
    tbs.expect(SEQUENCE)?; // subjectPublicKeyInfo
    tbs.optional(0x81); // issuerUniqueID
    tbs.optional(0x82); // subjectUniqueID
    let mut uris = Vec::new();
    if let Some(ext) = tbs.optional(0xa3) {
        let mut exts = Der::new(Der::new(ext).expect(SEQUENCE)?);
        while let Some(e) = exts.expect(SEQUENCE) {
            let mut e = Der::new(e);
            let oid = e.expect(OID)?;
            e.optional(0x01); // critical
            let value = e.expect(OCTET_STRING)?;
            if oid == SUBJECT_ALT_NAME {
                let mut names = Der::new(Der::new(value).expect(SEQUENCE)?);
                while let Some((tag, name)) = names.next() {
                    if tag == URI_NAME {
                        uris.push(String::from_utf8_lossy(name).into_owned());
                    }
                }
            }
        }
    }
    Some((subject, uris))
}

/// When a DER certificate stops being valid, as `YYYY-MM-DD HH:MM:SS UTC`; `None` if the bytes
/// are not a certificate.
pub fn not_after(der: &[u8]) -> Option<String> {
    let cert = Der::new(der).expect(SEQUENCE)?;
    let mut tbs = Der::new(Der::new(cert).expect(SEQUENCE)?);
    tbs.optional(0xa0); // version
    tbs.next()?; // serialNumber
    tbs.expect(SEQUENCE)?; // signature
    tbs.expect(SEQUENCE)?; // issuer
    let mut validity = Der::new(tbs.expect(SEQUENCE)?);
    validity.next()?; // notBefore
    let (tag, time) = validity.next()?;
    let t = std::str::from_utf8(time).ok()?;
    // UTCTime YYMMDDHHMMSSZ (years 1950 to 2049), GeneralizedTime YYYYMMDDHHMMSSZ.
    let full = match (tag, t.len()) {
        (UTC_TIME, 13) => format!("{}{t}", if &t[..2] < "50" { "20" } else { "19" }),
        (GENERALIZED_TIME, 15) => t.to_string(),
        _ => return None,
    };
    if !full[..14].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let f = |a: usize, b: usize| &full[a..b];
    Some(format!("{}-{}-{} {}:{}:{} UTC", f(0, 4), f(4, 6), f(6, 8), f(8, 10), f(10, 12), f(12, 14)))
}

/// UTCTime.
const UTC_TIME: u8 = 0x17;
/// GeneralizedTime.
const GENERALIZED_TIME: u8 = 0x18;

/// The first commonName of a Name (a SEQUENCE of SETs of attribute SEQUENCEs).
fn common_name(name: &[u8]) -> Option<String> {
    let mut rdns = Der::new(name);
    while let Some(rdn) = rdns.expect(SET) {
        let mut attrs = Der::new(rdn);
        while let Some(attr) = attrs.expect(SEQUENCE) {
            let mut a = Der::new(attr);
            if a.expect(OID)? == COMMON_NAME {
                let (_, value) = a.next()?;
                return Some(String::from_utf8_lossy(value).into_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::pki::{Ca, Validity};

    fn cert(subject: &str, uris: &[String]) -> Vec<u8> {
        let ca = Ca::new("a cluster").expect("CA");
        ca.issue_with_uris(subject, uris, Validity::Years(1)).expect("certificate").cert_der
    }

    #[test]
    fn the_subject_and_the_role_are_read_from_the_certificate() {
        for role in [Role::Node, Role::Operator, Role::Application] {
            let id = PeerIdentity::of_certificate(&cert("holder-7", &[role.uri()]));
            assert_eq!(id, PeerIdentity { subject: "holder-7".into(), role: Some(role) });
        }
    }

    #[test]
    fn a_certificate_with_no_role_or_two_has_none() {
        let other = "https://example.invalid/x".to_string();
        for uris in [
            vec![],
            vec![other],
            vec![Role::Node.uri(), Role::Operator.uri()],
            vec!["mojim:role:king".into()],
        ] {
            assert_eq!(PeerIdentity::of_certificate(&cert("n", &uris)).role, None, "{uris:?}");
        }
    }

    #[test]
    fn the_end_of_validity_is_read_from_the_certificate() {
        let ca = Ca::new("a cluster").expect("CA");
        let end = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_900_000_000);
        let c = ca.issue("holder-8", Role::Node, Validity::Until(end)).expect("certificate");
        assert_eq!(not_after(&c.cert_der).as_deref(), Some("2030-03-17 17:46:40 UTC"));
        assert_eq!(not_after(&[0x30, 3, 1, 2]), None);
    }

    #[test]
    fn bytes_that_are_no_certificate_name_nobody() {
        let id = PeerIdentity::of_certificate(&[0x30, 3, 1, 2]);
        assert_eq!(id, PeerIdentity { subject: "?".into(), role: None });
    }
}
