//! TLS for Redis clients, as Redis's `tls-*` settings: `[kv] tls_listen` (Redis's `tls-port`),
//! `tls_cert_file`, `tls_key_file`, `tls_ca_cert_file`, `tls_auth_clients` and
//! `tls_protocols`, checked and made into one rustls server configuration at start-up (ring,
//! the crypto provider of Mojim's own links), and made again from the same files by
//! [`KvTls::reload`] (`mojim kv` on SIGHUP): each new handshake takes the configuration current
//! when it starts; connections already open keep theirs. The connections themselves are in
//! `server/link.rs`.

use crate::error::KvError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// `tls_auth_clients`: whether a client must present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthClients {
    /// A certificate from `tls_ca_cert_file` is required.
    Yes,
    /// A certificate presented must chain to `tls_ca_cert_file`; none is fine.
    Optional,
    /// None is asked for.
    No,
}

impl AuthClients {
    /// Redis's word for it.
    pub fn name(self) -> &'static str {
        match self {
            AuthClients::Yes => "yes",
            AuthClients::Optional => "optional",
            AuthClients::No => "no",
        }
    }

    /// Reads `yes`, `optional` or `no` (any case).
    pub fn parse(v: &str) -> Result<AuthClients, KvError> {
        match v.to_ascii_lowercase().as_str() {
            "yes" => Ok(AuthClients::Yes),
            "optional" => Ok(AuthClients::Optional),
            "no" => Ok(AuthClients::No),
            _ => Err(KvError::Config(format!(
                "[kv] tls_auth_clients = {v:?}: choose \"yes\" (a client certificate is required), \
                 \"optional\" (checked if given) or \"no\""
            ))),
        }
    }
}

/// The TLS versions `tls_protocols` names (TLSv1.2 and TLSv1.3 only, any case, separated by
/// spaces), in rustls's terms, and as Redis reports them.
pub fn parse_protocols(v: &str) -> Result<(Vec<&'static SupportedProtocolVersion>, String), KvError> {
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    let mut names = Vec::new();
    for word in v.split_ascii_whitespace() {
        let (version, name) = match word.to_ascii_lowercase().as_str() {
            "tlsv1.2" => (&rustls::version::TLS12, "TLSv1.2"),
            "tlsv1.3" => (&rustls::version::TLS13, "TLSv1.3"),
            "tlsv1" | "tlsv1.1" => {
                return Err(KvError::Config(format!(
                    "[kv] tls_protocols = {v:?}: {word} is formally deprecated and not offered; \
                     choose TLSv1.2 and/or TLSv1.3"
                )))
            }
            _ => {
                return Err(KvError::Config(format!(
                    "[kv] tls_protocols = {v:?}: {word:?} is not a TLS version; choose TLSv1.2 and/or \
                     TLSv1.3, separated by a space"
                )))
            }
        };
        if !names.contains(&name) {
            versions.push(version);
            names.push(name);
        }
    }
    if versions.is_empty() {
        return Err(KvError::Config(format!(
            "[kv] tls_protocols = {v:?} names no version; choose TLSv1.2 and/or TLSv1.3"
        )));
    }
    Ok((versions, names.join(" ")))
}

/// The server configuration new handshakes take; a reload replaces it whole.
#[derive(Clone)]
pub struct KvTlsConfig(Arc<RwLock<Arc<ServerConfig>>>);

impl KvTlsConfig {
    /// What the next handshake runs with.
    pub fn current(&self) -> Arc<ServerConfig> {
        // A writer only assigns a whole `Arc`: a panic elsewhere cannot leave it half made.
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn replace(&self, config: ServerConfig) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }
}

/// The TLS listener's settings, loaded and checked.
#[derive(Clone)]
pub struct KvTls {
    /// The address to listen on (`[kv] tls_listen`).
    pub listen: String,
    /// What the handshake of every client runs with (shared by the clones: a reload through
    /// one is seen by all).
    pub config: KvTlsConfig,
    /// `tls_auth_clients`.
    pub auth_clients: AuthClients,
    /// `tls_protocols`, as Redis writes them.
    pub protocols: String,
    /// `tls_cert_file`, resolved (what `CONFIG GET` reports).
    pub cert_file: PathBuf,
    /// `tls_key_file`, resolved.
    pub key_file: PathBuf,
    /// `tls_ca_cert_file`, resolved; empty when none is set (`tls_auth_clients = "no"`).
    pub ca_cert_file: PathBuf,
}

impl std::fmt::Debug for KvTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvTls")
            .field("listen", &self.listen)
            .field("auth_clients", &self.auth_clients)
            .field("protocols", &self.protocols)
            .field("cert_file", &self.cert_file)
            .finish_non_exhaustive()
    }
}

/// The paths and words of the `tls_*` settings, before they are loaded.
pub struct TlsSettings<'a> {
    /// `tls_listen` (not empty).
    pub listen: &'a str,
    /// `tls_cert_file`, resolved; `None` when not set.
    pub cert_file: Option<PathBuf>,
    /// `tls_key_file`, resolved.
    pub key_file: Option<PathBuf>,
    /// `tls_ca_cert_file`, resolved.
    pub ca_cert_file: Option<PathBuf>,
    /// `tls_auth_clients`, as written.
    pub auth_clients: &'a str,
    /// `tls_protocols`, as written.
    pub protocols: &'a str,
}

fn file_error(setting: &str, path: &Path, why: impl std::fmt::Display) -> KvError {
    KvError::Config(format!("[kv] {setting} {}: {why}", path.display()))
}

fn read(setting: &str, path: &Path) -> Result<Vec<u8>, KvError> {
    std::fs::read(path).map_err(|e| file_error(setting, path, e))
}

impl KvTls {
    /// Loads the certificate, key and CA files and makes the server configuration. Refuses,
    /// naming the setting and the file, one that is missing, unreadable or holds no PEM
    /// certificate or key, a key readable by others or not the certificate's, and a
    /// `tls_auth_clients` other than "no" without a CA.
    pub fn load(s: &TlsSettings<'_>) -> Result<KvTls, KvError> {
        let auth_clients = AuthClients::parse(s.auth_clients)?;
        let (versions, protocols) = parse_protocols(s.protocols)?;
        let need = |setting: &str, v: &Option<PathBuf>| {
            v.clone().ok_or_else(|| {
                KvError::Config(format!(
                    "[kv] tls_listen = {:?} needs {setting}: set tls_cert_file and tls_key_file (and \
                     tls_ca_cert_file unless tls_auth_clients = \"no\"); `mojim init --tls` makes a CA and \
                     certificates",
                    s.listen
                ))
            })
        };
        let cert_file = need("tls_cert_file", &s.cert_file)?;
        let key_file = need("tls_key_file", &s.key_file)?;
        let ca_cert_file = match auth_clients {
            AuthClients::No => PathBuf::new(),
            _ => s.ca_cert_file.clone().ok_or_else(|| {
                KvError::Config(format!(
                    "[kv] tls_auth_clients = {:?} needs tls_ca_cert_file, the CA that clients' \
                     certificates must chain to; set it, or set tls_auth_clients = \"no\"",
                    auth_clients.name()
                ))
            })?,
        };
        let (config, _) =
            server_config(&cert_file, &key_file, &ca_cert_file, auth_clients, s.protocols, &versions)?;
        Ok(KvTls {
            listen: s.listen.to_string(),
            config: KvTlsConfig(Arc::new(RwLock::new(Arc::new(config)))),
            auth_clients,
            protocols,
            cert_file,
            key_file,
            ca_cert_file,
        })
    }

    /// Reads `tls_cert_file`, `tls_key_file` and `tls_ca_cert_file` again, with every check
    /// [`KvTls::load`] makes, and only if all pass makes the configuration new handshakes
    /// take; connections already open keep theirs. Says what it loaded: the certificate's
    /// subject and when it stops being valid.
    pub fn reload(&self) -> Result<String, KvError> {
        let (versions, _) = parse_protocols(&self.protocols)?;
        let (config, loaded) = server_config(
            &self.cert_file,
            &self.key_file,
            &self.ca_cert_file,
            self.auth_clients,
            &self.protocols,
            &versions,
        )?;
        self.config.replace(config);
        Ok(loaded)
    }
}

/// The server configuration made from the files, and what it presents in words.
fn server_config(
    cert_file: &Path,
    key_file: &Path,
    ca: &Path,
    auth_clients: AuthClients,
    protocols: &str,
    versions: &[&'static SupportedProtocolVersion],
) -> Result<(ServerConfig, String), KvError> {
    let chain = CertificateDer::pem_slice_iter(&read("tls_cert_file", cert_file)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error("tls_cert_file", cert_file, format!("not PEM certificates: {e}")))?;
    let Some(first) = chain.first() else {
        return Err(file_error(
            "tls_cert_file",
            cert_file,
            "holds no certificate (a PEM `CERTIFICATE` block)",
        ));
    };
    let loaded = format!(
        "certificate of {:?}, valid until {}",
        mojim_transport::PeerIdentity::of_certificate(first).subject,
        mojim_transport::tls::not_after(first).unwrap_or_else(|| "?".into())
    );
    private_key_mode(key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&read("tls_key_file", key_file)?)
        .map_err(|e| file_error("tls_key_file", key_file, format!("holds no PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| KvError::Config(format!("[kv] tls_protocols = {protocols:?}: {e}")))?;
    let builder = match auth_clients {
        AuthClients::No => builder.with_no_client_auth(),
        _ => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&read("tls_ca_cert_file", ca)?) {
                let c =
                    c.map_err(|e| file_error("tls_ca_cert_file", ca, format!("not PEM certificates: {e}")))?;
                roots
                    .add(c)
                    .map_err(|e| file_error("tls_ca_cert_file", ca, format!("not a CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(file_error(
                    "tls_ca_cert_file",
                    ca,
                    "holds no certificate (a PEM `CERTIFICATE` block)",
                ));
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth_clients == AuthClients::Optional { v.allow_unauthenticated() } else { v };
            let v = v.build().map_err(|e| file_error("tls_ca_cert_file", ca, e))?;
            builder.with_client_cert_verifier(v)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        file_error("tls_key_file", key_file, format!("is not the key of {}: {e}", cert_file.display()))
    })?;
    Ok((config, loaded))
}

/// Refuses a private key file that its group or others may read or write.
fn private_key_mode(path: &Path) -> Result<(), KvError> {
    mojim_transport::tls::client::private_key_mode(path).map_err(|e| file_error("tls_key_file", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_are_tls12_and_tls13_only() {
        assert_eq!(parse_protocols("TLSv1.2 TLSv1.3").expect("both").1, "TLSv1.2 TLSv1.3");
        assert_eq!(parse_protocols("tlsv1.3").expect("one").1, "TLSv1.3");
        assert_eq!(parse_protocols(" TLSv1.3  TLSv1.3 ").expect("once").0.len(), 1);
        for bad in ["TLSv1", "TLSv1.1 TLSv1.2", "SSLv3", "", "TLSv1.2,TLSv1.3"] {
            let e = parse_protocols(bad).expect_err(bad).to_string();
            assert!(e.contains("tls_protocols") && e.contains(&format!("{bad:?}")), "{e}");
        }
        let e = parse_protocols("TLSv1.1").expect_err("old").to_string();
        assert!(e.contains("TLSv1.1 is formally deprecated"), "{e}");
    }

    #[test]
    fn auth_clients_are_yes_optional_or_no() {
        assert_eq!(AuthClients::parse("yes").expect("yes"), AuthClients::Yes);
        assert_eq!(AuthClients::parse("OPTIONAL").expect("optional"), AuthClients::Optional);
        assert_eq!(AuthClients::parse("no").expect("no"), AuthClients::No);
        let e = AuthClients::parse("maybe").expect_err("maybe").to_string();
        assert!(e.contains("\"maybe\"") && e.contains("tls_auth_clients"), "{e}");
    }
}
