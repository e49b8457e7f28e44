//! TLS to etcd, as etcdctl speaks it (`--cacert`, `--cert`, `--key` with `https://` endpoints):
//! TLS 1.2 or 1.3 through rustls with ring, etcd's certificate checked against a CA and the
//! endpoint's host name (or IP address), and a client certificate when etcd asks for one
//! (`--client-cert-auth`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ClientConfig;

/// Which of the three TLS files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    /// The CA that signed etcd's certificate (etcdctl's `--cacert`).
    Ca,
    /// This client's certificate (etcdctl's `--cert`).
    Cert,
    /// This client's private key (etcdctl's `--key`).
    Key,
}

impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFile::Ca => "CA file (etcd_ca_file, etcdctl --cacert)",
            TlsFile::Cert => "certificate file (etcd_cert_file, etcdctl --cert)",
            TlsFile::Key => "key file (etcd_key_file, etcdctl --key)",
        })
    }
}

pub use mojim_transport::tls::client::PemFile;

/// The CA, and this client's certificate and key if it has one, ready for connections.
#[derive(Clone)]
pub struct EtcdTls {
    pub(crate) config: Arc<ClientConfig>,
}

impl fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EtcdTls(client certificate: {})", self.has_cert())
    }
}

/// A TLS file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFileError {
    pub file: TlsFile,
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "etcd TLS {} {}: {}", self.file, self.path.display(), self.reason)
    }
}

impl std::error::Error for TlsFileError {}

impl EtcdTls {
    /// Whether this client presents a certificate.
    pub(crate) fn has_cert(&self) -> bool {
        self.config.client_auth_cert_resolver.has_certs()
    }

    /// Loads the CA file and, if given, this client's certificate and key files. Refuses, naming
    /// the file, one that cannot be read, holds no certificate or key, or a key that is not the
    /// certificate's.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<EtcdTls, TlsFileError> {
        let read = |file, path: &Path| {
            std::fs::read(path).map_err(|e| TlsFileError { file, path: path.into(), reason: e.to_string() })
        };
        let ca_pem = read(TlsFile::Ca, ca)?;
        let identity = match identity {
            Some((cert, key)) => {
                mojim_transport::tls::client::private_key_mode(key).map_err(|reason| TlsFileError {
                    file: TlsFile::Key,
                    path: key.into(),
                    reason,
                })?;
                Some((cert, read(TlsFile::Cert, cert)?, key, read(TlsFile::Key, key)?))
            }
            None => None,
        };
        let identity = identity.as_ref().map(|(c, cp, k, kp)| ((*c, &cp[..]), (*k, &kp[..])));
        EtcdTls::from_pem((ca, &ca_pem), identity)
    }

    /// As [`EtcdTls::load`], from the files' contents (the paths name them in errors).
    pub fn from_pem(
        ca: PemFile<'_>,
        identity: Option<(PemFile<'_>, PemFile<'_>)>,
    ) -> Result<EtcdTls, TlsFileError> {
        use mojim_transport::tls::client::{client_config, ClientFile};
        let config = client_config(ca.1, identity.map(|(cert, key)| (cert, key.1))).map_err(|e| {
            let (file, path) = match e.file {
                ClientFile::Ca => (TlsFile::Ca, ca.0),
                ClientFile::Cert => (TlsFile::Cert, identity.expect("a certificate was given").0 .0),
                ClientFile::Key => (TlsFile::Key, identity.expect("a key was given").1 .0),
            };
            TlsFileError { file, path: path.into(), reason: e.reason }
        })?;
        Ok(EtcdTls { config: Arc::new(config) })
    }
}

/// Says what to check for a TLS failure, after rustls's words; `has_cert`: whether this client
/// presents a certificate.
pub(crate) fn explain(e: &rustls::Error, has_cert: bool) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let hint = match e {
        // Go's TLS server answers a missing certificate with bad_certificate too.
        E::AlertReceived(A::CertificateRequired | A::BadCertificate | A::HandshakeFailure) if !has_cert => {
            "etcd requires a client certificate (--client-cert-auth): set etcd_cert_file and etcd_key_file"
        }
        E::InvalidCertificate(C::UnknownIssuer) => {
            "etcd's certificate is not signed by the CA in etcd_ca_file (etcdctl --cacert)"
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "etcd's certificate does not name the endpoint's host: use a host name or IP address \
             among its subject alternative names"
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => "etcd's certificate has expired",
        E::AlertReceived(A::BadCertificate | A::UnknownCA | A::CertificateUnknown) => {
            "etcd refused this client's certificate: it must be signed by a CA in etcd's \
             --trusted-ca-file and allow client authentication"
        }
        E::AlertReceived(A::CertificateExpired) => "etcd refused this client's certificate: it has expired",
        _ => return format!("TLS: {e}"),
    };
    format!("TLS: {e}: {hint}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{EtcdServer, ServerTls};
    use crate::{Client, EtcdError};
    use mojim_transport::tls::pki::{Ca, Issued, Validity};
    use mojim_transport::tls::Role;
    use std::time::Duration;

    /// A CA and a certificate it signs for 127.0.0.1.
    fn pki(name: &str) -> (Ca, Issued) {
        let ca = Ca::new(name).expect("CA");
        let cert = ca.issue_for_hosts("etcd", &[], &["127.0.0.1"], Validity::Years(1)).expect("certificate");
        (ca, cert)
    }

    fn tls(ca: &Ca, identity: Option<&Issued>) -> EtcdTls {
        let p = Path::new;
        let id =
            identity.map(|i| ((p("cert.pem"), i.cert_pem.as_bytes()), (p("key.pem"), i.key_pem.as_bytes())));
        EtcdTls::from_pem((p("ca.pem"), ca.cert_pem().as_bytes()), id).expect("TLS files")
    }

    fn start(ca: &Ca, cert: &Issued) -> Option<EtcdServer> {
        EtcdServer::start_tls_for_test(&ServerTls {
            ca_pem: ca.cert_pem(),
            cert_pem: &cert.cert_pem,
            key_pem: &cert.key_pem,
        })
    }

    fn client(server: &EtcdServer, tls: EtcdTls) -> Client {
        Client::with_tls(&[server.endpoint()], Duration::from_secs(2), Some(tls)).expect("client")
    }

    /// The error of a write refused before it reached etcd: unreachable, never "outcome unknown".
    fn refused(c: &Client) -> String {
        match c.create_if_absent("k", b"v", None) {
            Err(e @ EtcdError::Unreachable { .. }) => e.to_string(),
            other => panic!("expected the TLS session to be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_key_file_others_may_read_is_refused_naming_it_and_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("mojim-etcd-keymode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, me) = pki("etcd CA");
        let f = |n: &str, pem: &str, mode: u32| {
            let path = dir.join(n);
            std::fs::write(&path, pem).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let (ca_file, cert, key) = (
            f("ca.pem", ca.cert_pem(), 0o644),
            f("c.pem", &me.cert_pem, 0o644),
            f("k.pem", &me.key_pem, 0o640),
        );
        let e = EtcdTls::load(&ca_file, Some((&cert, &key))).unwrap_err();
        assert_eq!(e.file, TlsFile::Key);
        assert!(e.to_string().contains("etcd_key_file") && e.reason.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(EtcdTls::load(&ca_file, Some((&cert, &key))).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_client_with_a_certificate_of_etcds_ca_reads_and_writes() {
        let (ca, server_cert) = pki("etcd CA");
        let Some(server) = start(&ca, &server_cert) else { return };
        assert!(server.endpoint().starts_with("https://"));
        let me = ca.issue_for_hosts("mojim node", &[Role::Node.uri()], &[], Validity::Years(1)).unwrap();
        let c = client(&server, tls(&ca, Some(&me)));
        assert!(c.create_if_absent("k", b"v", None).unwrap());
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v");
    }

    #[test]
    fn without_a_client_certificate_etcd_refuses_the_session() {
        let (ca, server_cert) = pki("etcd CA");
        let Some(server) = start(&ca, &server_cert) else { return };
        let e = refused(&client(&server, tls(&ca, None)));
        assert!(e.contains("set etcd_cert_file and etcd_key_file"), "{e}");
    }

    #[test]
    fn a_client_certificate_of_another_ca_is_refused() {
        let (ca, server_cert) = pki("etcd CA");
        let Some(server) = start(&ca, &server_cert) else { return };
        let (other_ca, other) = pki("another CA");
        // The client trusts etcd's CA but presents a certificate etcd does not trust.
        let p = Path::new;
        let id = Some(((p("c.pem"), other.cert_pem.as_bytes()), (p("k.pem"), other.key_pem.as_bytes())));
        let t = EtcdTls::from_pem((p("ca.pem"), ca.cert_pem().as_bytes()), id).unwrap();
        let e = refused(&client(&server, t));
        assert!(e.contains("etcd refused this client's certificate"), "{e}");
        // And a client that trusts another CA refuses etcd's certificate.
        let e = refused(&client(&server, tls(&other_ca, Some(&other))));
        assert!(e.contains("not signed by the CA in etcd_ca_file"), "{e}");
    }

    #[test]
    fn tls_and_plain_endpoints_do_not_mix() {
        let (ca, _) = pki("etcd CA");
        let t = Duration::from_secs(1);
        let e = Client::with_tls(&["https://h:1".into()], t, None).unwrap_err().to_string();
        assert!(e.contains("https://h:1") && e.contains("etcd_ca_file"), "{e}");
        let e = Client::with_tls(&["h:1".into()], t, Some(tls(&ca, None))).unwrap_err().to_string();
        assert!(e.contains("https://h:1"), "{e}");
        let e = Client::with_tls(&["https://h:1".into(), "h:2".into()], t, Some(tls(&ca, None)));
        assert!(e.is_err());
        let c = Client::with_tls(&["https://h:1/".into()], t, Some(tls(&ca, None))).unwrap();
        assert_eq!(c.endpoints(), ["https://h:1"]);
    }

    #[test]
    fn unusable_files_are_named() {
        let (ca, a) = pki("etcd CA");
        let (_, b) = pki("another CA");
        let p = Path::new;
        let e = EtcdTls::from_pem((p("ca.pem"), b"junk"), None).unwrap_err();
        assert_eq!((e.file, e.path.as_path()), (TlsFile::Ca, p("ca.pem")));
        assert!(e.to_string().contains("etcd_ca_file"), "{e}");
        let id = Some(((p("c.pem"), a.cert_pem.as_bytes()), (p("k.pem"), b.key_pem.as_bytes())));
        let e = EtcdTls::from_pem((p("ca.pem"), ca.cert_pem().as_bytes()), id).unwrap_err();
        assert_eq!(e.file, TlsFile::Key, "{e}");
        assert!(e.to_string().contains("is not the private key of c.pem"), "{e}");
        let id = Some(((p("c.pem"), &b"no"[..]), (p("k.pem"), a.key_pem.as_bytes())));
        let e = EtcdTls::from_pem((p("ca.pem"), ca.cert_pem().as_bytes()), id).unwrap_err();
        assert_eq!(e.file, TlsFile::Cert, "{e}");
        let e = EtcdTls::load(p("/nonexistent/ca.pem"), None).unwrap_err();
        assert_eq!(e.file, TlsFile::Ca, "{e}");
    }
}
