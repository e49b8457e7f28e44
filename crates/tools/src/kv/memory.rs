//! `mojim bench --kv-memory`: what a key costs in memory, per data type. For each type of
//! `--memory-types`, `--members` elements of [`VALUE_BYTES`] bytes are loaded into a freshly
//! started target, one element per key, and for the collections also [`GROUP`] elements per key
//! (`--members / 100` keys):
//!
//! | type | one key |
//! |---|---|
//! | string | `SET key value` |
//! | hash | `HSET key f0 value0 f1 value1 ...` |
//! | list | `RPUSH key value0 value1 ...` |
//! | set | `SADD key value0 value1 ...` |
//! | zset | `ZADD key 0 value0 1 value1 ...` |
//!
//! Keys are the string records' names (`user<fnv64(n)>`); element `j`'s value is `j` in ten
//! digits and 90 letters, so that a key's members differ. The commands are pipelined (a
//! thousand one-element commands, or 16 000 elements, before the replies are read), with
//! progress on stderr.
//!
//! Memory is read from `INFO memory` before and after the load, on the same server:
//! `used_memory`, which for Redis is its allocator's bytes in use and for mojim kv the bytes of
//! the region's heap blocks that hold entries (an entry's 32-byte header, its key with a
//! 5-byte database prefix, its value or its collection's structure, and each block's slack up
//! to its size class). mojim kv's bucket array lies outside the heap, is sized by the region
//! (8 bytes per bucket, a bucket per 256 bytes of region) and not by the keys: INFO gives it
//! as `mojim_bucket_array_bytes`, and it is reported apart. Redis's hash table is in its
//! `used_memory`.

use super::fill::Fill;
use super::probe::{self, Need};
use super::targets::{Env, Target};
use super::{key_name, start_all, KvArgs};
use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use serde::Serialize;
use std::io::Write;

/// Bytes of every element's value.
pub const VALUE_BYTES: usize = 100;
/// Elements per key of the grouped tests.
pub const GROUP: u64 = 100;
/// Bytes of a mojim kv entry's header (FORMAT.md §11, the entry).
pub const ENTRY_HEADER_BYTES: f64 = 32.0;

/// A data type measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataType {
    /// SET.
    String,
    /// HSET.
    Hash,
    /// RPUSH.
    List,
    /// SADD.
    Set,
    /// ZADD.
    Zset,
}

impl DataType {
    /// The name in flags and results.
    pub fn name(self) -> &'static str {
        match self {
            DataType::String => "string",
            DataType::Hash => "hash",
            DataType::List => "list",
            DataType::Set => "set",
            DataType::Zset => "zset",
        }
    }

    /// The commands a target needs for it.
    pub fn need(self) -> Need {
        let probes = match self {
            DataType::String => probe::STRING,
            DataType::Hash => probe::HASH,
            DataType::List => probe::LIST,
            DataType::Set => probe::SET,
            DataType::Zset => probe::ZSET,
        };
        Need { flag: "--memory-types", value: self.name(), probes }
    }

    /// The elements per key measured: 1, and for a collection also [`GROUP`].
    pub fn shapes(self) -> &'static [u64] {
        if self == DataType::String {
            &[1]
        } else {
            &[1, GROUP]
        }
    }
}

/// What to run.
pub struct Plan<'a> {
    /// The shared options (`--json`).
    pub a: &'a BenchArgs,
    /// `--members`, `--memory-types`.
    pub k: &'a KvArgs,
    /// Where targets are started.
    pub env: &'a Env<'a>,
    /// Names the targets' folders.
    pub tag: &'a str,
    /// The targets, each started afresh per test.
    pub targets: &'a [Target],
    /// The redis-server's version, given in the Redis targets' results.
    pub version: Option<&'a str>,
}

/// One data type and shape on one target.
#[derive(Clone, Debug, Serialize)]
pub struct MemResult {
    /// `memory`.
    pub mode: &'static str,
    /// The target.
    pub target: &'static str,
    /// `string`, `hash`, `list`, `set` or `zset`.
    #[serde(rename = "type")]
    pub data_type: &'static str,
    /// Elements per key.
    pub elements_per_key: u64,
    /// Keys loaded.
    pub keys: u64,
    /// Bytes of each element's value.
    pub value_bytes: usize,
    /// Bytes of the keys, fields and values sent (scores not counted).
    pub payload_bytes: u64,
    /// `used_memory` after the load less before it.
    pub used_memory_bytes: u64,
    /// `used_memory_bytes` per key.
    pub bytes_per_key: f64,
    /// `used_memory_bytes` per element.
    pub bytes_per_element: f64,
    /// mojim kv's bucket array (`mojim_bucket_array_bytes`), outside `used_memory`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket_array_bytes: Option<u64>,
    /// The redis-server's version (the Redis targets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_version: Option<String>,
}

/// Element `j`'s value: `j` in ten digits, then letters, [`VALUE_BYTES`] in all.
fn value(j: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    let digits = format!("{j:010}");
    v[..10].copy_from_slice(digits.as_bytes());
    for (i, b) in v[10..].iter_mut().enumerate() {
        *b = b'a' + (i % 26) as u8;
    }
    v
}

/// A field of `INFO memory`.
fn info_field(c: &mut super::client::RespClient, target: &str, field: &str) -> Result<Option<u64>> {
    let v = c.command(&[b"INFO", b"memory"])?;
    let Some(text) = v.as_bytes() else {
        return Err(Error::Io {
            op: format!("INFO memory on {target}"),
            source: std::io::Error::other(format!("answered {v}")),
        });
    };
    let text = String::from_utf8_lossy(text);
    Ok(text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().parse().ok()))
}

/// Runs every test: each data type and shape on each target, started afresh.
pub fn run(p: &Plan) -> Result<Vec<MemResult>> {
    let k = p.k;
    // Every target has every type asked for, before anything is measured.
    let needs: Vec<Need> = k.memory_types.iter().map(|t| t.need()).collect();
    let probe_tag = format!("{}-probe", p.tag);
    let running = start_all(p.env, &probe_tag, p.targets, super::Janitor::start())?;
    for s in &running.servers {
        probe::require(&s.addr, s.target, &needs)?;
    }
    drop(running);

    let cases: Vec<(DataType, u64)> =
        k.memory_types.iter().flat_map(|&t| t.shapes().iter().map(move |&n| (t, n))).collect();
    let total = cases.len() * p.targets.len();
    let mut results = Vec::new();
    for (t, per_key) in cases {
        for &target in p.targets {
            let r = measure(p, target, t, per_key)?;
            eprintln!(
                "kv memory [{}/{total}] {} {} × {per_key}: {:.1} bytes per key, {:.1} per element",
                results.len() + 1,
                r.target,
                r.data_type,
                r.bytes_per_key,
                r.bytes_per_element
            );
            if p.a.json {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", serde_json::to_string(&r).unwrap_or_default())
                    .and_then(|_| out.flush());
            }
            results.push(r);
        }
    }
    Ok(results)
}

/// Loads `t` with `per_key` elements per key into a fresh `target` and reads what it took.
fn measure(p: &Plan, target: Target, t: DataType, per_key: u64) -> Result<MemResult> {
    let keys = p.k.members / per_key;
    let running = start_all(p.env, p.tag, &[target], super::Janitor::start())?;
    let s = &running.servers[0];
    let name = target.name();
    let mut c = super::client::RespClient::connect(&s.addr, super::load::STALL)?;
    let used = |c: &mut super::client::RespClient| -> Result<u64> {
        info_field(c, name, "used_memory")?.ok_or_else(|| {
            Error::Config(format!("{name} gives no used_memory in INFO memory: it cannot be measured"))
        })
    };
    let before = used(&mut c)?;
    let values: Vec<[u8; VALUE_BYTES]> = (0..per_key).map(value).collect();
    let fields: Vec<String> = (0..per_key).map(|j| format!("f{j}")).collect();
    let scores: Vec<String> = (0..per_key).map(|j| j.to_string()).collect();
    let cmd: &[u8] = match t {
        DataType::String => b"SET",
        DataType::Hash => b"HSET",
        DataType::List => b"RPUSH",
        DataType::Set => b"SADD",
        DataType::Zset => b"ZADD",
    };
    let mut payload = 0u64;
    {
        let what = format!("{keys} {} keys of {per_key} × {VALUE_BYTES} B", t.name());
        let mut fill = Fill::new(&mut c, name, what, keys * per_key);
        for n in 0..keys {
            let key = key_name(n);
            let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * per_key as usize);
            args.push(cmd);
            args.push(key.as_bytes());
            payload += key.len() as u64;
            for j in 0..per_key as usize {
                match t {
                    DataType::Hash => {
                        args.push(fields[j].as_bytes());
                        payload += fields[j].len() as u64;
                    }
                    DataType::Zset => args.push(scores[j].as_bytes()),
                    _ => {}
                }
                args.push(&values[j]);
                payload += VALUE_BYTES as u64;
            }
            fill.push(&args, per_key)?;
        }
        fill.finish()?;
    }
    let after = used(&mut c)?;
    let bucket_array_bytes =
        if target.is_redis() { None } else { info_field(&mut c, name, "mojim_bucket_array_bytes")? };
    drop(c);
    drop(running);
    let used_memory_bytes = after.saturating_sub(before);
    Ok(MemResult {
        mode: "memory",
        target: name,
        data_type: t.name(),
        elements_per_key: per_key,
        keys,
        value_bytes: VALUE_BYTES,
        payload_bytes: payload,
        used_memory_bytes,
        bytes_per_key: used_memory_bytes as f64 / keys as f64,
        bytes_per_element: used_memory_bytes as f64 / (keys * per_key) as f64,
        bucket_array_bytes,
        redis_version: p.version.filter(|_| target.is_redis()).map(str::to_string),
    })
}

/// The table: a line per data type and shape, bytes per key on each target and their ratios
/// against the first Redis target; then where mojim kv's bytes go.
pub fn table(results: &[MemResult]) -> String {
    let targets: Vec<Target> = super::targets::ALL_TARGETS
        .into_iter()
        .filter(|t| results.iter().any(|r| r.target == t.name()))
        .collect();
    let base = targets.iter().copied().find(|t| t.is_redis());
    let mut cases: Vec<(&str, u64)> = Vec::new();
    for r in results {
        if !cases.contains(&(r.data_type, r.elements_per_key)) {
            cases.push((r.data_type, r.elements_per_key));
        }
    }
    let mut out = format!(
        "kv memory: bytes per key after loading {VALUE_BYTES}-byte values into an empty server, less what it \
         used empty (INFO memory used_memory: for mojim kv its region heap's blocks in use)\n\
         {:<7} {:>9} {:>9} {:>11}",
        "type", "elems/key", "keys", "payload/key"
    );
    for t in &targets {
        out += &format!(" {:>16}", t.name());
    }
    let others: Vec<Target> = targets.iter().copied().filter(|t| Some(*t) != base).collect();
    for t in base.iter().flat_map(|b| others.iter().map(move |t| (t, b))) {
        out += &format!(" {:>14}", format!("{}÷{}", t.0.short(), t.1.short()));
    }
    out.push('\n');
    let mut notes = String::new();
    for (ty, per_key) in cases {
        let of = |t: Target| {
            results
                .iter()
                .find(|r| r.target == t.name() && (r.data_type, r.elements_per_key) == (ty, per_key))
        };
        let Some(first) = targets.iter().find_map(|t| of(*t)) else { continue };
        out += &format!(
            "{ty:<7} {per_key:>9} {:>9} {:>11.1}",
            first.keys,
            first.payload_bytes as f64 / first.keys as f64
        );
        for t in &targets {
            out += &match of(*t) {
                Some(r) => format!(" {:>16.1}", r.bytes_per_key),
                None => format!(" {:>16}", "-"),
            };
        }
        if let Some(b) = base.and_then(of) {
            for t in &others {
                out += &match of(*t) {
                    Some(r) if b.bytes_per_key > 0.0 => {
                        format!(" {:>14.2}", r.bytes_per_key / b.bytes_per_key)
                    }
                    _ => format!(" {:>14}", "-"),
                };
            }
        }
        out.push('\n');
        for r in targets.iter().filter_map(|t| of(*t)).filter(|r| r.bucket_array_bytes.is_some()) {
            let payload = r.payload_bytes as f64 / r.keys as f64;
            let buckets = r.bucket_array_bytes.unwrap_or_default();
            notes += &format!(
                "{} {ty} × {per_key}: {:.1} B/key = {payload:.1} payload + {ENTRY_HEADER_BYTES:.0} entry header + \
                 {:.1} the rest (the key's 5-byte database prefix, the type's own structure, block slack); \
                 outside used_memory, the bucket array: {buckets} B for any number of keys ({:.1} B/key here)\n",
                r.target,
                r.bytes_per_key,
                r.bytes_per_key - payload - ENTRY_HEADER_BYTES,
                buckets as f64 / r.keys as f64
            );
        }
    }
    out + &notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &'static str, ty: &'static str, per_key: u64, bytes_per_key: f64) -> MemResult {
        let keys = 1000 / per_key;
        MemResult {
            mode: "memory",
            target,
            data_type: ty,
            elements_per_key: per_key,
            keys,
            value_bytes: VALUE_BYTES,
            payload_bytes: keys * (20 + 100 * per_key),
            used_memory_bytes: (bytes_per_key * keys as f64) as u64,
            bytes_per_key,
            bytes_per_element: bytes_per_key / per_key as f64,
            bucket_array_bytes: (target == "mojim-sync").then_some(8000),
            redis_version: None,
        }
    }

    #[test]
    fn the_table_gives_bytes_per_key_ratios_and_where_mojims_go() {
        let t = table(&[
            row("mojim-sync", "string", 1, 200.0),
            row("redis-none", "string", 1, 160.0),
            row("mojim-sync", "set", 100, 14000.0),
            row("redis-none", "set", 100, 12000.0),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[1].contains("mojim-sync")
                && lines[1].contains("redis-none")
                && lines[1].contains("mojim÷none"),
            "{t}"
        );
        let string: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(string, ["string", "1", "1000", "120.0", "200.0", "160.0", "1.25"], "{t}");
        let set: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(set, ["set", "100", "10", "10020.0", "14000.0", "12000.0", "1.17"], "{t}");
        // 200 = 120 payload + 32 header + 48 the rest; 8000 bucket bytes over 1000 keys.
        assert!(
            t.contains(
                "mojim-sync string × 1: 200.0 B/key = 120.0 payload + 32 entry header + 48.0 the rest"
            ),
            "{t}"
        );
        assert!(t.contains("(8.0 B/key here)"), "{t}");
    }

    #[test]
    fn values_are_a_hundred_bytes_and_differ() {
        assert_eq!(value(7).len(), VALUE_BYTES);
        assert_ne!(value(7), value(8));
        assert!(value(99).starts_with(b"0000000099abc"));
    }
}
