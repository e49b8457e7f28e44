//! Before anything is loaded or measured, every target is asked to run the commands the chosen
//! workloads, data types or large commands need, once each, on scratch keys (`bench:probe:*`,
//! deleted afterwards). A server that lacks one (a mojim kv built before its sets or sorted sets,
//! say) stops the benchmark with its own answer and the target's name, instead of failing half
//! way or giving numbers for errors.

use super::client::RespClient;
use super::resp::Value;
use super::targets::Target;
use mojim::error::{Error, Result};
use std::time::Duration;

/// One command of a probe, as its arguments.
pub type Probe = &'static [&'static [u8]];

/// What one choice needs: `value` of `flag` runs `probes`.
#[derive(Clone, Copy, Debug)]
pub struct Need {
    /// The flag the choice was made with (`--workloads`).
    pub flag: &'static str,
    /// The value chosen (`zadd`).
    pub value: &'static str,
    /// The commands it needs, each a probe that must not be answered with an error.
    pub probes: &'static [Probe],
}

/// The probes' keys, deleted after them.
const KEYS: [&[u8]; 5] =
    [b"bench:probe:list", b"bench:probe:zset", b"bench:probe:set", b"bench:probe:zdest", b"bench:probe:k"];

/// A list: RPUSH, LPUSH, RPOP, LRANGE.
pub const LIST: &[Probe] = &[
    &[b"RPUSH", b"bench:probe:list", b"a"],
    &[b"LPUSH", b"bench:probe:list", b"b"],
    &[b"RPOP", b"bench:probe:list"],
    &[b"LRANGE", b"bench:probe:list", b"0", b"-1"],
];
/// A sorted set: ZADD, ZRANGE WITHSCORES, ZUNIONSTORE.
pub const ZSET: &[Probe] = &[
    &[b"ZADD", b"bench:probe:zset", b"1", b"a"],
    &[b"ZRANGE", b"bench:probe:zset", b"0", b"9", b"WITHSCORES"],
    &[b"ZUNIONSTORE", b"bench:probe:zdest", b"2", b"bench:probe:zset", b"bench:probe:zset"],
];
/// A set: SADD, SISMEMBER, SREM, SCARD.
pub const SET: &[Probe] = &[
    &[b"SADD", b"bench:probe:set", b"a", b"b"],
    &[b"SISMEMBER", b"bench:probe:set", b"a"],
    &[b"SREM", b"bench:probe:set", b"b"],
    &[b"SCARD", b"bench:probe:set"],
];
/// A string: SET.
pub const STRING: &[Probe] = &[&[b"SET", b"bench:probe:k", b"a"]];
/// A hash: HSET.
pub const HASH: &[Probe] = &[&[b"HSET", b"bench:probe:k", b"f", b"a"]];

/// Runs the probes of `needs` against `target` at `addr`; the first error answer fails, naming
/// the target, the command, the answer and what to leave out.
pub fn require(addr: &str, target: Target, needs: &[Need]) -> Result<()> {
    let mut c = RespClient::connect(addr, Duration::from_secs(30))?;
    let del: Vec<&[u8]> = std::iter::once(&b"DEL"[..]).chain(KEYS).collect();
    let clear = |c: &mut RespClient| c.command(&del);
    clear(&mut c)?;
    for n in needs {
        for p in n.probes {
            if let Value::Error(e) = c.command(p)? {
                return Err(Error::Config(format!(
                    "{} cannot run {} {}: it answered {} with -{e}; leave {} out of {}, or {} out of --targets",
                    target.name(),
                    n.flag,
                    n.value,
                    String::from_utf8_lossy(p[0]),
                    n.value,
                    n.flag,
                    target.name()
                )));
            }
        }
        // Each need on keys of its own: a string probe after a list's would meet WRONGTYPE.
        clear(&mut c)?;
    }
    Ok(())
}
