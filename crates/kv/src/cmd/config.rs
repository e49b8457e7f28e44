//! `CONFIG GET`, `CONFIG SET`: the settings a running `mojim kv` has, under Redis's names.
//!
//! Some can be changed while it runs (the encodings' thresholds, the script time limit), as in
//! Redis, until the server stops (they are not written back to mojim.toml); the rest are
//! reported as they are and refused by `CONFIG SET`, naming the setting and where it is set. A
//! Redis setting that has no meaning here is refused too, saying why: never accepted and
//! ignored.

use super::args::{is, Args};
use super::glob::matches;
use super::{show, Cx};
use crate::resp::Reply;
use crate::store::Mem;

/// The thresholds at which collections move from their small encoding to the indexed one, with
/// Redis's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encodings {
    /// `hash-max-listpack-entries`: most fields a hash keeps in its entry's value.
    pub hash_max_entries: usize,
    /// `hash-max-listpack-value`: longest field or value a hash keeps in its entry's value.
    pub hash_max_value: usize,
    /// `set-max-intset-entries`: most members a set of integers keeps as an intset.
    pub set_max_intset_entries: usize,
    /// `set-max-listpack-entries`: most members another set keeps in its entry's value (0: none;
    /// Redis 7.0 has no such encoding for sets, 7.2 has it with 128).
    pub set_max_entries: usize,
    /// `set-max-listpack-value`: longest member such a set keeps.
    pub set_max_value: usize,
    /// `zset-max-listpack-entries`: most members a sorted set keeps in its entry's value.
    pub zset_max_entries: usize,
    /// `zset-max-listpack-value`: longest member such a sorted set keeps.
    pub zset_max_value: usize,
    /// `list-max-listpack-size`: a list node's size: a count of elements when positive, else
    /// -1 .. -5 for 4, 8, 16, 32 or 64 KiB.
    pub list_max_size: i64,
    /// `list-compress-depth`: list nodes at each end left uncompressed. Recorded and reported;
    /// `mojim kv` compresses no node (the replies are the same; only memory differs).
    pub list_compress_depth: i64,
}

impl Default for Encodings {
    fn default() -> Self {
        Encodings {
            hash_max_entries: 128,
            hash_max_value: 64,
            set_max_intset_entries: 512,
            set_max_entries: 0,
            set_max_value: 64,
            zset_max_entries: 128,
            zset_max_value: 64,
            list_max_size: -2,
            list_compress_depth: 0,
        }
    }
}

/// What `CONFIG SET` can change while the server runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The encodings' thresholds.
    pub encodings: Encodings,
    /// `busy-reply-threshold` (alias `lua-time-limit`): milliseconds a script may run before
    /// other clients are answered `-BUSY` and it may be killed.
    pub busy_reply_ms: u64,
    /// `notify-keyspace-events`: the classes of keyspace events published (`notify.rs`'s
    /// flags; Redis's letters in `CONFIG`).
    pub notify_keyspace_events: u32,
    /// The ACL users, as the region holds them, and the log of refusals (`acllog-max-len`).
    pub acl: super::acl::Acl,
    /// `slowlog-log-slower-than`: microseconds a command takes to be logged (0: every one;
    /// negative: none).
    pub slowlog_slower_than_us: i64,
    /// `slowlog-max-len`: slow commands kept.
    pub slowlog_max_len: usize,
    /// `latency-monitor-threshold`: milliseconds a command takes to be a latency sample (0:
    /// the monitor is off).
    pub latency_threshold_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            encodings: Encodings::default(),
            busy_reply_ms: 5000,
            notify_keyspace_events: 0,
            acl: super::acl::Acl::default(),
            slowlog_slower_than_us: super::observe::slowlog::DEFAULT_SLOWER_THAN_US,
            slowlog_max_len: super::observe::slowlog::DEFAULT_MAX_LEN,
            latency_threshold_ms: 0,
        }
    }
}

/// How a setting is read and changed.
enum Kind {
    /// A number `CONFIG SET` may change, from `min` to `max`.
    Int { get: fn(&Settings) -> i64, set: fn(&mut Settings, i64), min: i64, max: i64 },
    /// A string `CONFIG SET` may change, checked by `check`.
    Text {
        get: fn(&Settings) -> String,
        set: fn(&mut Settings, String),
        check: fn(&str) -> Result<(), String>,
    },
    /// Fixed while the server runs: why, and where it is set.
    Fixed(&'static str),
    /// A Redis setting with no meaning here: its one value (what `CONFIG GET` answers, and the
    /// only one `CONFIG SET` accepts), and why.
    Moot(&'static str, &'static str),
}

struct Setting {
    names: &'static [&'static str],
    kind: Kind,
}

const FIXED_KV: &str = "it is set in mojim.toml's [kv] section and read at start-up";
const NO_DISK: &str =
    "mojim kv persists nothing to disk: every write is in its mirror's log before it is answered";

macro_rules! int {
    ($names:expr, $field:ident . $($path:ident).+, $min:expr, $max:expr) => {
        Setting {
            names: $names,
            kind: Kind::Int {
                get: |s| s.$field.$($path).+ as i64,
                set: |s, v| s.$field.$($path).+ = v as _,
                min: $min,
                max: $max,
            },
        }
    };
}

fn settings() -> Vec<Setting> {
    vec![
        int!(
            &["hash-max-listpack-entries", "hash-max-ziplist-entries"],
            encodings.hash_max_entries,
            0,
            1 << 30
        ),
        int!(&["hash-max-listpack-value", "hash-max-ziplist-value"], encodings.hash_max_value, 0, 1 << 30),
        int!(&["set-max-intset-entries"], encodings.set_max_intset_entries, 0, 1 << 30),
        int!(&["set-max-listpack-entries"], encodings.set_max_entries, 0, 1 << 30),
        int!(&["set-max-listpack-value"], encodings.set_max_value, 0, 1 << 30),
        int!(
            &["zset-max-listpack-entries", "zset-max-ziplist-entries"],
            encodings.zset_max_entries,
            0,
            1 << 30
        ),
        int!(&["zset-max-listpack-value", "zset-max-ziplist-value"], encodings.zset_max_value, 0, 1 << 30),
        int!(&["list-max-listpack-size", "list-max-ziplist-size"], encodings.list_max_size, -5, 1 << 30),
        int!(&["list-compress-depth"], encodings.list_compress_depth, 0, i64::from(i32::MAX)),
        Setting {
            names: &["busy-reply-threshold", "lua-time-limit"],
            kind: Kind::Int {
                get: |s| s.busy_reply_ms as i64,
                set: |s, v| s.busy_reply_ms = v as u64,
                min: 0,
                max: i64::MAX,
            },
        },
        Setting {
            names: &["acllog-max-len"],
            kind: Kind::Int {
                get: |s| s.acl.log_max as i64,
                set: |s, v| {
                    s.acl.log_max = v as usize;
                    s.acl.log.truncate(v as usize);
                },
                min: 0,
                max: i64::from(i32::MAX),
            },
        },
        Setting {
            names: &["slowlog-log-slower-than"],
            kind: Kind::Int {
                get: |s| s.slowlog_slower_than_us,
                set: |s, v| s.slowlog_slower_than_us = v,
                min: -1,
                max: i64::MAX,
            },
        },
        Setting {
            names: &["slowlog-max-len"],
            kind: Kind::Int {
                get: |s| s.slowlog_max_len as i64,
                set: |s, v| s.slowlog_max_len = v as usize,
                min: 0,
                max: i64::from(i32::MAX),
            },
        },
        Setting {
            names: &["latency-monitor-threshold"],
            kind: Kind::Int {
                get: |s| s.latency_threshold_ms as i64,
                set: |s, v| s.latency_threshold_ms = v as u64,
                min: 0,
                max: i64::MAX,
            },
        },
        Setting {
            names: &["notify-keyspace-events"],
            kind: Kind::Text {
                get: |s| super::notify::format(s.notify_keyspace_events),
                set: |s, v| s.notify_keyspace_events = super::notify::parse(v.as_bytes()).unwrap_or(0),
                check: |v| match super::notify::parse(v.as_bytes()) {
                    Some(_) => Ok(()),
                    None => Err(super::notify::BAD_CLASS.into()),
                },
            },
        },
        Setting { names: &["databases"], kind: Kind::Fixed(FIXED_KV) },
        Setting {
            names: &["port"],
            kind: Kind::Fixed("it is the port of [kv] listen (or --listen), read at start-up"),
        },
        Setting {
            names: &["bind"],
            kind: Kind::Fixed("it is the host of [kv] listen (or --listen), read at start-up"),
        },
        Setting {
            names: &["tls-port"],
            kind: Kind::Fixed("it is the port of [kv] tls_listen (or --tls-listen), read at start-up"),
        },
        Setting { names: &["tls-cert-file"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["tls-key-file"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["tls-ca-cert-file"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["tls-auth-clients"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["tls-protocols"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["maxclients"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["proto-max-bulk-len"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["requirepass"], kind: Kind::Fixed(FIXED_KV) },
        Setting { names: &["protected-mode"], kind: Kind::Fixed(FIXED_KV) },
        Setting {
            names: &["maxmemory"],
            kind: Kind::Fixed("it is the heap of the region, whose size is fixed when it is made"),
        },
        Setting {
            names: &["maxmemory-policy"],
            kind: Kind::Moot(
                "noeviction",
                "mojim kv never evicts: a write the heap cannot hold is refused (-OOM)",
            ),
        },
        Setting { names: &["save"], kind: Kind::Moot("", NO_DISK) },
        Setting { names: &["appendonly"], kind: Kind::Moot("no", NO_DISK) },
        Setting { names: &["appendfsync"], kind: Kind::Moot("no", NO_DISK) },
        Setting { names: &["timeout"], kind: Kind::Moot("0", "mojim kv does not close idle clients") },
    ]
}

impl Setting {
    fn value<M: Mem>(&self, cx: &Cx<M>) -> String {
        let listen = cx.host.listen_addr();
        let (bind, port) = listen.rsplit_once(':').unwrap_or((&listen, "0"));
        match &self.kind {
            Kind::Int { get, .. } => get(cx.settings).to_string(),
            Kind::Text { get, .. } => get(cx.settings),
            Kind::Moot(v, _) => v.to_string(),
            Kind::Fixed(_) => match self.names[0] {
                "databases" => cx.databases().to_string(),
                "port" if cx.host.plaintext() => port.to_string(),
                "port" => "0".into(),
                "bind" => bind.to_string(),
                "maxmemory" => {
                    let g = cx.store.geometry();
                    (g.heap_end - g.heap_off).to_string()
                }
                "protected-mode" | "requirepass" | "maxclients" | "proto-max-bulk-len" | "tls-port"
                | "tls-cert-file" | "tls-key-file" | "tls-ca-cert-file" | "tls-auth-clients"
                | "tls-protocols" => cx.host.fixed_setting(self.names[0]),
                other => unreachable!("{other} has no value"),
            },
        }
    }
}

/// `CONFIG GET pattern...`, `CONFIG SET name value [name value ...]`, `CONFIG RESETSTAT`.
pub(super) fn config<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) {
    let sub = a.get(1);
    let all = settings();
    match () {
        _ if is(sub, "GET") && a.len() >= 3 => {
            let mut hits = Vec::new();
            for s in &all {
                for name in s.names {
                    if a.from(2).any(|p| matches(&p.to_ascii_lowercase(), name.as_bytes())) {
                        hits.push((*name, s.value(cx)));
                    }
                }
            }
            r.map(hits.len());
            for (k, v) in hits {
                r.bulk(k.as_bytes());
                r.bulk(v.as_bytes());
            }
        }
        _ if is(sub, "SET") && a.len() >= 4 && a.len().is_multiple_of(2) => {
            // Every pair is checked before any is applied: all or none.
            let mut new = cx.settings.clone();
            for i in (2..a.len()).step_by(2) {
                let (name, value) = (a.get(i).to_ascii_lowercase(), a.get(i + 1));
                let shown = show(&name, 64);
                let Some(s) = all.iter().find(|s| s.names.iter().any(|n| n.as_bytes() == name)) else {
                    return r.error(&format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{shown}'"
                    ));
                };
                let text = String::from_utf8_lossy(value).into_owned();
                let refused = |why: &str| {
                    format!("ERR CONFIG SET failed (possibly related to argument '{shown}') - {why}")
                };
                match &s.kind {
                    Kind::Int { set, min, max, .. } => match super::args::int(value) {
                        Some(v) if (*min..=*max).contains(&v) => set(&mut new, v),
                        Some(v) => {
                            return r.error(&refused(&format!(
                                "argument must be between {min} and {max} inclusive (got {v})"
                            )))
                        }
                        None => {
                            return r.error(&refused(&format!(
                                "argument couldn't be parsed into an integer: '{text}'"
                            )))
                        }
                    },
                    Kind::Text { set, check, .. } => match check(&text) {
                        Ok(()) => set(&mut new, text),
                        Err(why) => return r.error(&refused(&why)),
                    },
                    Kind::Moot(v, _) if *v == text => {}
                    Kind::Moot(v, why) => {
                        return r.error(&refused(&format!("mojim kv supports only '{v}' for {shown}: {why}")))
                    }
                    Kind::Fixed(why) => {
                        return r.error(&refused(&format!(
                            "{shown} cannot be changed while mojim kv runs: {why}"
                        )))
                    }
                }
            }
            *cx.settings = new;
            cx.telemetry.slowlog.truncate(cx.settings.slowlog_max_len);
            r.ok();
        }
        _ if is(sub, "RESETSTAT") && a.len() == 2 => {
            // The server's counters are reset by the server once the command is done.
            cx.host.reset_stats();
            cx.errors.reset();
            cx.telemetry.reset_stats();
            r.ok()
        }
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            show(sub, 64)
        )),
    }
}
