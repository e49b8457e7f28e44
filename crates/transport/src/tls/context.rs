//! A node's, operator's or application's TLS settings, loaded once: the cluster's CA, its own
//! certificate and key, and the rustls configurations made from them (TLS 1.3 only, ring as the
//! crypto provider, no session resumption, AES-128-GCM first where the CPU has AES instructions).

use super::verify::{NodeVerifier, PeerVerifier};
use super::{PeerIdentity, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A TLS file that cannot be used, named by its `[security]` setting and its path.
#[derive(Debug)]
pub struct TlsFileError {
    /// `ca_file`, `cert_file` or `key_file`.
    pub setting: &'static str,
    pub file: PathBuf,
    pub reason: String,
}

impl fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[security] {} {}: {}", self.setting, self.file.display(), self.reason)
    }
}

impl std::error::Error for TlsFileError {}

/// What one side of a connection presents and trusts.
pub struct TlsContext {
    pub(crate) client: Arc<ClientConfig>,
    pub(crate) server: Arc<ServerConfig>,
    me: PeerIdentity,
}

impl fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsContext({})", self.me)
    }
}

/// The PEM files' contents and paths.
pub struct TlsFiles<'a> {
    pub ca: (&'a Path, &'a [u8]),
    pub cert: (&'a Path, &'a [u8]),
    pub key: (&'a Path, &'a [u8]),
}

impl TlsContext {
    /// Loads `ca_file`, `cert_file` and `key_file`. Refuses, naming the setting and the file, one
    /// that is missing or unreadable, holds no certificate or key, a key readable by anyone
    /// but its owner, a key that is not the certificate's, and a certificate that the CA did
    /// not sign, that is not valid now, or that carries no role.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<TlsContext, TlsFileError> {
        let read = |setting, path: &Path| {
            std::fs::read(path).map_err(|e| TlsFileError {
                setting,
                file: path.into(),
                reason: e.to_string(),
            })
        };
        let (ca_pem, cert_pem) = (read("ca_file", ca)?, read("cert_file", cert)?);
        private_key_mode(key)?;
        let key_pem = read("key_file", key)?;
        TlsContext::from_pem(&TlsFiles { ca: (ca, &ca_pem), cert: (cert, &cert_pem), key: (key, &key_pem) })
    }

    /// As [`TlsContext::load`], from the files' contents (the paths name them in errors).
    pub fn from_pem(f: &TlsFiles<'_>) -> Result<TlsContext, TlsFileError> {
        let fail = |setting, file: &Path, reason: String| TlsFileError { setting, file: file.into(), reason };
        let provider = Arc::new(rustls::crypto::CryptoProvider {
            cipher_suites: cipher_suites(),
            ..rustls::crypto::ring::default_provider()
        });
        let algs = provider.signature_verification_algorithms;

        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(f.ca.1) {
            let c = c.map_err(|e| fail("ca_file", f.ca.0, format!("not PEM certificates: {e}")))?;
            roots.add(c).map_err(|e| fail("ca_file", f.ca.0, format!("not a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(fail("ca_file", f.ca.0, "holds no certificate (a PEM `CERTIFICATE` block)".into()));
        }
        let roots = Arc::new(roots);

        let chain = CertificateDer::pem_slice_iter(f.cert.1)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| fail("cert_file", f.cert.0, format!("not PEM certificates: {e}")))?;
        let Some(mine) = chain.first() else {
            return Err(fail(
                "cert_file",
                f.cert.0,
                "holds no certificate (a PEM `CERTIFICATE` block)".into(),
            ));
        };
        let me = PeerIdentity::of_certificate(mine);
        let parsed = ParsedCertificate::try_from(mine)
            .map_err(|e| fail("cert_file", f.cert.0, format!("not a usable certificate: {e}")))?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &roots,
            &chain[1..],
            UnixTime::now(),
            algs.all,
        )
        .map_err(|e| {
            fail("cert_file", f.cert.0, format!("the certificate of {:?} is refused: {e}", me.subject))
        })?;
        if me.role.is_none() {
            return Err(fail(
                "cert_file",
                f.cert.0,
                format!(
                    "the certificate of {:?} carries no role: it needs one subject alternative name URI \
                     {}<node|operator|application>",
                    me.subject,
                    super::ROLE_URI_PREFIX
                ),
            ));
        }

        let key = PrivateKeyDer::from_pem_slice(f.key.1)
            .map_err(|e| fail("key_file", f.key.0, format!("holds no PEM private key: {e}")))?;
        let certified = CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider).map_err(|e| {
            fail(
                "key_file",
                f.key.0,
                format!("is not the key of {} ({:?}): {e}", f.cert.0.display(), me.subject),
            )
        })?;
        drop(certified);

        let tls13 = [&rustls::version::TLS13];
        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&tls13)
            .map_err(|e| fail("cert_file", f.cert.0, e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NodeVerifier { roots: roots.clone(), algs }))
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| fail("key_file", f.key.0, e.to_string()))?;
        client.resumption = rustls::client::Resumption::disabled();

        let hints = roots.subjects();
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&tls13)
            .map_err(|e| fail("cert_file", f.cert.0, e.to_string()))?
            .with_client_cert_verifier(Arc::new(PeerVerifier { roots, algs, hints }))
            .with_single_cert(chain, key)
            .map_err(|e| fail("key_file", f.key.0, e.to_string()))?;
        server.send_tls13_tickets = 0;
        Ok(TlsContext { client: Arc::new(client), server: Arc::new(server), me })
    }

    /// This side's own subject and role.
    pub fn identity(&self) -> &PeerIdentity {
        &self.me
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.me.role.expect("a loaded certificate carries a role")
    }
}

/// TLS 1.3's suites, the one offered first the cheapest on this CPU. With AES instructions
/// (x86-64's AES-NI and PCLMULQDQ, Arm's AES and PMULL) AES-128-GCM: constant-time in hardware,
/// a 128-bit key, the suite every TLS 1.3 implementation must have (RFC 8446, section 9.1), and
/// rustls updates its keys long before the records one key may seal (2^24) run out. Without
/// them ChaCha20-Poly1305, which software runs fast and in constant time. Each side offers all
/// three, so that hosts of either kind agree; the connecting side's order decides.
fn cipher_suites() -> Vec<rustls::SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite::{
        TLS13_AES_128_GCM_SHA256 as AES128, TLS13_AES_256_GCM_SHA384 as AES256,
        TLS13_CHACHA20_POLY1305_SHA256 as CHACHA,
    };
    if hardware_aes() {
        vec![AES128, AES256, CHACHA]
    } else {
        vec![CHACHA, AES128, AES256]
    }
}

/// Whether this CPU has the instructions AES-GCM needs to run fast in constant time.
pub(super) fn hardware_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes") && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Refuses a private key file that its group or others may read or write.
fn private_key_mode(path: &Path) -> Result<(), TlsFileError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| TlsFileError {
        setting: "key_file",
        file: path.into(),
        reason: e.to_string(),
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TlsFileError {
            setting: "key_file",
            file: path.into(),
            reason: format!(
                "mode {mode:03o}: a private key must be readable by its owner only: run `chmod 600 {}`",
                path.display()
            ),
        });
    }
    Ok(())
}
