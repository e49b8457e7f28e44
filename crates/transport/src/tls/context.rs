//! A node's, operator's or application's TLS settings: the cluster's CA, its own certificate
//! and key, the CA's revocation lists, and the rustls configurations made from them (TLS 1.3
//! only, ring as the crypto provider, no session resumption, AES-128-GCM first where the CPU has
//! AES instructions). Loaded at start, and reloaded in place from the same files (on SIGHUP):
//! each new handshake takes the configurations current when it starts, and sessions already
//! established keep theirs.

use super::identity::not_after;
use super::verify::{is_list_error, reason, NodeVerifier, PeerVerifier, Trust};
use super::{PeerIdentity, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// A TLS file that cannot be used, named by its `[security]` setting and its path.
#[derive(Debug)]
pub struct TlsFileError {
    /// `ca_file`, `cert_file`, `key_file` or `crl_file`.
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

/// Where a side's TLS files are (`[security] ca_file`, `cert_file`, `key_file`, `crl_file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's certificate revocation lists, if any.
    pub crl: Option<PathBuf>,
}

/// The PEM files' contents and paths.
pub struct TlsFiles<'a> {
    pub ca: (&'a Path, &'a [u8]),
    pub cert: (&'a Path, &'a [u8]),
    pub key: (&'a Path, &'a [u8]),
    /// The CA's certificate revocation lists (PEM `X509 CRL` blocks), if any.
    pub crl: Option<(&'a Path, &'a [u8])>,
}

/// What a load or a reload put in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsLoaded {
    /// This side's certificate's subject and role.
    pub identity: PeerIdentity,
    /// When that certificate stops being valid (`YYYY-MM-DD HH:MM:SS UTC`).
    pub not_after: String,
    /// How many revocation lists `crl_file` holds (0 without one).
    pub revocation_lists: usize,
}

impl fmt::Display for TlsLoaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "certificate of {}, valid until {}, {} revocation list{}",
            self.identity,
            self.not_after,
            self.revocation_lists,
            if self.revocation_lists == 1 { "" } else { "s" }
        )
    }
}

/// The configurations new handshakes use, and what they were made from.
struct Configs {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    loaded: TlsLoaded,
}

/// What one side of a connection presents and trusts, reloadable in place.
pub struct TlsContext {
    paths: TlsPaths,
    /// Read once per handshake; replaced whole by a reload whose files all pass.
    current: RwLock<Arc<Configs>>,
    /// Placed records' bodies are encrypted, not only authenticated (`[security]
    /// encrypt_placed`; a reload keeps it).
    encrypt_placed: bool,
}

impl fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsContext({})", self.current().loaded.identity)
    }
}

/// Reads `path`, naming `setting` if it cannot.
fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|e| TlsFileError { setting, file: path.into(), reason: e.to_string() })
}

impl TlsContext {
    /// Loads `ca_file`, `cert_file`, `key_file` and `crl_file`. Refuses, naming the setting and
    /// the file, one that is missing or unreadable, holds no certificate, key or revocation
    /// list, a key readable by anyone but its owner, a key that is not the certificate's, a
    /// certificate that the CA did not sign, that is not valid now, that a list revokes or that
    /// carries no role, and a revocation list that is not one or that no CA in `ca_file` issued.
    pub fn load(paths: &TlsPaths) -> Result<TlsContext, TlsFileError> {
        let configs = Self::read_files(paths)?;
        Ok(TlsContext {
            paths: paths.clone(),
            current: RwLock::new(Arc::new(configs)),
            encrypt_placed: false,
        })
    }

    /// As [`TlsContext::load`], from the files' contents (the paths name them in errors, and
    /// [`TlsContext::reload`] reads them).
    pub fn from_pem(f: &TlsFiles<'_>) -> Result<TlsContext, TlsFileError> {
        let configs = Self::configs(f)?;
        let paths = TlsPaths {
            ca: f.ca.0.into(),
            cert: f.cert.0.into(),
            key: f.key.0.into(),
            crl: f.crl.map(|c| c.0.into()),
        };
        Ok(TlsContext { paths, current: RwLock::new(Arc::new(configs)), encrypt_placed: false })
    }

    /// This context, encrypting the bodies of the records its connections place in a peer's
    /// log when `on` (`[security] encrypt_placed`; docs/FORMAT.md §2.4), where they are
    /// otherwise only authenticated. Both sides of a placed lane must agree: a primary says so in
    /// its Hello, and a node set otherwise refuses the lane.
    pub fn with_encrypt_placed(mut self, on: bool) -> TlsContext {
        self.encrypt_placed = on;
        self
    }

    /// Whether placed records' bodies are encrypted ([`TlsContext::with_encrypt_placed`]).
    pub fn encrypt_placed(&self) -> bool {
        self.encrypt_placed
    }

    /// Reads the files again, with every check [`TlsContext::load`] makes, and only if all pass
    /// puts their configurations in place for the handshakes that start from now on; sessions
    /// already established keep theirs. A certificate of another role than the one this side
    /// started with is refused (a change of role needs a restart). On an error nothing changes.
    pub fn reload(&self) -> Result<TlsLoaded, TlsFileError> {
        let configs = Self::read_files(&self.paths)?;
        let (was, now) = (self.role(), configs.loaded.identity.role);
        if now != Some(was) {
            return Err(TlsFileError {
                setting: "cert_file",
                file: self.paths.cert.clone(),
                reason: format!(
                    "the certificate of {} is refused: this side runs as {was}, and a change of role \
                     needs a restart",
                    configs.loaded.identity
                ),
            });
        }
        let loaded = configs.loaded.clone();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(configs);
        Ok(loaded)
    }

    /// The files this context is loaded from.
    pub fn paths(&self) -> &TlsPaths {
        &self.paths
    }

    /// What is loaded now.
    pub fn loaded(&self) -> TlsLoaded {
        self.current().loaded.clone()
    }

    /// This side's own subject and role, as loaded now.
    pub fn identity(&self) -> PeerIdentity {
        self.current().loaded.identity.clone()
    }

    /// This side's role (a reload keeps it).
    pub fn role(&self) -> Role {
        self.current().loaded.identity.role.expect("a loaded certificate carries a role")
    }

    /// The configuration a new connecting handshake uses.
    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        self.current().client.clone()
    }

    /// The configuration a new accepting handshake uses.
    pub(crate) fn server_config(&self) -> Arc<ServerConfig> {
        self.current().server.clone()
    }

    fn current(&self) -> Arc<Configs> {
        // A writer only assigns a whole `Arc`: a panic elsewhere cannot leave it half made.
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn read_files(paths: &TlsPaths) -> Result<Configs, TlsFileError> {
        let (ca_pem, cert_pem) = (read("ca_file", &paths.ca)?, read("cert_file", &paths.cert)?);
        private_key_mode(&paths.key)?;
        let key_pem = read("key_file", &paths.key)?;
        let crl_pem = match &paths.crl {
            Some(p) => Some((p.as_path(), read("crl_file", p)?)),
            None => None,
        };
        Self::configs(&TlsFiles {
            ca: (&paths.ca, &ca_pem),
            cert: (&paths.cert, &cert_pem),
            key: (&paths.key, &key_pem),
            crl: crl_pem.as_ref().map(|(p, b)| (*p, b.as_slice())),
        })
    }

    fn configs(f: &TlsFiles<'_>) -> Result<Configs, TlsFileError> {
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
        let crls = match f.crl {
            Some((path, pem)) => revocation_lists(path, pem, &roots, f.ca.0)?,
            None => Vec::new(),
        };
        let trust = Arc::new(Trust { roots: Arc::new(roots), crls, algs });

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
        trust.verify_chain(mine, &chain[1..], UnixTime::now()).map_err(|e| {
            let message = format!("the certificate of {:?} is refused: {}", me.subject, reason(&e));
            match f.crl {
                Some((crl, _)) if is_list_error(&e) => fail("crl_file", crl, message),
                _ => fail("cert_file", f.cert.0, message),
            }
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
        let loaded = TlsLoaded {
            not_after: not_after(mine).unwrap_or_else(|| "?".into()),
            identity: me.clone(),
            revocation_lists: trust.crls.len(),
        };

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
            .with_custom_certificate_verifier(Arc::new(NodeVerifier { trust: trust.clone() }))
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(|e| fail("key_file", f.key.0, e.to_string()))?;
        client.resumption = rustls::client::Resumption::disabled();

        let hints = trust.roots.subjects();
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&tls13)
            .map_err(|e| fail("cert_file", f.cert.0, e.to_string()))?
            .with_client_cert_verifier(Arc::new(PeerVerifier { trust, hints }))
            .with_single_cert(chain, key)
            .map_err(|e| fail("key_file", f.key.0, e.to_string()))?;
        server.send_tls13_tickets = 0;
        Ok(Configs { client: Arc::new(client), server: Arc::new(server), loaded })
    }
}

/// The revocation lists in `pem` (the file `path`), each issued by a CA of `roots` (from
/// `ca_file`); their signatures are checked when a certificate of that CA is.
fn revocation_lists(
    path: &Path,
    pem: &[u8],
    roots: &RootCertStore,
    ca_file: &Path,
) -> Result<Vec<webpki::CertRevocationList<'static>>, TlsFileError> {
    let fail = |reason: String| TlsFileError { setting: "crl_file", file: path.into(), reason };
    let mut crls = Vec::new();
    for (i, der) in CertificateRevocationListDer::pem_slice_iter(pem).enumerate() {
        let der = der.map_err(|e| fail(format!("not PEM revocation lists: {e}")))?;
        let crl = webpki::OwnedCertRevocationList::from_der(der.as_ref()).map_err(|e| {
            fail(format!("list {} is not a certificate revocation list webpki can use: {e:?}", i + 1))
        })?;
        let crl = webpki::CertRevocationList::from(crl);
        if !roots.roots.iter().any(|ta| ta.subject.as_ref() == crl.issuer()) {
            return Err(fail(format!(
                "list {} was not issued by a CA in [security] ca_file {}: a list must come from the \
                 cluster's CA",
                i + 1,
                ca_file.display()
            )));
        }
        crls.push(crl);
    }
    if crls.is_empty() {
        return Err(fail("holds no revocation list (a PEM `X509 CRL` block)".into()));
    }
    Ok(crls)
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
    super::client::private_key_mode(path).map_err(|reason| TlsFileError {
        setting: "key_file",
        file: path.into(),
        reason,
    })
}
