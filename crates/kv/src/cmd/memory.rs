//! MEMORY USAGE and MEMORY HELP: the region bytes a key takes; MEMORY DOCTOR: what the region's
//! heap looks like (how full, how much lies in freed blocks); MEMORY STATS: the same as numbers,
//! under Redis's names where they mean the same. MALLOC-STATS and PURGE, which describe an
//! allocator's heap, are refused by name.
//!
//! A key's bytes are its entry's block (header, key, and the value held there) and what its
//! value's handle points at: a hash's or a set's tree (its nodes and the blocks of its large
//! entries), a sorted set's two trees, a list's chain of nodes. A tree of up to 100 000 entries,
//! or a chain of up to 100 000 nodes (any, with `SAMPLES 0`), is walked whole; a larger one is
//! estimated from `SAMPLES` entries drawn at random, or the chain's first `SAMPLES` nodes (5
//! unless given), as Redis estimates from samples.

use super::args::{is, Args};
use super::rand;
use super::spec::{spec, Group, Spec};
use super::{Cx, NOT_INT, SYNTAX};
use crate::resp::Reply;
use crate::store::{Mem, QuickList, StoreError, Tree, ZIndex, ENC_QUICKLIST, KIND_LIST};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[spec("MEMORY", -2, &["readonly"], (2, 2, 1), Group::Memory)];

/// Trees of at most this many entries, and chains of at most this many nodes, are measured
/// block by block.
const WALK_MAX: u64 = 100_000;

/// Bytes of a tree: its blocks, walked or estimated from `samples` entries.
fn tree_bytes<M: Mem>(cx: &Cx<M>, t: &Tree, samples: u64) -> Result<u64, StoreError> {
    if t.len <= WALK_MAX || samples == 0 {
        let mut total = 0;
        cx.store.tree_blocks(t, |_, n| total += n).map_err(StoreError::Corrupt)?;
        return Ok(total);
    }
    // An entry takes its hash (8), two lengths (4) and a slot (2) with its key and value in a
    // leaf that is, on average, about three quarters full.
    let (mut k, mut v, mut bytes) = (Vec::new(), Vec::new(), 0u64);
    let n = samples.min(t.len);
    for _ in 0..n {
        k.clear();
        v.clear();
        cx.store.tree_nth(t, rand::below(t.len), &mut k, &mut v)?;
        bytes += 14 + (k.len() + v.len()) as u64;
    }
    Ok(bytes * 4 / 3 * t.len / n)
}

/// Bytes of a sorted set's two trees: their blocks, walked or estimated from `samples`
/// members.
fn zset_bytes<M: Mem>(cx: &Cx<M>, z: &ZIndex, samples: u64) -> Result<u64, StoreError> {
    if z.len() <= WALK_MAX || samples == 0 {
        let mut total = 0;
        cx.store.zt_blocks(&z.order, |_, n| total += n).map_err(StoreError::Corrupt)?;
        cx.store.tree_blocks(&z.members, |_, n| total += n).map_err(StoreError::Corrupt)?;
        return Ok(total);
    }
    // A member takes, in the member tree, its hash, two lengths, a slot and its 8-byte score;
    // in the order tree its score, a length and a slot; its bytes in each.
    let (mut k, mut v, mut bytes) = (Vec::new(), Vec::new(), 0u64);
    let n = samples.min(z.len());
    for _ in 0..n {
        k.clear();
        v.clear();
        cx.store.tree_nth(&z.members, rand::below(z.len()), &mut k, &mut v)?;
        bytes += 14 + 12 + 2 * k.len() as u64 + v.len() as u64;
    }
    Ok(bytes * 4 / 3 * z.len() / n)
}

/// Bytes of a list's chain of nodes: walked, or estimated from its first `samples` nodes.
fn list_bytes<M: Mem>(cx: &Cx<M>, ql: &QuickList, samples: u64) -> Result<u64, StoreError> {
    if ql.nodes <= WALK_MAX || samples == 0 {
        let mut total = 0;
        cx.store.ql_blocks(ql, |_, n| total += n).map_err(StoreError::Corrupt)?;
        return Ok(total);
    }
    let (bytes, seen) = cx.store.ql_head_bytes(ql, samples)?;
    Ok(bytes * ql.nodes / seen.max(1))
}

fn usage<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut samples = 5u64;
    let mut j = 3;
    while j < a.len() {
        if is(a.get(j), "SAMPLES") && j + 1 < a.len() {
            match super::args::int(a.get(j + 1)) {
                Some(n) if n >= 0 => samples = n as u64,
                Some(_) => {
                    r.error(SYNTAX);
                    return Ok(());
                }
                None => {
                    r.error(NOT_INT);
                    return Ok(());
                }
            }
            j += 2;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
    }
    let Some(f) = cx.store.get(a.get(2), cx.now_ms)? else {
        r.null();
        return Ok(());
    };
    let mut bytes = cx.store.class_size(f.head.class);
    if let Some(t) = cx.store.tree_of(&f)? {
        bytes += tree_bytes(cx, &t, samples)?;
    } else if let Some(z) = cx.store.zindex_of(&f)? {
        bytes += zset_bytes(cx, &z, samples)?;
    } else if (f.head.kind, f.head.encoding) == (KIND_LIST, ENC_QUICKLIST) {
        bytes += list_bytes(cx, &cx.store.list_of(&f)?, samples)?;
    }
    r.int(bytes as i64);
    Ok(())
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    debug_assert_eq!(spec.name, "MEMORY");
    let sub = a.get(1);
    if is(sub, "USAGE") && a.len() >= 3 {
        return usage(cx, a, r);
    }
    if is(sub, "HELP") && a.len() == 2 {
        let lines = [
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value, in the region. Trees of more",
            "    than 100000 entries are estimated from <count> samples (5 unless given; 0: all).",
            "STATS",
            "    Return the region's heap use: bytes holding data, freed, never given out, per key.",
            "DOCTOR",
            "    Return a report of the region's heap: how full it is, bytes in freed blocks.",
            "HELP",
            "    Print this help.",
        ];
        r.help(&lines);
        return Ok(());
    }
    if is(sub, "DOCTOR") && a.len() == 2 {
        let g = cx.store.geometry();
        r.bulk(doctor(cx.store.used_bytes(), cx.store.heap_top_bytes(), g.heap_end - g.heap_off).as_bytes());
        return Ok(());
    }
    if is(sub, "STATS") && a.len() == 2 {
        let g = cx.store.geometry();
        let (used, top, keys) = (cx.store.used_bytes(), cx.store.heap_top_bytes(), cx.store.keys());
        let fields: [(&str, u64); 9] = [
            ("total.allocated", used),
            ("startup.allocated", 0),
            ("overhead.total", 8 * g.buckets),
            ("keys.count", keys),
            ("keys.bytes-per-key", used.checked_div(keys).unwrap_or(0)),
            ("dataset.bytes", used),
            ("region.heap.bytes", g.heap_end - g.heap_off),
            ("region.heap.top", top),
            ("region.heap.freed", top.saturating_sub(used)),
        ];
        r.map(fields.len());
        for (name, v) in fields {
            r.bulk(name.as_bytes());
            r.int(v as i64);
        }
        return Ok(());
    }
    // MALLOC-STATS, PURGE (the others are refused before, by `spec::SUBCOMMANDS`):
    // they describe an allocator's heap, and the data is in the region.
    r.error(&format!(
        "ERR MEMORY {} is not implemented: mojim kv keeps its data in the region, not in an allocator's \
         heap (MEMORY USAGE gives a key's bytes in the region, INFO memory the region's)",
        super::show(sub, 64).to_ascii_uppercase()
    ));
    Ok(())
}

/// MEMORY DOCTOR's report: `used` bytes in blocks that hold data, `top` bytes of the heap given
/// out (the rest of what was given out lies in freed blocks, on their size classes' lists), of
/// `heap`.
fn doctor(used: u64, top: u64, heap: u64) -> String {
    let freed = top.saturating_sub(used);
    let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    let mut out = format!(
        "The region's heap: {used} bytes hold data, {freed} bytes lie in freed blocks, {} bytes never given \
         out, of {heap} ({:.1} % in use).\n",
        heap - top,
        pct(used, heap)
    );
    let mut found = false;
    if used < 1 << 20 {
        out.push_str("The region holds little data: nothing to diagnose.\n");
        return out;
    }
    if freed > used / 2 {
        found = true;
        out.push_str(&format!(
            "* {:.1} % of the heap given out lies in freed blocks: they are reused only by values of their \
             size class (blocks are never split or joined); a workload that moved from one value size to \
             another leaves them idle.\n",
            pct(freed, top)
        ));
    }
    if heap - top + freed < heap / 10 {
        found = true;
        out.push_str(
            "* Less than 10 % of the heap is left: writes will be refused with -OOM when it is gone; \
             make the region larger (mojim init --size) or delete data.\n",
        );
    }
    if !found {
        out.push_str("No memory problem found.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_doctor_names_idle_freed_blocks_and_a_full_heap() {
        let g = 100 << 20;
        assert!(super::doctor(10 << 20, 12 << 20, g).contains("No memory problem found"));
        assert!(super::doctor(10 << 20, 40 << 20, g).contains("lies in freed blocks"));
        assert!(super::doctor(95 << 20, 96 << 20, g).contains("Less than 10 %"));
    }
    use crate::cmd::family_harness::{err, Harness};
    use crate::resp::Value;

    /// MEMORY's subcommands are checked as Redis checks them, before the command runs or is
    /// queued: an unknown one, or USAGE without a key, is refused in Redis's words, and a
    /// transaction holding one is aborted.
    #[test]
    fn subcommands_are_checked_as_redis_checks_them() {
        let mut h = Harness::new();
        assert_eq!(err(&h.cmd(&["MEMORY", "NOSUCH"])), "ERR unknown subcommand 'NOSUCH'. Try MEMORY HELP.");
        assert_eq!(
            err(&h.cmd(&["MEMORY", "USAGE"])),
            "ERR wrong number of arguments for 'memory|usage' command"
        );
        assert_eq!(
            err(&h.cmd(&["MEMORY", "HELP", "x"])),
            "ERR wrong number of arguments for 'memory|help' command"
        );
        assert_eq!(h.cmd(&["MEMORY", "USAGE", "nosuch"]), Value::Null);
        assert!(err(&h.cmd(&["MEMORY", "purge"])).starts_with("ERR MEMORY PURGE is not implemented"));
        h.cmd(&["SET", "k", "v"]);
        let stats = h.cmd(&["MEMORY", "stats"]);
        let Value::Array(m) = &stats else { panic!("{stats:?}") };
        let at = m.iter().position(|v| *v == Value::Bulk(b"keys.count".to_vec())).expect("keys.count");
        assert_eq!(m[at + 1], Value::Int(1));
        assert!(m.contains(&Value::Bulk(b"region.heap.freed".to_vec())));
        let Value::Bulk(d) = h.cmd(&["MEMORY", "doctor"]) else { panic!("MEMORY DOCTOR") };
        assert!(
            String::from_utf8_lossy(&d).contains("nothing to diagnose"),
            "{}",
            String::from_utf8_lossy(&d)
        );
        h.cmd(&["MULTI"]);
        assert_eq!(
            err(&h.cmd(&["memory", "usage"])),
            "ERR wrong number of arguments for 'memory|usage' command"
        );
        assert!(err(&h.cmd(&["EXEC"])).starts_with("EXECABORT"));
    }
}
