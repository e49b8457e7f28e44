//! `mojim kv`'s settings: the `[kv]` section, checked, with the region's and the primary's.

use crate::error::KvError;
use crate::resp::Limits;
use crate::tls::{KvTls, TlsSettings};
use mojim::{Config, PrimaryOptions};

/// Everything `mojim kv` needs, read once at start-up.
#[derive(Clone, Debug)]
pub struct KvOptions {
    /// How to open the region and reach its mirror.
    pub primary: PrimaryOptions,
    /// The address to listen on in plaintext ("": no plaintext listener).
    pub listen: String,
    /// The TLS listener, if any (`[kv] tls_listen`).
    pub tls: Option<KvTls>,
    /// Request limits.
    pub limits: Limits,
    /// Connections served at once.
    pub max_clients: usize,
    /// Most bytes one batch may store: half a lane's log, so that its group always fits.
    pub max_group_bytes: u64,
    /// The address Sentinel answers give for this server ("" : the one listened on).
    pub announce: String,
    /// The Sentinel master name.
    pub sentinel_name: String,
    /// Every node's `mojim kv` address.
    pub sentinels: Vec<String>,
    /// A turn of reads alone waits for a round trip to the mirror before answering.
    pub read_barrier: bool,
    /// The password clients must give (`AUTH`), if any.
    pub password: Option<Password>,
    /// Without a password, refuse addresses other than loopback.
    pub protected_mode: bool,
    /// The most reply bytes a client may have waiting.
    pub output_limit: usize,
    /// Databases clients may select (`SELECT 0` .. `databases - 1`).
    pub databases: usize,
    /// How long start-up waits for a mirror it cannot reach yet ([`DEFAULT_MIRROR_WAIT`];
    /// `mojim kv --mirror-wait`), trying again every second; zero fails at once.
    pub mirror_wait: std::time::Duration,
}

/// How long `mojim kv` waits for its mirror at start unless told otherwise.
pub const DEFAULT_MIRROR_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The `default` user's password, compared in constant time.
#[derive(Clone)]
pub struct Password(Vec<u8>);

impl Password {
    /// A password (not empty).
    pub fn new(p: &[u8]) -> Password {
        Password(p.to_vec())
    }

    /// The password's text, for `CONFIG GET requirepass` (to a client that gave it).
    pub fn reveal(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// Whether `given` is the password. The time taken depends on neither's bytes nor their
    /// lengths: both are hashed, and the digests compared with no early exit.
    pub fn matches(&self, given: &[u8]) -> bool {
        use sha2::{Digest, Sha256};
        let (a, b) = (Sha256::digest(&self.0), Sha256::digest(given));
        a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

fn size(key: &str, v: &str, min: u64, max: u64) -> Result<usize, KvError> {
    let n = mojim::size::parse_size(v).map_err(|e| KvError::Config(format!("[kv] {key}: {e}")))?;
    if n < min || n > max {
        return Err(KvError::Config(format!(
            "[kv] {key} = {v:?} is out of range: it must be from {min} to {max} bytes"
        )));
    }
    Ok(n as usize)
}

impl KvOptions {
    /// Reads `cfg`'s `[kv]` section (and what the primary needs); `listen` overrides
    /// `[kv] listen`, `tls_listen` `[kv] tls_listen`.
    pub fn from_config(
        cfg: &Config,
        insecure: bool,
        listen: Option<&str>,
        tls_listen: Option<&str>,
    ) -> Result<KvOptions, KvError> {
        let primary = PrimaryOptions::from_config(cfg, insecure)?;
        let k = &crate::KvSection::from_config(cfg)?;
        let max_bulk = size("max_bulk", &k.max_bulk, 1, 1 << 30)?;
        let max_inline = size("max_inline", &k.max_inline, 64, 1 << 30)?;
        if k.max_args == 0 || k.max_args > 1 << 24 {
            return Err(KvError::Config(format!(
                "[kv] max_args = {} is out of range: it must be from 1 to {}",
                k.max_args,
                1u64 << 24
            )));
        }
        if k.max_clients == 0 || k.max_clients > 1 << 20 {
            return Err(KvError::Config(format!(
                "[kv] max_clients = {} is out of range: it must be from 1 to {}",
                k.max_clients,
                1u64 << 20
            )));
        }
        if primary.limits.max_ranges < 2 {
            return Err(KvError::Config(format!(
                "[limits] max_ranges = {} is too few for mojim kv: a batch's group is its ranges and the \
                 journal's, so it needs at least 2",
                primary.limits.max_ranges
            )));
        }
        let log = cfg.log_capacity()?;
        let max_group_bytes = log / 2;
        if (max_bulk as u64) * 2 + (1 << 20) > max_group_bytes {
            return Err(KvError::Config(format!(
                "[kv] max_bulk = {:?} does not fit a group: one SET of that size needs about twice it, and a \
                 group may carry half of [mirror] log_capacity ({}); lower max_bulk or raise log_capacity",
                k.max_bulk, cfg.file.mirror.log_capacity
            )));
        }
        let listen = listen.unwrap_or(&k.listen).to_string();
        let password = match std::env::var_os("MOJIM_KV_PASSWORD") {
            Some(p) => p.into_encoded_bytes(),
            None => k.password.clone().into_bytes(),
        };
        let password = (!password.is_empty()).then(|| Password::new(&password));
        let tls_listen = tls_listen.unwrap_or(&k.tls_listen).to_string();
        let tls = if tls_listen.is_empty() {
            None
        } else {
            let file = |v: &str| (!v.is_empty()).then(|| cfg.resolve(v));
            Some(KvTls::load(&TlsSettings {
                listen: &tls_listen,
                cert_file: file(&k.tls_cert_file),
                key_file: file(&k.tls_key_file),
                ca_cert_file: file(&k.tls_ca_cert_file),
                auth_clients: &k.tls_auth_clients,
                protocols: &k.tls_protocols,
            })?)
        };
        if listen.is_empty() && tls.is_none() {
            return Err(KvError::Config(
                "[kv] listen is empty (no plaintext listener) and so is [kv] tls_listen: mojim kv would \
                 serve no one; set either"
                    .into(),
            ));
        }
        if password.is_none() && k.protected_mode && !listen.is_empty() && !is_loopback(&listen) {
            return Err(KvError::Config(format!(
                "protected mode: mojim kv would listen on {listen}, which is not a loopback address, with no \
                 password, so anyone who reaches the port could read, change and flush the data; set [kv] \
                 password (or MOJIM_KV_PASSWORD), listen on 127.0.0.1, or set [kv] protected_mode = false"
            )));
        }
        // Over TLS, a client that had to present a certificate from the CA is known.
        if let Some(t) = tls.as_ref().filter(|t| t.auth_clients != crate::tls::AuthClients::Yes) {
            if password.is_none() && k.protected_mode && !is_loopback(&t.listen) {
                return Err(KvError::Config(format!(
                    "protected mode: mojim kv would listen on {} (tls_listen), which is not a loopback \
                     address, with no password and tls_auth_clients = \"{}\", so anyone who reaches the port \
                     could read, change and flush the data; set [kv] password (or MOJIM_KV_PASSWORD), \
                     tls_auth_clients = \"yes\", listen on 127.0.0.1, or set [kv] protected_mode = false",
                    t.listen,
                    t.auth_clients.name()
                )));
            }
        }
        if k.databases == 0 || k.databases > mojim_kv_dbs() {
            return Err(KvError::Config(format!(
                "[kv] databases = {} is out of range: it must be from 1 to {}",
                k.databases,
                mojim_kv_dbs()
            )));
        }
        let output_limit = size("output_limit", &k.output_limit, 1 << 20, 1 << 40)?;
        if output_limit < max_bulk.saturating_mul(2) {
            return Err(KvError::Config(format!(
                "[kv] output_limit = {:?} is less than twice max_bulk ({:?}): a GET of the largest value \
                 would close its client; raise output_limit or lower max_bulk",
                k.output_limit, k.max_bulk
            )));
        }
        for s in k.sentinels.iter().chain(std::iter::once(&k.announce).filter(|a| !a.is_empty())) {
            if split_host_port(s).is_none() {
                return Err(KvError::Config(format!(
                    "[kv] sentinels/announce: {s:?} is not host:port (e.g. \"10.0.0.2:6379\")"
                )));
            }
        }
        Ok(KvOptions {
            primary,
            listen,
            tls,
            limits: Limits { max_bulk, max_args: k.max_args as usize, max_inline },
            max_clients: k.max_clients as usize,
            max_group_bytes,
            announce: k.announce.clone(),
            sentinel_name: k.sentinel_name.clone(),
            sentinels: k.sentinels.clone(),
            read_barrier: k.read_barrier,
            password,
            protected_mode: k.protected_mode,
            output_limit,
            databases: k.databases as usize,
            mirror_wait: DEFAULT_MIRROR_WAIT,
        })
    }
}

/// `host:port` split at the last colon, the port a number.
pub fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (h, p) = s.rsplit_once(':')?;
    let port = p.parse().ok()?;
    (!h.is_empty()).then(|| (h.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}

/// Databases a store holds at most.
fn mojim_kv_dbs() -> u64 {
    crate::store::layout::DBS as u64
}

/// Whether every address `listen` names is a loopback address (a name that does not resolve
/// is not).
fn is_loopback(listen: &str) -> bool {
    use std::net::ToSocketAddrs;
    match listen.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_match_only_themselves() {
        let p = Password::new(b"sesame");
        assert!(p.matches(b"sesame"));
        assert!(!p.matches(b"sesam"));
        assert!(!p.matches(b"sesame "));
        assert!(!p.matches(b""));
        assert_eq!(format!("{p:?}"), "Password(..)", "never printed");
    }

    #[test]
    fn loopback_addresses() {
        assert!(is_loopback("127.0.0.1:6379"));
        assert!(is_loopback("[::1]:0"));
        assert!(is_loopback("localhost:6379"));
        assert!(!is_loopback("0.0.0.0:6379"));
        assert!(!is_loopback("[::]:6379"));
        assert!(!is_loopback("10.1.2.3:6379"));
        assert!(!is_loopback("no-such-host.invalid:6379"));
    }
}
