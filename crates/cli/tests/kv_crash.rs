//! `mojim kv` killed with SIGKILL under load: restarted on the same region, or started on the
//! promoted mirror, it serves every acknowledged write, no transaction in part, and counters
//! no lower than their last acknowledged value.
//!
//! Writers pipeline `SET`s of self-describing values, `INCR`s and two-key `MULTI`/`EXEC`
//! transactions, and log each reply they get. The server is killed while they write; nothing
//! is stopped first.

mod common;

use common::kv::{bulk, node, promote, start_kv, start_kv_on_promoted, wait_for, KvCluster, Resp};
use common::{Cluster, WAIT};
use mojim_kv::resp::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const WRITERS: usize = 4;

/// What one writer had acknowledged when its connection went.
#[derive(Default)]
struct Acked {
    sets: Vec<(String, String)>,
    /// The last value an INCR of this writer's counter returned.
    counter: i64,
    /// INCRs sent without a reply.
    counter_in_flight: i64,
    /// Transactions acknowledged: each set `tx:<w>:<n>:a` and `:b` to the same value.
    txs: Vec<u64>,
    /// Transactions sent, acknowledged or not.
    txs_sent: u64,
}

fn value(w: usize, i: u64) -> String {
    format!("writer {w} value {i} {}", "x".repeat((i % 7 * 40) as usize))
}

/// Writes until the connection fails; every reply is checked and logged.
fn writer(addr: String, w: usize, acked_total: Arc<AtomicU64>) -> Acked {
    let mut c = Resp::connect(&addr);
    let mut a = Acked::default();
    let mut i = 0u64;
    loop {
        // One pipeline: 6 SETs, an INCR, a transaction. A send that fails ends the writer:
        // the server is gone.
        let mut expect = Vec::new();
        let mut sent = Ok(());
        for _ in 0..6 {
            let k = format!("w{w}:{i}");
            sent = sent.and_then(|()| c.try_send(&[b"SET", k.as_bytes(), value(w, i).as_bytes()]));
            expect.push(Some(k));
            i += 1;
        }
        a.counter_in_flight = 1;
        sent = sent.and_then(|()| c.try_send(&[b"INCR", format!("counter:{w}").as_bytes()]));
        let tx = a.txs_sent;
        a.txs_sent += 1;
        let v = format!("tx {tx}");
        sent = sent
            .and_then(|()| c.try_send(&[b"MULTI"]))
            .and_then(|()| c.try_send(&[b"SET", format!("tx:{w}:{tx}:a").as_bytes(), v.as_bytes()]))
            .and_then(|()| c.try_send(&[b"SET", format!("tx:{w}:{tx}:b").as_bytes(), v.as_bytes()]))
            .and_then(|()| c.try_send(&[b"EXEC"]));
        if sent.is_err() {
            return a;
        }
        for k in expect {
            match c.read() {
                Some(Value::Simple(s)) if s == b"OK" => {
                    let k = k.expect("a key");
                    let i: u64 = k.rsplit(':').next().and_then(|n| n.parse().ok()).expect("a number");
                    a.sets.push((k, value(w, i)));
                    acked_total.fetch_add(1, Ordering::Relaxed);
                }
                None => return a,
                Some(other) => panic!("writer {w}: SET answered {other:?}"),
            }
        }
        match c.read() {
            Some(Value::Int(n)) => {
                assert!(n > a.counter, "writer {w}: INCR went from {} to {n}", a.counter);
                a.counter = n;
                a.counter_in_flight = 0;
            }
            None => return a,
            Some(other) => panic!("writer {w}: INCR answered {other:?}"),
        }
        for _ in 0..3 {
            match c.read() {
                Some(Value::Simple(_)) => {}
                None => return a,
                Some(other) => panic!("writer {w}: MULTI/SET answered {other:?}"),
            }
        }
        match c.read() {
            Some(Value::Array(v)) if v.len() == 2 => a.txs.push(tx),
            None => return a,
            Some(other) => panic!("writer {w}: EXEC answered {other:?}"),
        }
    }
}

/// Waits until `total` writes are acknowledged, at least `min`.
fn wait_acked(total: &AtomicU64, min: u64) {
    let t0 = Instant::now();
    while total.load(Ordering::Relaxed) < min {
        assert!(
            t0.elapsed() < WAIT,
            "the writers got only {} writes acknowledged",
            total.load(Ordering::Relaxed)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Starts the writers against `addr`, lets them get `min_acked` writes acknowledged, runs
/// `kill` (given the count of acknowledged writes), and returns what each had acknowledged.
fn load_then(addr: &str, min_acked: u64, kill: impl FnOnce(&AtomicU64)) -> Vec<Acked> {
    let total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, total) = (addr.to_string(), total.clone());
            std::thread::spawn(move || writer(addr, w, total))
        })
        .collect();
    wait_acked(&total, min_acked);
    kill(&total);
    threads.into_iter().map(|t| t.join().expect("a writer panicked")).collect()
}

/// Checks that the server at `c` holds everything `acked` says was acknowledged.
fn check(c: &mut Resp, acked: &[Acked], what: &str) {
    let mut n = 0;
    for (w, a) in acked.iter().enumerate() {
        // Pipelined reads: thousands of GETs without a round trip each.
        for chunk in a.sets.chunks(500) {
            for (k, _) in chunk {
                c.send(&[b"GET", k.as_bytes()]);
            }
            for (k, v) in chunk {
                let got = c.read().expect("a reply");
                assert_eq!(bulk(&got), Some(v.as_bytes()), "{what}: writer {w}'s acknowledged {k}");
                n += 1;
            }
        }
        let Value::Bulk(cnt) = c.cmd(&["GET", &format!("counter:{w}")]) else {
            panic!("{what}: writer {w}'s counter is gone (last acknowledged {})", a.counter)
        };
        let cnt: i64 = String::from_utf8_lossy(&cnt).parse().expect("a counter");
        assert!(
            cnt >= a.counter && cnt <= a.counter + a.counter_in_flight,
            "{what}: writer {w}'s counter is {cnt}, acknowledged {} (+{} in flight)",
            a.counter,
            a.counter_in_flight
        );
        for tx in 0..a.txs_sent {
            let ka = format!("tx:{w}:{tx}:a");
            let kb = format!("tx:{w}:{tx}:b");
            let (va, vb) = (c.cmd(&["GET", &ka]), c.cmd(&["GET", &kb]));
            assert_eq!(va, vb, "{what}: writer {w}'s transaction {tx} is there in part");
            if a.txs.contains(&tx) {
                assert_eq!(
                    bulk(&va),
                    Some(format!("tx {tx}").as_bytes()),
                    "{what}: acknowledged transaction {tx}"
                );
            }
        }
    }
    println!("{what}: {n} acknowledged SETs, {WRITERS} counters and the transactions checked");
}

#[test]
fn kill_9_under_load_then_restart_serves_every_acknowledged_write() {
    let mut k = KvCluster::new("kv-kill9", 64 << 20);
    for round in 0..3 {
        // Each start listens on a port of its own.
        let addr = k.addr();
        let acked = load_then(&addr, 2000, |_| k.kill());
        k.start();
        let mut c = k.client();
        check(&mut c, &acked, &format!("restart {round}"));
        // Clean up for the next round's writers (same key names).
        assert_eq!(c.cmd(&["FLUSHDB"]), Value::Simple(b"OK".to_vec()));
    }
}

#[test]
fn the_promoted_mirror_serves_every_acknowledged_write() {
    let c = Cluster::new("kv-promote", 64 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);
    let addr = kv.addr().to_string();
    // The primary's machine is lost under load: its server dies first.
    let acked = load_then(&addr, 2000, |_| kv.kill());
    promote(&c, mirror.addr(), &[backup.addr()]);
    // mojim kv on the promoted node: its data area is the region, the backup its mirror.
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    let mut client = Resp::connect(promoted.addr());
    check(&mut client, &acked, "promoted mirror");
    // It is the primary now: writes go on, replicated to the former backup.
    assert_eq!(client.cmd(&["SET", "after", "promotion"]), Value::Simple(b"OK".to_vec()));
    let Value::Bulk(info) = client.cmd(&["INFO", "replication"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(info.contains(&format!("mirror:{}", backup.addr())) && info.contains("epoch:2"), "{info}");
    drop(mirror);
}

/// The mirror is killed under a client's writes: they wait (no reply is sent for a write the
/// mirror does not have), and are answered once the mirror is back on its address.
#[test]
fn writes_wait_for_a_lost_mirror_and_go_on_when_it_is_back() {
    let mut k = KvCluster::new("kv-mirror-lost", 16 << 20);
    let mut c = k.client();
    assert_eq!(c.cmd(&["SET", "before", "1"]), Value::Simple(b"OK".to_vec()));
    let mirror_addr = k.c.mirror_addr();
    k.c.kill_mirror();
    // Pipelined writes while the mirror is gone.
    for n in 0..20 {
        c.send(&[b"SET", format!("during{n}").as_bytes(), b"2"]);
    }
    k.c.start_mirror_with(&["--listen", &mirror_addr]);
    for _ in 0..20 {
        assert_eq!(c.read(), Some(Value::Simple(b"OK".to_vec())));
    }
    assert_eq!(c.cmd(&["DBSIZE"]), Value::Int(21));
    let Value::Bulk(info) = c.cmd(&["INFO", "replication"]) else { panic!("INFO") };
    assert!(String::from_utf8_lossy(&info).contains("mirror_state:online"));
    // And a restart of mojim kv finds it.
    k.kill();
    k.start();
    let mut c = k.client();
    assert_eq!(c.cmd(&["GET", "during19"]), Value::bulk("2"));
}

/// The mirror dies under load, with groups in flight whose replies wait, and comes back on its
/// address: the writes go on, and after the primary's machine is lost too, the promoted
/// mirror serves every write acknowledged before and after its own restart.
#[test]
fn a_mirror_lost_and_back_under_load_then_promoted_serves_every_acknowledged_write() {
    let c = Cluster::new("kv-mirror-back", 64 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        f.cluster.reconnect_ms = 20;
    });
    let backup = node(&c, "b", &[]);
    let mut mirror = node(&c, "m", &[backup.addr()]);
    let maddr = mirror.addr().to_string();
    let mut kv = start_kv(&c, &["--mirror", &maddr]);
    let addr = kv.addr().to_string();
    let acked = load_then(&addr, 2000, |total| {
        mirror.kill();
        let dir = c.dir.path().join("m");
        let args = ["serve", "--config", c.cfg_path.to_str().expect("utf-8"), "--listen", &maddr];
        let args = [&args[..], &["--dir", dir.to_str().expect("utf-8"), "--backup", backup.addr()]].concat();
        mirror = wait_for("the mirror to start again on its address", || {
            mojim_tools::child::ChildNode::spawn(common::exe(), &args).ok()
        });
        let now = total.load(Ordering::Relaxed);
        wait_acked(total, now + 2000);
        kv.kill();
    });
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    let mut client = Resp::connect(promoted.addr());
    check(&mut client, &acked, "promoted mirror after its restart");
    drop(mirror);
}
