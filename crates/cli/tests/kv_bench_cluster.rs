//! `mojim bench --kv --targets mojim-cluster`: clusters of shards (each `mojim kv --cluster`
//! with its `mojim serve` mirror, the topology made by `mojim kv cluster create` in an etcd the
//! benchmark starts) measured beside mojim-sync; the report's CPU-seconds, operations per
//! CPU-second and operations per shard; the load following MOVED when a slot changes owner
//! during a run; the refusals; and that nothing is left behind. Needs etcd (Debian
//! etcd-server). The numbers are not checked: a debug build on a shared machine.

mod common;

use common::bench::leftovers;
use common::kv::wait_for;
use common::TempDir;
use mojim_etcd::testing::{skip_without_etcd, EtcdServer};
use mojim_tools::kv::client::RespClient;
use mojim_tools::kv::janitor::Janitor;
use mojim_tools::kv::load::{self, RunSpec};
use mojim_tools::kv::resp::Value;
use mojim_tools::kv::targets::{Env, Wait};
use mojim_tools::kv::ycsb::Workload;
use mojim_tools::kv::{load_records, shards};
use std::path::Path;
use std::time::Duration;

/// `mojim bench --kv` with `args`, its folders in `dir`: (succeeded, stdout, stderr).
fn bench(dir: &Path, args: &[&str]) -> (bool, String, String) {
    common::bench::bench(dir, &[&["--kv"], args].concat())
}

/// One cluster of 2 shards beside mojim-sync, SET and GET for a short time: every line has its
/// CPU-seconds and operations per CPU-second; the cluster's lines name their 2 shards, and every
/// shard served some of the operations (and no MOVED: nothing moved).
#[test]
fn a_two_shard_cluster_reports_cpu_and_operations_on_every_shard() {
    if skip_without_etcd() {
        return;
    }
    let dir = TempDir::new("kv-bench-cluster");
    let (ok, stdout, stderr) = bench(
        dir.path(),
        &[
            "--targets",
            "mojim-sync,mojim-cluster",
            "--shards",
            "2",
            "--workloads",
            "set,get",
            "--tools",
            "kv",
            "--sizes",
            "64",
            "--clients",
            "3",
            "--pipeline",
            "4",
            "--records",
            "200",
            "--ops",
            "1000000",
            "--duration",
            "0.5",
            "--region-size",
            "64MiB",
            "--json",
        ],
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains("kv: starting mojim-cluster of 2 shards"), "{stderr}");
    let rows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(rows.len(), 4, "set and get on two targets:\n{stdout}");
    for r in &rows {
        assert!(r["ops"].as_u64().is_some_and(|n| n > 0), "{r}");
        assert_eq!(r["misses"], 0, "{r}");
        assert!(r["cpu_s"].as_f64().is_some_and(|c| c >= 0.0), "no cpu_s in {r}");
        if r["cpu_s"].as_f64() > Some(0.0) {
            assert!(r["ops_per_cpu_s"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        }
        if r["target"] == "mojim-cluster" {
            assert_eq!(r["shards"], 2, "{r}");
            let per: Vec<u64> = r["shard_ops"]
                .as_array()
                .expect("shard_ops")
                .iter()
                .map(|n| n.as_u64().expect("a count"))
                .collect();
            assert_eq!(per.len(), 2, "{r}");
            assert!(per.iter().all(|n| *n > 0), "a shard served nothing: {r}");
            assert_eq!(per.iter().sum::<u64>(), r["ops"].as_u64().unwrap(), "{r}");
            assert_eq!((r["moved"].as_u64(), r["asked"].as_u64()), (Some(0), Some(0)), "{r}");
        } else {
            assert_eq!(r["target"], "mojim-sync", "{r}");
            assert!(r.get("shards").is_none() && r.get("shard_ops").is_none(), "{r}");
        }
    }
    for w in ["set", "get"] {
        for t in ["mojim-sync", "mojim-cluster"] {
            assert!(rows.iter().any(|r| r["workload"] == w && r["target"] == t), "no {t} {w}:\n{stdout}");
        }
    }
}

/// The table: a cluster of one shard beside mojim-sync, divided by it (the cost of cluster
/// mode), with its CPU columns and a line of operations per shard.
#[test]
fn the_table_divides_a_one_shard_cluster_by_mojim_sync() {
    if skip_without_etcd() {
        return;
    }
    let dir = TempDir::new("kv-bench-cluster-table");
    let (ok, stdout, stderr) = bench(
        dir.path(),
        &[
            "--targets",
            "mojim-sync,mojim-cluster",
            "--workloads",
            "set",
            "--tools",
            "kv",
            "--sizes",
            "64",
            "--clients",
            "2",
            "--pipeline",
            "1",
            "--records",
            "50",
            "--ops",
            "300",
            "--region-size",
            "64MiB",
        ],
    );
    assert!(ok, "{stderr}");
    let header = stdout.lines().next().expect("a header");
    for col in ["cpu_s", "ops/cpu_s", "ops÷mojim", "p50÷mojim"] {
        assert!(header.contains(col), "no {col} in {header}");
    }
    let row = stdout.lines().find(|l| l.starts_with("kv") && l.contains("mojim-cluster/1")).expect("a row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert!(cols[7].parse::<f64>().is_ok_and(|x| x > 0.0), "{row}");
    assert!(cols[10].parse::<f64>().is_ok(), "cpu_s in {row}");
    assert!(
        stdout.contains("mojim-cluster/1 set (64 B, clients 2, pipeline 1): ops per shard 300, MOVED 0"),
        "{stdout}"
    );
}

/// What a cluster target cannot run is refused before anything starts, naming it.
#[test]
fn what_a_cluster_cannot_run_is_refused_before_anything_starts() {
    let dir = TempDir::new("kv-bench-cluster-refused");
    for (args, says) in [
        (&["--targets", "mojim-cluster", "--workloads", "set,ycsb-e,zadd"][..], "not ycsb-e, zadd"),
        (
            &["--targets", "mojim-sync", "--shards", "2"][..],
            "--shards 2: shards are those of target mojim-cluster",
        ),
        (&["--targets", "mojim-cluster", "--shards", "17"][..], "17"),
        (
            &[
                "--targets",
                "mojim-cluster",
                "--workloads",
                "set",
                "--tls",
                "on",
                "--tools",
                "redis-benchmark",
            ][..],
            "in the clear",
        ),
    ] {
        let (ok, _, stderr) = bench(dir.path(), args);
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("kv: starting"), "{args:?} started something: {stderr}");
    }
}

/// What `shards::start` needs for a cluster of 2 shards of 16 MiB in `dir`, on `etcd`.
fn two_shards<'a>(dir: &'a Path, etcd: &'a EtcdServer) -> Env<'a> {
    Env {
        redis_server: Path::new("redis-server"),
        mojim: common::exe(),
        dir,
        disk_dir: dir,
        region_size: 16 << 20,
        kv_args: &[],
        busy_poll_us: 0,
        read_barrier: None,
        log_capacity: None,
        tls: None,
        shards: &[2],
        etcd: Some(etcd),
    }
}

/// The count of `field` in `INFO section` of the server at `addr`: the first number of its
/// line (`errorstat_TRYAGAIN:count=N`, `cmdstat_set:calls=N,...`); 0 if there is no line, as
/// for a command never run.
fn info_count(addr: &str, section: &str, field: &str) -> u64 {
    let mut c = RespClient::connect(addr, Duration::from_secs(5)).expect("connect for INFO");
    let Value::Bulk(Some(text)) = c.command(&[b"INFO", section.as_bytes()]).expect("INFO") else {
        panic!("INFO {section} answers a bulk string")
    };
    let text = String::from_utf8(text).expect("utf-8");
    let value = text.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'));
    value.map_or(0, |v| {
        let first = v.trim().split(',').next().unwrap_or_default();
        first.rsplit('=').next().unwrap_or_default().parse().expect("a count")
    })
}

/// A slot range changes owner in etcd while the load runs: the load is answered MOVED, sends
/// the operations again to the new owner, counts the redirects, and the run completes.
#[test]
fn the_load_follows_moved_when_the_slots_change_owner_mid_run() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let dir = TempDir::new("kv-bench-cluster-moved");
    let mut janitor = Janitor::start();
    let env = two_shards(dir.path(), &etcd);
    let server = shards::start(&env, "moved", 2, &mut janitor).expect("a cluster of 2 shards starts");
    load_records(&server.addr, true, 100, 32, Wait::None).expect("load");
    let spec = RunSpec {
        addr: server.addr.clone(),
        workload: Workload::Set,
        size: 32,
        clients: 2,
        pipeline: 2,
        ops: u64::MAX,
        duration: Some(Duration::from_secs(3)),
        records: 100,
        members: 0,
        wait: Wait::None,
        seed: 3,
        cluster: true,
    };
    let addrs = server.cluster.as_ref().expect("a cluster target").addrs.clone();
    let before: Vec<u64> = addrs.iter().map(|a| info_count(a, "commandstats", "cmdstat_set")).collect();
    let run = std::thread::spawn(move || load::run(&spec));
    // The move comes once every shard has served the run (a fixed 800 ms once let a run that
    // started late on a loaded machine see the new owner from its start: no MOVED, and no
    // operation on shard 0), and leaves it most of its 3 s to be answered MOVED.
    wait_for("the run's operations on every shard", || {
        addrs
            .iter()
            .zip(&before)
            .all(|(a, &n)| info_count(a, "commandstats", "cmdstat_set") > n)
            .then_some(())
    });
    // Shard 0's slots go to shard 1 (its keys stay behind: the load only writes).
    let client = etcd.client(Duration::from_secs(2));
    let key = "/moved-mojim-cluster2/kv-cluster/topology";
    let mut t: serde_json::Value = serde_json::from_slice(&client.get(key).unwrap().unwrap().value).unwrap();
    t["shards"][1]["slots"] = serde_json::json!([{ "start": 0, "end": 16383 }]);
    t["shards"][0]["slots"] = serde_json::json!([]);
    t["epoch"] = (t["epoch"].as_u64().unwrap() + 1).into();
    client.put(key, &serde_json::to_vec(&t).unwrap(), None).unwrap();
    let o = run.join().expect("the load").expect("the run completes");
    assert!(o.moved > 0, "no MOVED was followed ({} operations)", o.ops);
    assert_eq!(o.asked, 0);
    assert_eq!(o.shard_ops.len(), 2);
    assert!(o.shard_ops.iter().all(|(_, n)| *n > 0), "{:?}", o.shard_ops);
    assert_eq!(o.shard_ops.iter().map(|(_, n)| n).sum::<u64>(), o.ops);
    server.stop(&mut janitor);
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

/// A key in flight between two shards (staged on the source of its slot's move, as
/// `move-slots` stages a batch) is answered TRYAGAIN: the load sends the operation again to the
/// same shard until the key lands, counts the answers, and the run completes.
#[test]
fn the_load_sends_again_what_is_answered_tryagain() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let dir = TempDir::new("kv-bench-cluster-tryagain");
    let mut janitor = Janitor::start();
    let env = two_shards(dir.path(), &etcd);
    let server = shards::start(&env, "tryagain", 2, &mut janitor).expect("a cluster of 2 shards starts");
    load_records(&server.addr, true, 4, 32, Wait::None).expect("load");
    // The slot of record 0's key moves from its owner to the other shard.
    let key = mojim_tools::kv::key_name(0);
    let slot = mojim_kv::cluster::slot::key_slot(key.as_bytes());
    let client = etcd.client(Duration::from_secs(2));
    let path = "/tryagain-mojim-cluster2/kv-cluster/topology";
    let mut t: serde_json::Value = serde_json::from_slice(&client.get(path).unwrap().unwrap().value).unwrap();
    let owns =
        |s: &serde_json::Value| {
            s["slots"].as_array().unwrap().iter().any(|r| {
                (r["start"].as_u64().unwrap()..=r["end"].as_u64().unwrap()).contains(&u64::from(slot))
            })
        };
    let from = usize::from(!owns(&t["shards"][0]));
    let ids = [t["shards"][from]["id"].clone(), t["shards"][1 - from]["id"].clone()];
    t["moves"] = serde_json::json!([{ "slot": slot, "from": ids[0], "to": ids[1] }]);
    let epoch = t["epoch"].as_u64().unwrap() + 1;
    t["epoch"] = epoch.into();
    client.put(path, &serde_json::to_vec(&t).unwrap(), None).unwrap();
    let addrs = server.cluster.as_ref().expect("a cluster target").addrs.clone();
    let mut src = RespClient::connect(&addrs[from], Duration::from_secs(5)).expect("connect to the source");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let staged = loop {
        match src.command(&[b"CLUSTER", b"STAGEKEYS", b"1", key.as_bytes()]).expect("STAGEKEYS") {
            Value::Array(Some(v)) if matches!(v[0], Value::Array(Some(_))) => break v,
            // The server has not taken the move yet.
            other => assert!(std::time::Instant::now() < deadline, "STAGEKEYS {key}: {other}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(staged.len(), 1);
    let spec = RunSpec {
        addr: server.addr.clone(),
        workload: Workload::Set,
        size: 32,
        clients: 1,
        pipeline: 1,
        ops: u64::MAX,
        duration: Some(Duration::from_secs(4)),
        records: 1,
        members: 0,
        wait: Wait::None,
        seed: 3,
        cluster: true,
    };
    let run = std::thread::spawn(move || load::run(&spec));
    // The key leaves the stage once the source has answered the run TRYAGAIN (a fixed 700 ms
    // once let a run that started late on a loaded machine miss the stage), and the run has
    // most of its 4 s left to be answered ASK.
    wait_for("a TRYAGAIN from the source", || {
        (info_count(&addrs[from], "errorstats", "errorstat_TRYAGAIN") > 0).then_some(())
    });
    // Dropped from the stage (the key's value is the load's to write): ASK from now on.
    assert_eq!(
        src.command(&[b"CLUSTER", b"UNSTAGEKEYS", b"1", key.as_bytes()]).expect("UNSTAGEKEYS"),
        Value::Int(1)
    );
    let o = run.join().expect("the load").expect("the run completes");
    assert!(o.retried > 0, "no TRYAGAIN was answered ({} operations)", o.ops);
    assert!(o.asked > 0, "no ASK was followed after the key left the stage ({} operations)", o.ops);
    server.stop(&mut janitor);
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

/// `--kv-move`: a small move under load reports the move's rate and the clients' latency before
/// and during it (the run itself checks that the target then owns the slots and holds every
/// loaded key), as a table and as JSON; a region too small for the bytes, and a target other
/// than the cluster, are refused before anything starts.
#[test]
fn a_slot_move_under_load_is_measured_and_checked() {
    if skip_without_etcd() {
        return;
    }
    let dir = TempDir::new("kv-bench-move");
    let small = ["--move-bytes", "2MiB", "--move-slots", "3", "--move-clients", "2", "--duration", "0.3"];
    let (ok, stdout, stderr) =
        common::bench::bench(dir.path(), &[&["--kv-move", "--region-size", "96MiB"][..], &small].concat());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("slot move under load: 3 slots, 2.0 MiB in 512 keys of 4096 B"), "{stdout}");
    for line in ["before ", "during move ", "MiB/s", "keys/s", "p99 during ÷ before"] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    assert!(stderr.contains("slot 2 moved"), "{stderr}");
    let (ok, stdout, stderr) = common::bench::bench(
        dir.path(),
        &[&["--kv-move", "--region-size", "96MiB", "--json", "--move-pipeline", "7"][..], &small].concat(),
    );
    assert!(ok, "{stderr}");
    let row: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!((row["slots"].as_u64(), row["keys"].as_u64()), (Some(3), Some(512)), "{row}");
    for k in ["move_mib_per_s", "move_keys_per_s", "before_p99_us", "during_p99_us", "p99_ratio"] {
        assert!(row[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {row}");
    }
    for (args, says) in [
        (
            &["--kv-move", "--move-bytes", "1GiB", "--region-size", "64MiB"][..],
            "--region-size 1344MiB or more",
        ),
        (&["--kv-move", "--targets", "mojim-sync", "--region-size", "512MiB"][..], "leave --targets out"),
        (&["--kv-move", "--move-bytes", "8KiB", "--move-slots", "3"][..], "fewer than the 3 --move-slots"),
    ] {
        let (ok, _, stderr) = common::bench::bench(dir.path(), args);
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("starting"), "{args:?} started something: {stderr}");
    }
}
