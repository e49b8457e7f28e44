//! How to reach the Redis server of the Redis backend, checked.

use super::tls::RedisTls;
use crate::error::{Result, RvmError};
use crate::layout::{META_LEN, PAGE};
use std::time::Duration;

/// The longest key prefix taken, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// The environment variable whose value, if set and not empty, is the Redis password (it wins
/// over `[rvm] redis_password`, as `MOJIM_SECRET` does over the file's secret).
pub const REDIS_PASSWORD_ENV: &str = "MOJIM_REDIS_PASSWORD";

/// The password the Redis backend sends with `AUTH`, and where it came from (messages name
/// that, never the password; `Debug` prints neither).
#[derive(Clone)]
pub struct RedisPassword {
    /// The password.
    pub value: String,
    /// Where it came from: `[rvm] redis_password` or [`REDIS_PASSWORD_ENV`].
    pub from: &'static str,
}

impl std::fmt::Debug for RedisPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisPassword(from {})", self.from)
    }
}

impl RedisPassword {
    /// [`REDIS_PASSWORD_ENV`] if set and not empty, else `from_file` (`[rvm] redis_password`)
    /// if not empty, else none.
    pub fn resolve(from_file: &str) -> Option<RedisPassword> {
        match std::env::var(REDIS_PASSWORD_ENV) {
            Ok(v) if !v.is_empty() => Some(RedisPassword { value: v, from: REDIS_PASSWORD_ENV }),
            _ if !from_file.is_empty() => {
                Some(RedisPassword { value: from_file.to_string(), from: "[rvm] redis_password" })
            }
            _ => None,
        }
    }
}

/// How to reach the Redis server that holds recoverable memory.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// The server, `host:port` (`[rvm] redis`).
    pub addr: String,
    /// The prefix of every key (`[rvm] redis_key`).
    pub key: String,
    /// Bytes of recoverable memory, whole pages (`[rvm] redis_capacity`).
    pub capacity: u64,
    /// How long to wait to connect, and for each read or write on the connection.
    pub timeout: Duration,
    /// The password for `AUTH` (the server's `requirepass`), if the server wants one
    /// (`[rvm] redis_password`, or [`REDIS_PASSWORD_ENV`]).
    pub password: Option<RedisPassword>,
    /// TLS to the server (`[rvm] redis_tls`, `redis_ca_file`, `redis_cert_file`,
    /// `redis_key_file`), or plain TCP.
    pub tls: Option<RedisTls>,
}

impl RedisOptions {
    /// The timeout `[rvm]` settings get.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// Checks every field; the error names the setting and the fix.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(RvmError::Config(m));
        let port =
            self.addr.rsplit_once(':').and_then(|(h, p)| p.parse::<u16>().ok().filter(|_| !h.is_empty()));
        if port.is_none_or(|p| p == 0) {
            return bad(format!(
                "[rvm] redis = {:?} is not host:port: use e.g. \"127.0.0.1:6379\"",
                self.addr
            ));
        }
        if self.key.is_empty()
            || self.key.len() > MAX_KEY_LEN
            || self.key.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return bad(format!(
                "[rvm] redis_key = {:?} is not a key prefix: use 1 to {MAX_KEY_LEN} bytes without spaces \
                 or control characters, e.g. \"mojim-rvm\"",
                self.key
            ));
        }
        if self.capacity < META_LEN + PAGE || !self.capacity.is_multiple_of(PAGE) {
            return bad(format!(
                "[rvm] redis_capacity = {} bytes is not a whole number of {PAGE}-byte pages of at least {} \
                 (the meta block and a page): use e.g. \"64MiB\"",
                self.capacity,
                META_LEN + PAGE
            ));
        }
        if self.timeout.is_zero() {
            return bad("the Redis timeout is zero: use e.g. RedisOptions::DEFAULT_TIMEOUT".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RedisOptions {
        RedisOptions {
            addr: "127.0.0.1:6379".into(),
            key: "mojim-rvm".into(),
            capacity: 1 << 20,
            timeout: RedisOptions::DEFAULT_TIMEOUT,
            password: None,
            tls: None,
        }
    }

    #[test]
    fn options_are_checked_and_each_error_names_its_setting() {
        opts().check().unwrap();
        type Change = fn(&mut RedisOptions);
        let cases: [(Change, &str); 8] = [
            (|o| o.addr = "localhost".into(), "[rvm] redis ="),
            (|o| o.addr = "127.0.0.1:99999".into(), "[rvm] redis ="),
            (|o| o.addr = ":6379".into(), "[rvm] redis ="),
            (|o| o.key = String::new(), "[rvm] redis_key"),
            (|o| o.key = "a b".into(), "[rvm] redis_key"),
            (|o| o.capacity = (1 << 20) + 1, "[rvm] redis_capacity"),
            (|o| o.capacity = META_LEN, "[rvm] redis_capacity"),
            (|o| o.timeout = Duration::ZERO, "timeout"),
        ];
        for (change, named) in cases {
            let mut o = opts();
            change(&mut o);
            match o.check() {
                Err(RvmError::Config(m)) => assert!(m.contains(named), "{m}"),
                other => panic!("{o:?}: {other:?}"),
            }
        }
    }
}
