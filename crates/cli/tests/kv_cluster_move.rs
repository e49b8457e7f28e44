//! `mojim kv cluster move-slots | rebalance` against a real etcd and two shards, each a
//! `mojim serve` mirror and a `mojim kv --cluster` primary: slots holding keys of every type
//! move while redis-py's `RedisCluster` increments counters in them; the tool killed -9
//! mid-move resumes, or gives the moves back; afterwards every key is in exactly one shard,
//! values and expiry times intact, and no acknowledged increment lost.

mod common;

use common::kv_cluster::{ok, refused, text, KvShards, Mirrors, MoveSlots, Setup};
use common::kv_workload::Conn;
use mojim_kv::resp::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The keys (tags whose slot is in [lo, hi), five keys of each: a string with an expiry, a
/// hash, a list, a set, a sorted set), the counters the writer increments (the first 40 tags'
/// `:c`), and the checks.
const SCRIPT: &str = r#"
import json, os, sys, time
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
import logging
logging.disable(logging.CRITICAL)  # redis-py logs each MOVED and ASK it follows

mode, port0, port1, lo, hi, state = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
TAGS, COUNTERS = 400, 40

def tags():
    out, i = [], 0
    while len(out) < TAGS:
        t = "m%d" % i
        if lo <= key_slot(t.encode()) < hi:
            out.append(t)
        i += 1
    return out

def keys(t):
    return ["{%s}:s" % t, "{%s}:h" % t, "{%s}:l" % t, "{%s}:t" % t, "{%s}:z" % t]

def value(rc, k):
    kind = k[-1]
    if kind == "s": return rc.get(k).decode()
    if kind == "h": return {a.decode(): b.decode() for a, b in rc.hgetall(k).items()}
    if kind == "l": return [x.decode() for x in rc.lrange(k, 0, -1)]
    if kind == "t": return sorted(x.decode() for x in rc.smembers(k))
    if kind == "z": return [[m.decode(), s] for m, s in rc.zrange(k, 0, -1, withscores=True)]

def client():
    return RedisCluster(host="127.0.0.1", port=port0, cluster_error_retry_attempts=20)

if mode == "load":
    rc = client()
    expect = {}
    for t in tags():
        s, h, l, st, z = keys(t)
        rc.set(s, "string of " + t, px=3600000 + len(t))
        rc.hset(h, mapping={"a": t, "b": "2", "c": "x" * 50})
        rc.rpush(l, "one", t, "three")
        rc.sadd(st, "x", "y", t)
        rc.zadd(z, {"low": 1.5, t: 2.0, "high": 3.25})
        for k in keys(t):
            expect[k] = [value(rc, k), rc.execute_command("PEXPIRETIME", k)]
    json.dump(expect, open(state, "w"))
    print("loaded", len(expect))
elif mode == "writer":
    rc = client()
    counters = ["{%s}:c" % t for t in tags()[:COUNTERS]]
    acked, errors, i = [0] * COUNTERS, [0] * COUNTERS, 0
    if os.path.exists(state + ".writer"):  # a writer ran before: its counts go on
        w = json.load(open(state + ".writer"))
        acked, errors = w["acked"], w["errors"]
    while not os.path.exists(state + ".stop"):
        j = i % COUNTERS
        if i == COUNTERS:
            open(state + ".started", "w").close()
        try:
            rc.incr(counters[j])
            acked[j] += 1
        except Exception as e:
            errors[j] += 1
            print("INCR failed:", repr(e), file=sys.stderr)
            time.sleep(0.01)
        i += 1
    json.dump({"acked": acked, "errors": errors}, open(state + ".writer", "w"))
    print("writer done", sum(acked), "acked", sum(errors), "failed")
elif mode == "check":
    owner = sys.argv[7]  # the shard that must hold every key, or "auto": each slot's owner
    rc = client()
    expect = json.load(open(state))
    for k, (v, at) in expect.items():
        assert rc.exists(k) == 1, k
        assert value(rc, k) == v, (k, value(rc, k), v)
        assert rc.execute_command("PEXPIRETIME", k) == at, (k, at)
    w = json.load(open(state + ".writer"))
    counters = ["{%s}:c" % t for t in tags()[:COUNTERS]]
    for c, a, e in zip(counters, w["acked"], w["errors"]):
        got = int(rc.get(c) or 0)
        assert a <= got <= a + e, (c, got, a, e)
    assert sum(w["acked"]) > 0, w
    shard = [redis.Redis(host="127.0.0.1", port=p) for p in (port0, port1)]
    per_slot = {}
    for k in list(expect) + counters:
        per_slot[key_slot(k.encode())] = per_slot.get(key_slot(k.encode()), 0) + 1
    owners = {}
    for start, end, node, *_ in shard[0].execute_command("CLUSTER SLOTS"):
        for slot in range(max(start, lo), min(end, hi - 1) + 1):
            owners[slot] = [port0, port1].index(int(node[1]))
    sizes = [0, 0]
    for slot in range(lo, hi):
        owner = owners[slot] if sys.argv[7] == "auto" else int(sys.argv[7])
        assert owners[slot] == owner, (slot, owners[slot], owner)
        counts = [s.execute_command("CLUSTER COUNTKEYSINSLOT", slot) for s in shard]
        stray = shard[1 - owner].execute_command("CLUSTER GETKEYSINSLOT", slot, 5)
        assert counts[1 - owner] == 0 and counts[owner] == per_slot.get(slot, 0), (slot, counts, owner, stray)
        sizes[owner] += counts[owner]
    total = len(expect) + COUNTERS
    assert [s.dbsize() for s in shard] == sizes and sum(sizes) == total, (sizes, total)
    print("checked", total, "keys", sum(w["acked"]), "increments", sum(w["errors"]), "failed")
"#;

/// Runs SCRIPT in `mode`.
fn python(shards: &KvShards, dir: &Path, mode: &str, extra: &[&str]) -> Command {
    let mut py = common::kv::python_with_redis().expect("python3 with redis-py");
    let state = dir.join("keys.json");
    py.args(["-c", SCRIPT, mode, shards.port(0), shards.port(1), "0", "100"]);
    py.arg(state).args(extra);
    py
}

fn run_python(shards: &KvShards, dir: &Path, mode: &str, extra: &[&str]) -> String {
    let o = python(shards, dir, mode, extra).output().expect("run python3");
    assert!(o.status.success(), "python {mode}: {}", text(&o));
    text(&o)
}

/// The counter writer, killed if the test ends before `stop_writer` (a failed test left it
/// running, holding the test's output open).
struct Writer(Option<std::process::Child>);

impl Drop for Writer {
    fn drop(&mut self) {
        if let Some(mut w) = self.0.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// The counter writer, running until `stop_writer`.
fn start_writer(shards: &KvShards, dir: &Path) -> Writer {
    let _ = std::fs::remove_file(dir.join("keys.json.stop"));
    let _ = std::fs::remove_file(dir.join("keys.json.started"));
    let w = python(shards, dir, "writer", &[]).stdout(Stdio::null()).stderr(Stdio::inherit()).spawn();
    let w = Writer(Some(w.expect("start the writer")));
    // Every counter exists before the move starts.
    common::kv::wait_for("the writer's first increments", || {
        dir.join("keys.json.started").exists().then_some(())
    });
    w
}

fn stop_writer(dir: &Path, mut w: Writer) {
    std::fs::write(dir.join("keys.json.stop"), b"").expect("write the stop file");
    let mut child = w.0.take().expect("the writer runs");
    assert!(child.wait().expect("the writer ends").success(), "the writer failed");
}

/// `mojim kv cluster <args>` after a tool was killed -9: refused while the killed one's
/// slot-move lock lives (its lease runs out within 10 s, longer on a loaded machine), then run to
/// its end; its output.
fn after_the_killed_lock(shards: &KvShards, args: &[&str]) -> String {
    let t0 = Instant::now();
    loop {
        let o = common::kv_cluster::mojim(&shards.shards[0], args);
        let t = text(&o);
        if o.status.success() {
            return t;
        }
        assert!(
            t.contains("holds the slot-move lock") && t0.elapsed() < std::time::Duration::from_secs(60),
            "mojim {args:?}: {t}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// `mojim kv cluster move-slots <args>` started, killed -9 once its progress shows keys moved.
fn kill_mid_move(shards: &KvShards, args: &[&str]) {
    start_move(shards, args).kill();
}

/// `mojim kv cluster move-slots <args>` started, returned once its progress shows keys moved.
fn start_move(shards: &KvShards, args: &[&str]) -> MoveSlots {
    let mut m = MoveSlots::start(&shards.shards[0], args);
    m.wait_keys_moved();
    m
}

/// Stages, on shard `from`'s server, up to 3 keys of each slot in `slots` it still holds, as a
/// run cut short between `CLUSTER STAGEKEYS` and `UNSTAGEKEYS` leaves them; checks that a
/// client is then answered TRYAGAIN for them; returns how many it staged.
/// The killed run's fence is below the topology's last write (it recorded its moves after it
/// took its lock), and the next run's above it: the topology key's revision is a fence between.
fn stage_as_a_cut_short_run(shards: &KvShards, from: usize, slots: std::ops::Range<u16>) -> usize {
    let fence = shards.topology().1.to_string();
    let mut c = Conn::open(&shards.kv_addrs[from]).expect("connect to the source");
    let mut staged = 0;
    for slot in slots {
        let slot = slot.to_string();
        let Value::Array(keys) =
            c.call(&[b"CLUSTER", b"GETKEYSINSLOT", slot.as_bytes(), b"3"]).expect("list")
        else {
            panic!("GETKEYSINSLOT answers an array")
        };
        let keys: Vec<Vec<u8>> = keys
            .into_iter()
            .map(|k| match k {
                Value::Bulk(k) => k,
                other => panic!("{other:?}"),
            })
            .collect();
        if keys.is_empty() {
            continue;
        }
        let mut stage: Vec<&[u8]> = vec![b"CLUSTER", b"STAGEKEYS", fence.as_bytes()];
        stage.extend(keys.iter().map(Vec::as_slice));
        match c.call(&stage).expect("stage") {
            Value::Array(v) if v.len() == keys.len() && v.iter().all(|x| matches!(x, Value::Array(_))) => {}
            other => panic!("STAGEKEYS {keys:?}: {other:?}"),
        }
        let again = c.call(&[b"TYPE", &keys[0]]).expect("TYPE");
        assert!(
            matches!(&again, Value::Error(e) if e.starts_with(b"TRYAGAIN")),
            "a staged key is answered TRYAGAIN, not {again:?}"
        );
        staged += keys.len();
    }
    staged
}

fn call(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// Two shards whose mirrors never take over, so that a test can kill a shard's primary and
/// start it again on its region.
fn unnamed(test: &str) -> Option<KvShards> {
    KvShards::start(test, 2, Setup { mirrors: Mirrors::Unnamed, ..Setup::default() })
}

fn status(shards: &KvShards) -> String {
    text(&common::kv_cluster::mojim(&shards.shards[0], &["kv", "cluster", "status"]))
}

/// 100 slots holding 2,000 keys of every type move from shard 0 to shard 1 while a writer
/// increments 40 counters in them; then the same slots move back, the tool killed -9 mid-move
/// (keys of every slot still moving staged as if it died in a batch) and run again to resume.
#[test]
fn slots_move_live_and_a_killed_move_resumes() {
    let Some(shards) = unnamed("kv_move_live") else { return };
    let dir = shards.shards[0].dir.path().to_owned();
    run_python(&shards, &dir, "load", &[]);

    let w = start_writer(&shards, &dir);
    let out = ok(
        &shards.shards[0],
        &["kv", "cluster", "move-slots", "--from", "p0", "--to", "p1", "--slots", "0-99"],
    );
    assert!(out.contains("recorded the moves: 100 slots moving"), "{out}");
    assert!(out.contains("moved 100 slots, 2") && out.contains("keys/s"), "{out}");
    stop_writer(&dir, w);
    let checked = run_python(&shards, &dir, "check", &["1"]);
    eprintln!("{out}{checked}");
    assert!(checked.contains("checked 2040 keys"), "{checked}");
    let st = status(&shards);
    assert!(st.contains("slots 0-99,8192-16383 (8292 slots)") && !st.contains("moving slot"), "{st}");

    // Back to shard 0, the tool killed -9 mid-move, then resumed by running it again. While it
    // runs, a second tool is refused, naming it.
    let w = start_writer(&shards, &dir);
    let first = start_move(&shards, &["--from", "p1", "--to", "p0", "--slots", "0-99", "--pipeline", "3"]);
    let pid = format!("pid {}", first.pid());
    let says =
        ["`mojim kv cluster move-slots` on host", &pid, "since unix time", "goes by itself within 10 s"];
    refused(&shards.shards[0], &["kv", "cluster", "move-slots"], &says);
    refused(&shards.shards[0], &["kv", "cluster", "rebalance"], &says);
    first.kill();
    let st = status(&shards);
    assert!(st.contains("moving slot"), "the moves stay recorded: {st}");
    // Keys in flight when it died: the next run lands them.
    let cut = stage_as_a_cut_short_run(&shards, 1, 0..100);
    assert!(cut > 0, "the killed run left keys to move");
    let out = after_the_killed_lock(&shards, &["kv", "cluster", "move-slots"]);
    assert!(out.contains("moved ") && !out.contains("recorded the moves"), "{out}");
    stop_writer(&dir, w);
    let checked = run_python(&shards, &dir, "check", &["0"]);
    assert!(checked.contains("checked 2040 keys"), "{checked}");
    let st = status(&shards);
    assert!(st.contains("slots 0-8191 (8192 slots)") && !st.contains("moving slot"), "{st}");
}

/// The source's `mojim kv` killed -9 mid-move: the tool stops, naming it; the server restarted
/// on its region, the move resumes, and nothing acknowledged to a client or the tool is lost.
#[test]
fn the_source_killed_mid_move_restarts_and_the_move_resumes() {
    a_server_killed_mid_move_restarts_and_the_move_resumes("kv_move_source", 0);
}

/// The target's `mojim kv` killed -9 mid-move, with a batch staged on the source: the tool
/// stops, naming it, and the batch's keys stay staged (TRYAGAIN) rather than lost; the server
/// restarted on its region, the move resumes and lands them.
#[test]
fn the_target_killed_mid_move_restarts_and_the_move_resumes() {
    a_server_killed_mid_move_restarts_and_the_move_resumes("kv_move_target", 1);
}

/// Shard `killed`'s server (0: the source, 1: the target) killed -9 while slots 0-99 move
/// from shard 0 to shard 1, then restarted; keys of every slot still moving staged as a run cut
/// short in a batch leaves them; the move run again to its end, and every key checked.
fn a_server_killed_mid_move_restarts_and_the_move_resumes(test: &str, killed: usize) {
    let Some(mut shards) = unnamed(test) else { return };
    let dir = shards.shards[0].dir.path().to_owned();
    run_python(&shards, &dir, "load", &[]);

    let w = start_writer(&shards, &dir);
    let tool = start_move(&shards, &["--from", "p0", "--to", "p1", "--slots", "0-99", "--pipeline", "3"]);
    shards.primaries[killed].take().expect("the server runs").kill();
    let (ended_well, said) = tool.finish();
    assert!(!ended_well && said.contains("shard ") && said.contains("move-slots` again"), "{said}");
    shards.start_primary(killed);
    assert!(stage_as_a_cut_short_run(&shards, 0, 0..100) > 0, "the killed run left keys to move");
    let out = ok(&shards.shards[0], &["kv", "cluster", "move-slots"]);
    assert!(out.contains("moved "), "{out}");
    stop_writer(&dir, w);
    let checked = run_python(&shards, &dir, "check", &["1"]);
    assert!(checked.contains("checked 2040 keys"), "{checked}");
    assert!(!status(&shards).contains("moving slot"), "{}", status(&shards));
}

/// The target's mirror, then the source's, killed -9 mid-move and restarted from its folder:
/// the shard's writes wait for it (or the tool stops, naming the shard, and is run again), and
/// every key lands once, values and expiries intact, no acknowledged increment lost.
#[test]
fn the_mirrors_killed_mid_move_restart_and_the_move_ends() {
    let Some(mut shards) = unnamed("kv_move_mirrors") else { return };
    let dir = shards.shards[0].dir.path().to_owned();
    run_python(&shards, &dir, "load", &[]);

    let w = start_writer(&shards, &dir);
    let tool = start_move(&shards, &["--from", "p0", "--to", "p1", "--slots", "0-99", "--pipeline", "3"]);
    for shard in [1, 0] {
        let c = &mut shards.shards[shard];
        let addr = c.mirror_addr();
        c.kill_mirror();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        c.start_mirror_with(&["--listen", &addr]);
    }
    let (ended_well, said) = tool.finish();
    if !ended_well {
        assert!(said.contains("move-slots` again"), "{said}");
        let out = ok(&shards.shards[0], &["kv", "cluster", "move-slots"]);
        assert!(out.contains("moved "), "{out}");
    }
    stop_writer(&dir, w);
    let checked = run_python(&shards, &dir, "check", &["1"]);
    assert!(checked.contains("checked 2040 keys"), "{checked}");
    assert!(!status(&shards).contains("moving slot"), "{}", status(&shards));
}

/// A move killed -9 mid-way (keys staged as if it died in a batch) is given back with
/// --rollback: the keys of every slot still moving (the one cut short among them) return to
/// the source, which keeps those slots; the slots
/// whose move ended before the kill stay with the target.
#[test]
fn a_killed_move_is_rolled_back() {
    let Some(shards) = unnamed("kv_move_back") else { return };
    let dir = shards.shards[0].dir.path().to_owned();
    run_python(&shards, &dir, "load", &[]);

    let w = start_writer(&shards, &dir);
    kill_mid_move(&shards, &["--from", "p0", "--to", "p1", "--slots", "0-99", "--pipeline", "3"]);
    // Keys in flight when it died: they reach the target before the moves turn around.
    let cut = stage_as_a_cut_short_run(&shards, 0, 0..100);
    assert!(cut > 0, "the killed run left keys to move");
    let out = after_the_killed_lock(&shards, &["kv", "cluster", "move-slots", "--rollback"]);
    assert!(out.contains("giving back") && out.contains("moved "), "{out}");
    stop_writer(&dir, w);
    let checked = run_python(&shards, &dir, "check", &["auto"]);
    assert!(checked.contains("checked 2040 keys"), "{checked}");
    // The slots whose move ended before the kill are shard 1's; the others shard 0's again.
    let st = status(&shards);
    assert!(!st.contains("moving slot") && st.contains("-8191 (") && st.contains("8192-16383 ("), "{st}");
}

/// Refusals name what is wrong and write nothing; rebalance --dry-run after add-shard plans the
/// new shard's share.
#[test]
fn refusals_and_the_rebalance_plan() {
    let Some(shards) = unnamed("kv_move_refusals") else { return };
    let c = &shards.shards[0];
    let mv = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["kv", "cluster", "move-slots"].map(String::from).to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    refused(c, &call(&mv(&["--from", "zz", "--to", "p1", "--slots", "1"])), &["no shard \"zz\""]);
    refused(
        c,
        &call(&mv(&["--from", "p1", "--to", "p0", "--slots", "5-7,9"])),
        &["does not own slots 5-7,9"],
    );
    refused(c, &call(&mv(&["--from", "p0", "--to", "m0", "--slots", "5"])), &["the same shard"]);
    refused(c, &call(&mv(&["--from", "p0", "--to", "p1", "--slots", "5-x"])), &["\"5-x\" is not a slot"]);
    refused(c, &call(&mv(&["--from", "p0", "--to", "p1"])), &["--slots A-B[,C..] or --count N"]);
    assert!(!status(&shards).contains("moving slot"), "nothing was recorded");

    // Empty slots move at once.
    let out = ok(c, &call(&mv(&["--from", "p0", "--to", "p1", "--count", "2"])));
    assert!(out.contains("moved 2 slots, 0 keys"), "{out}");

    // A third shard, with no slots and no server yet: the plan gives it its share, from the
    // end of each other shard's slots.
    let shard_c = "c1/127.0.0.3:6379/127.0.0.3:7001,c2/127.0.0.4:6379/127.0.0.4:7001";
    ok(c, &["kv", "cluster", "add-shard", "--shard", shard_c]);
    let plan = ok(c, &["kv", "cluster", "rebalance", "--dry-run"]);
    assert!(plan.contains("move 2729 slots 5463-8191 from "), "{plan}");
    assert!(plan.contains("move 2732 slots 13652-16383 from "), "{plan}");
    assert!(plan.contains("dry run: nothing changed"), "{plan}");
    assert!(!status(&shards).contains("moving slot"), "a dry run records nothing");

    // A move to it is recorded, but no key is copied until every server took the new epoch:
    // the wait names the one that does not answer. Then the slot is moving already.
    let args = mv(&["--from", "p0", "--to", "c1", "--slots", "10", "--epoch-timeout", "1"]);
    refused(c, &call(&args), &["c1 at 127.0.0.3:6379 does not answer", "move-slots` again"]);
    assert!(status(&shards).contains("moving slot 10 from"), "{}", status(&shards));
    refused(
        c,
        &call(&mv(&["--from", "p0", "--to", "p1", "--slots", "9-11"])),
        &["slots 10 are moving already"],
    );
    refused(c, &["kv", "cluster", "rebalance", "--dry-run"], &["1 slot moves are recorded", "--rollback"]);
    refused(c, &["kv", "cluster", "remove-shard", "--shard", "c1"], &["part of the move of slot 10"]);
}
