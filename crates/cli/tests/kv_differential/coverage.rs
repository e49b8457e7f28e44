//! Which of `mojim kv`'s commands the differential test sends: every command of its table
//! (`mojim_kv::cmd::SPECS`) must be sent by the generator, or be listed in `LEFT_OUT` with the
//! reason it is not. The generator is seeded and the harness's replies never steer it, so the
//! commands a run sends are found by running its generator alone, as the harness would.

use super::gen::{Cmd, Fault, Gates, Gen, Mode, Step};
use std::collections::BTreeSet;

/// Commands of `mojim kv` the differential test does not send, and why.
pub const LEFT_OUT: &[(&str, &str)] = &[
    (
        "ACL",
        "its users change what every later command of a connection may run, and its replies name users and \
         hashes the two servers made differently: Redis's unit/acl runs it against both (COMPATIBILITY.md), \
         tests/kv_acl.rs and the kv crate's command tests",
    ),
    (
        "SUBSCRIBE",
        "answers once per channel, and in RESP2 leaves the connection able to run only the pub/sub commands, \
         where the harness reads one reply per request: tests/kv_pubsub.rs runs it against both",
    ),
    ("PSUBSCRIBE", "as SUBSCRIBE"),
    ("SSUBSCRIBE", "as SUBSCRIBE"),
    (
        "SENTINEL",
        "mojim kv's own fail-over queries, which a Redis that is not a Sentinel does not know (DELIBERATE): \
         tests/kv_sentinel.rs",
    ),
    (
        "LATENCY",
        "its replies are each server's own timings and latency events, which two servers never share: the kv \
         crate's observe tests",
    ),
    ("SLOWLOG", "as LATENCY: entries carry each server's own durations, times and ids"),
    (
        "CLUSTER",
        "cluster mode's commands, which a standalone Redis and a standalone mojim kv both refuse with the same \
         error (the kv crate's cmd/tests/cluster.rs checks mojim kv's): their answers in cluster mode are \
         tested in cmd/tests/cluster.rs and, with redis-py's RedisCluster, crates/kv/tests/cluster_mode.rs",
    ),
    ("ASKING", "as CLUSTER"),
    ("READONLY", "as CLUSTER"),
    ("READWRITE", "as CLUSTER"),
    (
        "MONITOR",
        "turns the connection into a stream of every other client's commands, where the harness reads one \
         reply per request: tests/kv_monitor.rs runs redis-cli monitor against it",
    ),
];

/// The names (upper case) of the commands the generator sends in one run.
pub fn sent(seed: u64, mode: Mode, steps: usize, faults: usize, gates: Gates) -> BTreeSet<String> {
    let mut gen = Gen::new(seed, mode, steps, faults, gates);
    let mut names = BTreeSet::new();
    for i in 0..steps {
        match gen.step(i) {
            Step::Pipeline(cmds) => names.extend(cmds.iter().map(Cmd::name)),
            Step::OverLimit(before, req) => {
                names.extend(before.iter().map(Cmd::name));
                names.insert(String::from_utf8_lossy(&req[0]).to_ascii_uppercase());
            }
            Step::Scan(_) => {
                names.insert("SCAN".into());
            }
            // The harness asks the generator for these writes (and so must this).
            Step::Fault(Fault::MirrorDownUnderWrites) => names.extend(gen.writes().iter().map(Cmd::name)),
            Step::Fault(_) | Step::Check | Step::Unsupported(_) => {}
        }
    }
    names
}
