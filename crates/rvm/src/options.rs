//! How to open recoverable memory: from the `[rvm]` section of a configuration file.

use crate::config::RvmSection;
use crate::error::{Result, RvmError};
use crate::redis::{RedisOptions, RedisTls};
use mojim::{Config, PrimaryOptions};
use mojim_region::WriteTracking;
use std::path::PathBuf;

/// Where recoverable memory's bytes are kept.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // made once per open: not worth a box in every match
pub enum Backend {
    /// A Mojim region, replicated to its mirror (`[rvm] backend = "mojim"`).
    Mojim(PrimaryOptions),
    /// A Redis server (`[rvm] backend = "redis"`, `redis`, `redis_key`, `redis_capacity`).
    Redis(RedisOptions),
}

/// How to open recoverable memory.
#[derive(Clone, Debug)]
pub struct RvmOptions {
    /// The backend.
    pub backend: Backend,
    /// Where to create the memory if the backend holds none (`[rvm] base`); recovery maps it
    /// where it was created.
    pub base: usize,
    /// How to find written pages: `None` for userfaultfd if the kernel offers it, else page
    /// protection (`[rvm] tracking`).
    pub tracking: Option<WriteTracking>,
}

/// The default `[rvm] base`: far from where Linux puts programs, heaps, libraries and stacks.
pub const DEFAULT_BASE: usize = 0x6000_0000_0000;

impl RvmOptions {
    /// Options from a configuration file's `[rvm]` section (and `[region]`, `[primary]` for
    /// the Mojim backend; the Redis backend reads `[rvm]` only).
    pub fn from_config(cfg: &Config, insecure: bool) -> Result<RvmOptions> {
        let r = &RvmSection::from_config(cfg)?;
        let backend = match r.backend.as_str() {
            "mojim" => Backend::Mojim(PrimaryOptions::from_config(cfg, insecure)?),
            "redis" => Backend::Redis(redis_options(r, |p| cfg.resolve(p))?),
            other => {
                return Err(RvmError::Config(format!(
                    "[rvm] backend = \"{other}\" is not a backend: use \"mojim\" or \"redis\""
                )))
            }
        };
        Ok(RvmOptions { backend, base: parse_base(&r.base)?, tracking: parse_tracking(&r.tracking)? })
    }
}

/// `[rvm] redis`, `redis_key`, `redis_capacity` and `redis_password` (or
/// [`crate::REDIS_PASSWORD_ENV`], which wins), and the TLS settings `redis_tls`,
/// `redis_ca_file`, `redis_cert_file`, `redis_key_file` (their files loaded, paths made
/// absolute by `resolve`), checked (the timeout is [`RedisOptions::DEFAULT_TIMEOUT`]).
pub fn redis_options(r: &RvmSection, resolve: impl Fn(&str) -> PathBuf) -> Result<RedisOptions> {
    let capacity = mojim::size::parse_size(&r.redis_capacity)
        .map_err(|e| RvmError::Config(format!("[rvm] redis_capacity: {e}")))?;
    let o = RedisOptions {
        addr: r.redis.trim().to_string(),
        key: r.redis_key.clone(),
        capacity,
        timeout: RedisOptions::DEFAULT_TIMEOUT,
        password: crate::RedisPassword::resolve(&r.redis_password),
        tls: redis_tls(r, resolve)?,
    };
    o.check()?;
    Ok(o)
}

/// The TLS settings of `[rvm]`, checked and loaded: `redis_tls` needs `redis_ca_file`; the files
/// need `redis_tls`; `redis_cert_file` and `redis_key_file` go together.
fn redis_tls(r: &RvmSection, resolve: impl Fn(&str) -> PathBuf) -> Result<Option<RedisTls>> {
    let bad = |m: &str| Err(RvmError::Config(m.into()));
    let (ca, cert, key) = (&r.redis_ca_file, &r.redis_cert_file, &r.redis_key_file);
    if !r.redis_tls {
        if !ca.is_empty() || !cert.is_empty() || !key.is_empty() {
            return bad("[rvm] redis_ca_file, redis_cert_file and redis_key_file are for TLS to Redis, but \
                 redis_tls = false: set redis_tls = true, or clear the files");
        }
        return Ok(None);
    }
    if ca.is_empty() {
        return bad(
            "[rvm] redis_tls = true needs redis_ca_file: name the CA that signed the Redis server's \
             certificate (redis-cli's --cacert)",
        );
    }
    let identity = match (cert.is_empty(), key.is_empty()) {
        (true, true) => None,
        (false, false) => Some((resolve(cert), resolve(key))),
        (false, true) => {
            return bad("[rvm] redis_cert_file is set but redis_key_file is not: set both, or neither")
        }
        (true, false) => {
            return bad("[rvm] redis_key_file is set but redis_cert_file is not: set both, or neither")
        }
    };
    let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    RedisTls::load(&resolve(ca), identity).map(Some)
}

/// `[rvm] base`: a page-aligned address, in hex (`0x…`) or decimal.
pub fn parse_base(s: &str) -> Result<usize> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => usize::from_str_radix(&h.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    match v {
        Ok(v) if v != 0 && v.is_multiple_of(4096) && v < (1 << 47) => Ok(v),
        _ => Err(RvmError::Config(format!(
            "[rvm] base = \"{s}\" is not a page-aligned user-space address: use e.g. \"0x600000000000\""
        ))),
    }
}

/// `[rvm] tracking`: `auto`, `uffd` or `mprotect`.
pub fn parse_tracking(s: &str) -> Result<Option<WriteTracking>> {
    match s {
        "auto" | "" => Ok(None),
        "uffd" => Ok(Some(WriteTracking::UffdAsync)),
        "mprotect" => Ok(Some(WriteTracking::Mprotect)),
        other => Err(RvmError::Config(format!(
            "[rvm] tracking = \"{other}\" is not a method: use \"auto\", \"uffd\" or \"mprotect\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_named() {
        assert_eq!(parse_base("0x600000000000").unwrap(), DEFAULT_BASE);
        assert!(parse_base("0x6000000001").unwrap_err().to_string().contains("[rvm] base"));
        assert!(parse_base("0").is_err());
        assert_eq!(parse_tracking("mprotect").unwrap(), Some(WriteTracking::Mprotect));
        assert!(parse_tracking("soft-dirty").unwrap_err().to_string().contains("soft-dirty"));
    }

    fn config(change: impl FnOnce(&mut RvmSection)) -> Config {
        let mut c = Config { file: Default::default(), base: Default::default(), path: None };
        c.file
            .edit_section(|r: &mut RvmSection| {
                r.backend = "redis".into();
                change(r);
            })
            .expect("an empty [rvm] reads as its defaults");
        c
    }

    #[test]
    fn the_redis_backend_is_read_from_the_rvm_section_alone() {
        let o = RvmOptions::from_config(&config(|r| r.redis_capacity = "1MiB".into()), false).unwrap();
        match o.backend {
            Backend::Redis(r) => {
                assert_eq!(
                    (r.addr.as_str(), r.key.as_str(), r.capacity),
                    ("127.0.0.1:6379", "mojim-rvm", 1 << 20)
                )
            }
            other => panic!("{other:?}"),
        }
        let defaults = RvmOptions::from_config(&config(|_| {}), false).unwrap();
        assert!(
            matches!(defaults.backend, Backend::Redis(RedisOptions { capacity, .. }) if capacity == 64 << 20)
        );
    }

    #[test]
    fn bad_redis_settings_are_named() {
        type Change = fn(&mut RvmSection);
        let cases: [(Change, &str); 10] = [
            (|r| r.redis_tls = true, "redis_tls = true needs redis_ca_file"),
            (|r| r.redis_ca_file = "ca.pem".into(), "but redis_tls = false"),
            (|r| r.redis_cert_file = "c.pem".into(), "but redis_tls = false"),
            (
                |r| {
                    (r.redis_tls, r.redis_ca_file, r.redis_cert_file) =
                        (true, "ca.pem".into(), "c.pem".into())
                },
                "redis_key_file is not",
            ),
            (
                |r| (r.redis_tls, r.redis_ca_file) = (true, "/nonexistent/ca.pem".into()),
                "[rvm] redis_ca_file /nonexistent/ca.pem: No such file",
            ),
            (|r| r.redis_capacity = "lots".into(), "[rvm] redis_capacity: \"lots\""),
            (|r| r.redis_capacity = "4KiB".into(), "[rvm] redis_capacity = 4096"),
            (|r| r.redis = "redis.example".into(), "[rvm] redis = \"redis.example\""),
            (|r| r.redis_key = "".into(), "[rvm] redis_key = \"\""),
            (|r| r.backend = "memcached".into(), "\"memcached\" is not a backend"),
        ];
        for (change, named) in cases {
            match RvmOptions::from_config(&config(change), false) {
                Err(RvmError::Config(m)) => assert!(m.contains(named), "{m}"),
                other => panic!("{named}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_key_outside_the_schema_is_a_configuration_error_naming_the_file_and_key() {
        let mut c = config(|_| {});
        c.path = Some("/etc/mojim/mojim.toml".into());
        c.file.rvm.insert("tracking_mode".into(), toml::Value::String("uffd".into()));
        match RvmOptions::from_config(&c, false) {
            Err(RvmError::Config(m)) => {
                assert!(m.contains("/etc/mojim/mojim.toml: [rvm] tracking_mode: unknown field"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
