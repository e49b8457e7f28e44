//! How two replies to the same command are compared: exactly, unless the command is one of
//! the deliberate differences (`DELIBERATE` in kv_differential.rs), each of which has its rule
//! here.

use super::resp::Reply;

/// How a command's replies are compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Byte for byte (as decoded: `$-1`, `*-1` and `_` differ).
    Exact,
    /// KEYS, HKEYS, HVALS: as multisets.
    Unordered,
    /// HGETALL, HRANDFIELD ... WITHVALUES of a whole hash: as sets of field/value pairs (a flat
    /// array in RESP2, a map or an array of pairs in RESP3).
    Pairs,
    /// A random draw (SRANDMEMBER, HRANDFIELD): the same kind of reply, as many elements, each
    /// side's distinct when `distinct`; which members is each server's own draw.
    Draw { distinct: bool },
    /// A SSCAN page: the same cursor, and the same elements in any order.
    ScanPage,
    /// TTL (`ms` false) or PTTL: the same sign, and close.
    Ttl { ms: bool },
    /// TTL right after a PTTL of the same key: as `Ttl`, and each server's TTL must be its
    /// PTTL rounded as Redis rounds it, `(pttl + 500) / 1000`.
    TtlAfterPttl,
    /// DBSIZE: exactly while no key can have expired unremoved, else both a count.
    Dbsize,
    /// INFO, CONFIG GET, COMMAND, CLIENT ID/INFO/LIST, WAIT: the kind of reply only (for an
    /// error, its first word).
    Admin,
    /// HELLO: its `server`, `proto`, `mode` and `role` fields.
    Hello,
    /// TIME: two numbers, seconds apart at most.
    Time,
    /// EXEC: element by element by the queued commands' rules (an abort, exactly).
    Exec(Vec<Cmp>),
    /// RANDOMKEY, MEMORY USAGE, DUMP, FUNCTION DUMP, OBJECT REFCOUNT, the HELP subcommands: the
    /// kind of reply only (which key, how many bytes, the payload's bytes, the help's lines are
    /// each server's own); errors exactly.
    Kind,
    /// MEMORY USAGE: as `Kind`; but while a key may have expired and not been removed, Redis
    /// measures it (its lookup does not check expiry) where mojim kv answers a null, as for any
    /// key that has expired (docs/COMPATIBILITY.md).
    Memory,
    /// FUNCTION RESTORE: exactly, but a refusal for a library or a function that exists may
    /// name another one of the payload's (Redis names the first its dictionary finds).
    FunctionRestore,
    /// RESTORE of a payload changed under a right checksum: exactly, or mojim kv's `Bad data
    /// format` where Redis took it (its read does not check that the value ends where the
    /// payload's trailer begins: docs/COMPATIBILITY.md); the harness then deletes `dst` on both.
    CorruptRestore { dst: Vec<u8> },
    /// LCS: exactly, but where Redis refuses a table larger than `proto-max-bulk-len` (`-ERR
    /// Insufficient memory, ...`), mojim kv answers (its bound is `[kv] output_limit`:
    /// docs/COMPATIBILITY.md).
    Lcs,
    /// SORT, SORT_RO: exactly, or as multisets where the order is each server's own (`BY` a
    /// constant over a set: its dictionary's order; ties of `ALPHA` by weights), by their number
    /// when a `LIMIT` then takes some of that order.
    Sort { unordered: bool, limited: bool },
}

/// What a comparison may need to know about the step.
pub struct Ctx {
    /// Milliseconds from sending the step to the first server to the last reply of the second.
    pub span_ms: u64,
    /// The longest step so far, milliseconds: how far apart the servers may have set a
    /// relative expiry.
    pub longest_ms: u64,
    /// A key may have expired and not been removed yet (DBSIZE then may count it).
    pub expired_unremoved: bool,
    /// The known bug `BUG_TTL_ROUNDS_UP` is gated: TTL may also round up.
    pub ttl_may_round_up: bool,
}

/// The kind of a reply, for `Cmp::Admin`.
fn kind(r: &Reply) -> String {
    match r {
        Reply::Error(e) => {
            let word = e.split(|&b| b == b' ').next().unwrap_or_default();
            format!("error {}", String::from_utf8_lossy(word))
        }
        Reply::Simple(_) => "simple".into(),
        Reply::Bulk(_) | Reply::Verbatim(_) => "text".into(),
        Reply::Int(_) => "integer".into(),
        Reply::NullBulk | Reply::NullArray | Reply::Null => "null".into(),
        Reply::Array(_) => "array".into(),
        Reply::Map(_) => "map".into(),
        Reply::Set(_) => "set".into(),
        Reply::Bool(_) => "bool".into(),
        Reply::Double(_) => "double".into(),
        Reply::BigNumber(_) => "big number".into(),
        Reply::Push(_) => "push".into(),
    }
}

fn pairs(r: &Reply) -> Option<Vec<(Reply, Reply)>> {
    let pair = |x: &Reply| matches!(x, Reply::Array(p) if p.len() == 2);
    match r {
        Reply::Map(m) => Some(m.clone()),
        // RESP3's HRANDFIELD ... WITHVALUES: an array of [field, value] arrays.
        Reply::Array(v) if !v.is_empty() && v.iter().all(pair) => Some(
            v.iter()
                .map(|p| match p {
                    Reply::Array(p) => (p[0].clone(), p[1].clone()),
                    _ => unreachable!("checked: pairs"),
                })
                .collect(),
        ),
        Reply::Array(v) if v.len() % 2 == 0 => {
            Some(v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
        }
        _ => None,
    }
}

fn sorted(v: &[Reply]) -> Vec<Reply> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// A field of a HELLO reply.
fn field(r: &Reply, name: &str) -> Option<Reply> {
    pairs(r)?.into_iter().find(|(k, _)| *k == Reply::Bulk(name.as_bytes().to_vec())).map(|(_, v)| v)
}

/// Redis's TTL from a PTTL: rounded to the nearest second (`ttl.c`: `(ttl+500)/1000`).
fn redis_ttl(pttl: i64) -> i64 {
    (pttl + 500) / 1000
}

/// Compares `m` (mojim kv's reply) with `r` (Redis's) under `cmp`; `prev` are the replies to
/// the command before (for `TtlAfterPttl`). `Err` says how they differ.
pub fn compare(
    cmp: &Cmp,
    m: &Reply,
    r: &Reply,
    prev: Option<(&Reply, &Reply)>,
    cx: &Ctx,
) -> Result<(), String> {
    let differ = |why: &str| Err(why.to_string());
    // The documented differences whose one side is an error.
    match cmp {
        Cmp::Lcs if r.error_starts(LCS_TOO_LARGE) && !m.is_error() => return Ok(()),
        Cmp::FunctionRestore if exists_error(m).is_some() && exists_error(m) == exists_error(r) => {
            return Ok(())
        }
        Cmp::CorruptRestore { .. } if took_what_mojim_refused(m, r) => return Ok(()),
        _ => {}
    }
    // Errors are errors on both, with the same text, except for the server commands.
    if m.is_error() || r.is_error() {
        return match cmp {
            Cmp::Admin | Cmp::Hello | Cmp::Time if m.is_error() && r.is_error() => {
                if kind(m) == kind(r) {
                    Ok(())
                } else {
                    differ("errors of different kinds")
                }
            }
            _ if m == r => Ok(()),
            _ => differ("different errors, or an error on one only"),
        };
    }
    match cmp {
        Cmp::Exact => {
            if m == r {
                Ok(())
            } else {
                differ("different replies")
            }
        }
        Cmp::Unordered => match (m, r) {
            (Reply::Array(a), Reply::Array(b)) | (Reply::Set(a), Reply::Set(b)) if sorted(a) == sorted(b) => {
                Ok(())
            }
            _ if m == r => Ok(()),
            _ => differ("different elements"),
        },
        Cmp::Pairs => match (pairs(m), pairs(r)) {
            (Some(mut a), Some(mut b)) if kind(m) == kind(r) => {
                a.sort();
                b.sort();
                if a == b {
                    Ok(())
                } else {
                    differ("different field/value pairs")
                }
            }
            _ if m == r => Ok(()),
            _ => differ("different replies"),
        },
        Cmp::Draw { distinct } => {
            let unique = |v: &[Reply]| !*distinct || sorted(v).windows(2).all(|w| w[0] != w[1]);
            match (m, r) {
                (Reply::Array(a), Reply::Array(b)) | (Reply::Set(a), Reply::Set(b))
                    if a.len() == b.len() && unique(a) && unique(b) =>
                {
                    Ok(())
                }
                (Reply::Bulk(_), Reply::Bulk(_)) => Ok(()),
                _ if m == r => Ok(()),
                _ => differ("draws of different sizes or kinds, or a repeated member"),
            }
        }
        Cmp::ScanPage => match (m, r) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == 2 && b.len() == 2 && a[0] == b[0] => {
                compare(&Cmp::Unordered, &a[1], &b[1], None, cx)
            }
            _ if m == r => Ok(()),
            _ => differ("different SSCAN pages"),
        },
        Cmp::Ttl { ms } => ttl_close(*ms, m, r, cx),
        Cmp::TtlAfterPttl => {
            ttl_close(false, m, r, cx)?;
            let Some((pm, pr)) = prev else { return differ("TTL compared without its PTTL") };
            for (who, p, t) in [("mojim kv", pm, m), ("redis", pr, r)] {
                let (Reply::Int(p), Reply::Int(t)) = (p, t) else { continue };
                if *p < 0 || *t < 0 {
                    continue;
                }
                // The two commands may be answered a few milliseconds apart.
                let slack = cx.span_ms as i64 + 2;
                let round = redis_ttl(p - slack)..=redis_ttl(p + slack);
                let ceil = |ms: i64| (ms.max(0) as u64).div_ceil(1000) as i64;
                let up = ceil(p - slack)..=ceil(p + slack);
                let ok = round.contains(t) || (cx.ttl_may_round_up && up.contains(t));
                if !ok {
                    return Err(format!(
                        "{who}'s TTL {t} is not its PTTL {p} ms rounded to the nearest second ({round:?}), as Redis \
                         answers"
                    ));
                }
            }
            Ok(())
        }
        Cmp::Dbsize => match (m, r) {
            _ if m == r => Ok(()),
            (Reply::Int(a), Reply::Int(b)) if cx.expired_unremoved && *a >= 0 && *b >= 0 => Ok(()),
            _ => differ("different key counts"),
        },
        Cmp::Sort { unordered: false, .. } | Cmp::Lcs | Cmp::FunctionRestore | Cmp::CorruptRestore { .. } => {
            if m == r {
                Ok(())
            } else {
                differ("different replies")
            }
        }
        Cmp::Sort { unordered: true, limited: false } => compare(&Cmp::Unordered, m, r, prev, cx),
        Cmp::Sort { unordered: true, limited: true } => {
            compare(&Cmp::Draw { distinct: false }, m, r, prev, cx)
        }
        Cmp::Memory
            if cx.expired_unremoved && matches!((m, r), (Reply::NullBulk | Reply::Null, Reply::Int(_))) =>
        {
            Ok(())
        }
        Cmp::Admin | Cmp::Kind | Cmp::Memory => {
            if kind(m) == kind(r) {
                Ok(())
            } else {
                differ("different kinds of reply")
            }
        }
        Cmp::Hello => {
            for f in ["server", "proto", "mode", "role"] {
                if field(m, f).is_none() || field(m, f) != field(r, f) {
                    return Err(format!("HELLO's {f} differs"));
                }
            }
            if kind(m) == kind(r) {
                Ok(())
            } else {
                differ("HELLO's reply is of different kinds")
            }
        }
        Cmp::Time => {
            let secs = |x: &Reply| match x {
                Reply::Array(v) if v.len() == 2 => match (&v[0], &v[1]) {
                    (Reply::Bulk(s), Reply::Bulk(u)) => {
                        let s: Option<i64> = std::str::from_utf8(s).ok().and_then(|s| s.parse().ok());
                        let u: Option<i64> = std::str::from_utf8(u).ok().and_then(|s| s.parse().ok());
                        s.filter(|_| u.is_some_and(|u| (0..1_000_000).contains(&u)))
                    }
                    _ => None,
                },
                _ => None,
            };
            match (secs(m), secs(r)) {
                (Some(a), Some(b)) if (a - b).abs() <= 2 + cx.span_ms as i64 / 1000 => Ok(()),
                _ => differ("TIME is not two numbers, or not the same time"),
            }
        }
        Cmp::Exec(inner) => match (m, r) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == inner.len() && b.len() == inner.len() => {
                for i in 0..inner.len() {
                    let prev = (i > 0).then(|| (&a[i - 1], &b[i - 1]));
                    compare(&inner[i], &a[i], &b[i], prev, cx)
                        .map_err(|e| format!("EXEC's reply {i} ({} vs {}): {e}", a[i].show(), b[i].show()))?;
                }
                Ok(())
            }
            _ if m == r => Ok(()),
            _ => differ("different EXEC replies"),
        },
    }
}

/// Redis's refusal of an LCS table past `proto-max-bulk-len`.
const LCS_TOO_LARGE: &str = "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len";

/// Whether Redis took a RESTORE's payload that mojim kv refused as bad data.
pub fn took_what_mojim_refused(m: &Reply, r: &Reply) -> bool {
    m.error_starts("ERR Bad data format") && *r == Reply::Simple(b"OK".to_vec())
}

/// What a FUNCTION RESTORE refusal for a library or a function that exists refuses ("Library",
/// "Function"), if it is one.
fn exists_error(r: &Reply) -> Option<&str> {
    let Reply::Error(e) = r else { return None };
    let e = std::str::from_utf8(e).ok()?;
    let what = ["Library", "Function"].into_iter().find(|w| e.starts_with(&format!("ERR {w} ")))?;
    e.ends_with(" already exists").then_some(what)
}

/// TTL/PTTL replies: -2 and -1 exactly; a time left, close (the two servers run a command
/// milliseconds apart, and relative expiries were set milliseconds apart).
fn ttl_close(ms: bool, m: &Reply, r: &Reply, cx: &Ctx) -> Result<(), String> {
    match (m, r) {
        (Reply::Int(a), Reply::Int(b)) if *a < 0 || *b < 0 => {
            if a == b {
                Ok(())
            } else {
                Err("one key has a time to live and the other not, or one is gone".into())
            }
        }
        (Reply::Int(a), Reply::Int(b)) => {
            let tol_ms = TTL_SKEW_MS.max(cx.longest_ms as i64) + cx.span_ms as i64;
            let tol = if ms { tol_ms } else { tol_ms / 1000 + 2 };
            if (a - b).abs() <= tol {
                Ok(())
            } else {
                Err(format!("times to live {a} and {b} are more than {tol} apart"))
            }
        }
        _ if m == r => Ok(()),
        _ => Err("different replies".into()),
    }
}

/// How far apart two servers may have put a relative expiry, at least: each computes it from
/// the clock when it runs the command, milliseconds apart (at most the step's time).
pub const TTL_SKEW_MS: i64 = 3000;
