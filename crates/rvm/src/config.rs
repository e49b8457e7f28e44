//! `[rvm]`: recoverable memory's section of the configuration file: its keys, their defaults,
//! and the text `mojim init` writes for it. The library keeps the section as written; this
//! crate reads it ([`RvmSection::from_config`]) and checks its values ([`crate::RvmOptions`]).

use crate::error::{Result, RvmError};
use mojim::config::{OwnedSection, SectionError, SectionSchema};
use mojim::Config;
use serde::{Deserialize, Serialize};

/// `[rvm]`: recoverable memory, the Nephele API on a region. Every field has a default (shown
/// as `key = default`). The library keeps the section as written
/// ([`mojim::config::ConfigFile::rvm`]); this is its schema, and
/// [`RvmOptions`](crate::RvmOptions) checks the values.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RvmSection {
    /// `backend = "mojim"`: where commits go: "mojim" (this region, replicated to its mirror)
    /// or "redis" (a Redis server, `redis` below).
    pub backend: String,
    /// `base = "0x600000000000"`: the virtual address recoverable memory is created at, the
    /// first time; a recovery maps it where it was created, whatever this says.
    pub base: String,
    /// `tracking = "auto"`: how written pages are found: "uffd" (userfaultfd asynchronous
    /// write protection, Linux 6.7+), "mprotect" (page protection and a SIGSEGV handler), or
    /// "auto" (uffd if the kernel offers it, else mprotect).
    pub tracking: String,
    /// `redis = "127.0.0.1:6379"`: the Redis server of the "redis" backend.
    pub redis: String,
    /// `redis_key = "mojim-rvm"`: the prefix of every key the "redis" backend uses.
    pub redis_key: String,
    /// `redis_capacity = "64MiB"`: bytes of recoverable memory on the "redis" backend (on
    /// "mojim" it is the region's size).
    pub redis_capacity: String,
    /// `redis_password = ""`: the password the "redis" backend sends with AUTH, for a server
    /// with `requirepass` (empty: none). The `MOJIM_REDIS_PASSWORD` environment variable wins
    /// over it. A file that holds it must be private (mode 0600), as for the secret.
    pub redis_password: String,
    /// `redis_tls = false`: speak TLS to the Redis server (redis-cli's `--tls`), which needs
    /// `redis_ca_file`.
    pub redis_tls: bool,
    /// `redis_ca_file = ""`: the CA that signed the Redis server's certificate, PEM (redis-cli's
    /// `--cacert`; relative to the configuration file).
    pub redis_ca_file: String,
    /// `redis_cert_file = ""`: this client's certificate for a server with `tls-auth-clients`
    /// (redis-cli's `--cert`); set with `redis_key_file`.
    pub redis_cert_file: String,
    /// `redis_key_file = ""`: the private key of `redis_cert_file` (redis-cli's `--key`).
    pub redis_key_file: String,
}

impl Default for RvmSection {
    fn default() -> Self {
        RvmSection {
            backend: "mojim".into(),
            base: "0x600000000000".into(),
            tracking: "auto".into(),
            redis: "127.0.0.1:6379".into(),
            redis_key: "mojim-rvm".into(),
            redis_capacity: "64MiB".into(),
            redis_password: String::new(),
            redis_tls: false,
            redis_ca_file: String::new(),
            redis_cert_file: String::new(),
            redis_key_file: String::new(),
        }
    }
}

impl SectionSchema for RvmSection {
    const SECTION: OwnedSection = OwnedSection::Rvm;
}

impl RvmSection {
    /// `cfg`'s `[rvm]`, checked against the schema: a key it does not know or a value of the
    /// wrong type is refused ([`RvmError::Config`], `MOJIM_ECONFIG` in C), naming the file,
    /// `[rvm]` and the key.
    pub fn from_config(cfg: &Config) -> Result<RvmSection> {
        Ok(cfg.section()?)
    }
}

impl From<SectionError> for RvmError {
    fn from(e: SectionError) -> RvmError {
        RvmError::Config(e.to_string())
    }
}

/// The `[rvm]` section `mojim init` writes (ending in a blank line, for
/// [`mojim::config::template_with`]): every key with its default and what it does.
pub const TEMPLATE: &str = r#"[rvm]
# Recoverable memory (rvm_* in C, the mojim-rvm crate): where commits go, "mojim" (this region,
# replicated) or "redis" (a Redis server at `redis`, keys under `redis_key`, `redis_capacity`
# bytes of memory).
backend = "mojim"
# The address recoverable memory is created at the first time; recovery maps it back there.
base = "0x600000000000"
# How written pages are found: "auto", "uffd" (Linux 6.7+) or "mprotect".
tracking = "auto"
redis = "127.0.0.1:6379"
redis_key = "mojim-rvm"
redis_capacity = "64MiB"
# The password for a Redis server with requirepass (sent with AUTH; empty: none). The
# MOJIM_REDIS_PASSWORD environment variable wins over it and keeps it out of this file.
redis_password = ""
# TLS to the Redis server, as redis-cli's --tls, --cacert, --cert and --key: the CA that signed
# the server's certificate (which must name the host or IP address of `redis`), and this
# client's certificate and key for a server with tls-auth-clients (PEM, relative to this file).
redis_tls = false
redis_ca_file = ""
redis_cert_file = ""
redis_key_file = ""

"#;

#[cfg(test)]
mod tests {
    use super::*;
    use mojim::config::{template_with, ConfigFile};

    #[test]
    fn the_template_writes_every_key_with_its_default() {
        let text = template_with(&[0; 16], 4096, "", "a:1", &[TEMPLATE]);
        let file: ConfigFile = toml::from_str(&text).expect("the template parses");
        let r: RvmSection = file.section().unwrap();
        assert_eq!(format!("{r:?}"), format!("{:?}", RvmSection::default()));
        let schema = toml::Table::try_from(RvmSection::default()).unwrap();
        assert_eq!(file.rvm.keys().collect::<Vec<_>>(), schema.keys().collect::<Vec<_>>());
    }
}
