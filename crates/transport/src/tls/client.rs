//! A TLS client to a server outside the cluster (etcd, RVM's Redis backend), as their own
//! command-line clients speak it (`--cacert`, `--cert`, `--key`): TLS 1.2 or 1.3 through rustls
//! with ring, the server's certificate checked against a CA and the host name, and a client
//! certificate when one is given. The callers name their own settings in errors.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::path::Path;
use std::sync::Arc;

/// A PEM file: its path (which errors name) and its contents.
pub type PemFile<'a> = (&'a Path, &'a [u8]);

/// Which file a [`ClientFileError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFile {
    Ca,
    Cert,
    Key,
}

/// A file that cannot be used, and why (the caller names the setting and the path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFileError {
    pub file: ClientFile,
    pub reason: String,
}

/// The client configuration from the CA's PEM and, if given, this client's certificate and
/// key. Refuses a CA file that holds no certificate, a certificate file without one, a key
/// file without a key, or a key that is not the certificate's. Session resumption is off: the
/// callers' connections are few and long-lived, or one request each.
pub fn client_config(
    ca: &[u8],
    identity: Option<(PemFile<'_>, &[u8])>,
) -> Result<ClientConfig, ClientFileError> {
    let fail = |file, reason: String| ClientFileError { file, reason };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca) {
        let c = c.map_err(|e| fail(ClientFile::Ca, format!("not PEM certificates: {e}")))?;
        roots.add(c).map_err(|e| fail(ClientFile::Ca, format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail(ClientFile::Ca, "holds no certificate (a PEM `CERTIFICATE` block)".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| fail(ClientFile::Ca, e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(((cert_path, cert_pem), key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| fail(ClientFile::Cert, format!("not PEM certificates: {e}")))?;
            if chain.is_empty() {
                return Err(fail(
                    ClientFile::Cert,
                    "holds no certificate (a PEM `CERTIFICATE` block)".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| fail(ClientFile::Key, format!("holds no PEM private key: {e}")))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                fail(ClientFile::Key, format!("is not the private key of {}: {e}", cert_path.display()))
            })?
        }
    };
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

/// Refuses a private key file that its group or others may read or write, saying how to fix it.
pub fn private_key_mode(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).map_err(|e| e.to_string())?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {mode:03o}: a private key must be readable by its owner only: run `chmod 600 {}`",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_others_may_read_is_refused_naming_the_fix() {
        let dir = std::env::temp_dir().join(format!("mojim-keymode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("k.pem");
        std::fs::write(&key, b"x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = private_key_mode(&key).unwrap_err();
        assert!(e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(private_key_mode(&key), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let e = client_config(b"nothing here", None).unwrap_err();
        assert_eq!(e.file, ClientFile::Ca);
        assert!(e.reason.contains("holds no certificate"), "{e:?}");
    }
}
