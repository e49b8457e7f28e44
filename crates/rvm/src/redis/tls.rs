//! TLS to the Redis server, as Redis's own clients speak it (`redis-cli --tls --cacert --cert
//! --key`): TLS 1.2 or 1.3 through rustls with ring, the server's certificate checked against
//! a CA and the host name (or IP address) of `[rvm] redis`, and a client certificate for a
//! server that asks for one (`tls-auth-clients`, on by default).

use crate::error::{Result, RvmError};
use rustls::ClientConfig;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use mojim_transport::tls::client::PemFile;

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
            Some((c, k)) => {
                mojim_transport::tls::client::private_key_mode(k)
                    .map_err(|e| RvmError::Config(format!("[rvm] redis_key_file {}: {e}", k.display())))?;
                Some((c, read("redis_cert_file", c)?, k, read("redis_key_file", k)?))
            }
            None => None,
        };
        let identity = identity.as_ref().map(|(c, cp, k, kp)| ((*c, &cp[..]), (*k, &kp[..])));
        RedisTls::from_pem((ca, &ca_pem), identity)
    }

    /// As [`RedisTls::load`], from the files' contents (the paths name them in errors).
    pub fn from_pem(ca: PemFile<'_>, identity: Option<(PemFile<'_>, PemFile<'_>)>) -> Result<RedisTls> {
        use mojim_transport::tls::client::{client_config, ClientFile};
        let config = client_config(ca.1, identity.map(|(cert, key)| (cert, key.1))).map_err(|e| {
            let (setting, path) = match e.file {
                ClientFile::Ca => ("redis_ca_file", ca.0),
                ClientFile::Cert => ("redis_cert_file", identity.expect("a certificate was given").0 .0),
                ClientFile::Key => ("redis_key_file", identity.expect("a key was given").1 .0),
            };
            RvmError::Config(format!("[rvm] {setting} {}: {}", path.display(), e.reason))
        })?;
        Ok(RedisTls { config: Arc::new(config) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_transport::tls::pki::{Ca, Validity};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_file_others_may_read_is_refused_naming_the_setting_and_the_fix() {
        let dir = std::env::temp_dir().join(format!("mojim-rvm-keymode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = Ca::new("Redis CA").unwrap();
        let me = ca.issue_for_hosts("rvm", &[], &[], Validity::Years(1)).unwrap();
        let f = |n: &str, pem: &str, mode: u32| {
            let path = dir.join(n);
            std::fs::write(&path, pem).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let (ca_file, cert, key) = (
            f("ca.pem", ca.cert_pem(), 0o644),
            f("c.pem", &me.cert_pem, 0o644),
            f("k.pem", &me.key_pem, 0o604),
        );
        let e = RedisTls::load(&ca_file, Some((&cert, &key))).unwrap_err().to_string();
        assert!(e.contains("[rvm] redis_key_file") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(RedisTls::load(&ca_file, Some((&cert, &key))).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
