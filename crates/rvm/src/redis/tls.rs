//! TLS to the Redis server, as Redis's own clients speak it (`redis-cli --tls --cacert --cert
//! --key`): TLS 1.2 or 1.3 through rustls with ring, the server's certificate checked against
//! a CA and the host name (or IP address) of `[rvm] redis`, and a client certificate for a
//! server that asks for one (`tls-auth-clients`, on by default).

use crate::error::{Result, RvmError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A PEM file: its path (which errors name) and its contents.
pub type PemFile<'a> = (&'a Path, &'a [u8]);

/// The CA, and this client's certificate and key if it has one, ready for connections.
#[derive(Clone)]
pub struct RedisTls {
    pub(crate) config: Arc<ClientConfig>,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisTls(client certificate: {})", self.config.client_auth_cert_resolver.has_certs())
    }
}

impl RedisTls {
    /// Loads `[rvm] redis_ca_file` and, if given, `redis_cert_file` and `redis_key_file`.
    /// Refuses, naming the setting and the file, one that cannot be read, holds no certificate
    /// or key, or a key that is not the certificate's.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<RedisTls> {
        let read = |setting: &str, path: &Path| {
            std::fs::read(path)
                .map_err(|e| RvmError::Config(format!("[rvm] {setting} {}: {e}", path.display())))
        };
        let ca_pem = read("redis_ca_file", ca)?;
        let identity = match identity {
            Some((c, k)) => Some((c, read("redis_cert_file", c)?, k, read("redis_key_file", k)?)),
            None => None,
        };
        let identity = identity.as_ref().map(|(c, cp, k, kp)| ((*c, &cp[..]), (*k, &kp[..])));
        RedisTls::from_pem((ca, &ca_pem), identity)
    }

    /// As [`RedisTls::load`], from the files' contents (the paths name them in errors).
    pub fn from_pem(ca: PemFile<'_>, identity: Option<(PemFile<'_>, PemFile<'_>)>) -> Result<RedisTls> {
        let fail = |setting: &str, path: &Path, why: String| {
            RvmError::Config(format!("[rvm] {setting} {}: {why}", path.display()))
        };
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.1) {
            let c = c.map_err(|e| fail("redis_ca_file", ca.0, format!("not PEM certificates: {e}")))?;
            roots.add(c).map_err(|e| fail("redis_ca_file", ca.0, format!("not a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            let why = "holds no certificate (a PEM `CERTIFICATE` block)".into();
            return Err(fail("redis_ca_file", ca.0, why));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| fail("redis_ca_file", ca.0, e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match identity {
            None => builder.with_no_client_auth(),
            Some(((cert_path, cert_pem), (key_path, key_pem))) => {
                let chain = CertificateDer::pem_slice_iter(cert_pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| fail("redis_cert_file", cert_path, format!("not PEM certificates: {e}")))?;
                if chain.is_empty() {
                    let why = "holds no certificate (a PEM `CERTIFICATE` block)".into();
                    return Err(fail("redis_cert_file", cert_path, why));
                }
                let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
                    fail("redis_key_file", key_path, format!("holds no PEM private key: {e}"))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    let why = format!("is not the private key of {}: {e}", cert_path.display());
                    fail("redis_key_file", key_path, why)
                })?
            }
        };
        // Sessions are long-lived and few: a ticket would seldom be used.
        config.resumption = rustls::client::Resumption::disabled();
        Ok(RedisTls { config: Arc::new(config) })
    }
}
