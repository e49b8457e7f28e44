//! Operating a Redis Cluster of `mojim kv` shards against a real etcd and real processes: the
//! metrics of a shard's server carry its shard; a standby that could never serve is refused,
//! and one that waits stops on a signal.

mod common;

use common::kv_ops::refused_at_start as refused;
use common::kv_ops::OneShard;
use common::scrape::{metrics, promtool_accepts};
use common::WAIT;
use mojim_tools::child::ChildNode;
use rustix::process::{kill_process, Pid, Signal};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A cluster node's `/metrics`: every sample carries `shard="<its shard's id>"`, and promtool
/// still accepts the page.
#[test]
fn a_cluster_nodes_metrics_carry_its_shard() {
    let Some(s) = OneShard::start("kv_ops_shard_label") else { return };
    let args = s.kv_args("a1", &["--listen", &s.a1_kv, "--metrics-listen", "127.0.0.1:0"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kv = ChildNode::spawn(common::exe(), &args).expect("mojim kv --cluster starts");
    let addr = kv.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", kv.printed()));
    // A command, so that the per-command families have samples too.
    common::kv::Resp::connect(&s.a1_kv).cmd(&["SET", "bar", "v"]);
    let page = metrics(addr);
    let shard = &s.topology().shards[0].id;
    let label = format!("shard=\"{shard}\"");
    let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.len() > 30, "{page}");
    for l in &samples {
        assert!(l.contains(&label), "a sample without {label}: {l}\n{page}");
    }
    assert!(page.contains(&format!("mojim_kv_commands_total{{{label},cmd=\"set\"}} 1")), "{page}");
    assert!(page.contains(&format!("mojim_kv_uptime_seconds{{{label}}} ")), "{page}");
    promtool_accepts(&page);
}

/// A standby's process, its log so far, and the thread that reads the log (it ends, the log
/// complete, once the process has exited).
type Standby = (std::process::Child, Arc<Mutex<String>>, std::thread::JoinHandle<()>);

/// `mojim kv --cluster --node a2 <args>` started with its log piped; returned once it logs that
/// it waits.
fn waiting_standby(s: &OneShard, args: &[&str]) -> Standby {
    let all = s.kv_args("a2", args);
    let mut child = Command::new(common::exe())
        .args(&all)
        .env("MOJIM_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the standby");
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let mut l = sink.lock().expect("not poisoned");
            l.push_str(&line);
            l.push('\n');
        }
    });
    let t0 = Instant::now();
    while !log.lock().expect("not poisoned").contains("standby: ") {
        let said = log.lock().expect("not poisoned").clone();
        if t0.elapsed() > WAIT || child.try_wait().expect("poll").is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the standby does not say it waits: {said}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, log, reader)
}

/// A standby whose region path no promoted copy can ever be at is refused at start, naming the
/// setting and the fix, as is one whose node is in no shard; one that waits goes on waiting
/// through SIGHUP, and stops at once on SIGTERM and on SIGINT, exit 0, saying so.
#[test]
fn a_standby_that_can_never_serve_is_refused_and_a_waiting_one_stops_on_a_signal() {
    let Some(s) = OneShard::start("kv_ops_standby") else { return };
    let copy = s.c.dir.path().join("mirror").join("data.mojim");
    let copy = copy.to_str().expect("utf-8");
    let refused_with = |args: &[&str], says: &[&str]| {
        let mut all = vec!["kv", "--cluster", "--standby", "--listen", &s.a2_kv];
        all.extend_from_slice(args);
        refused(&s.c, &all, says);
    };
    // The primary's own region file ([region] path left as it is).
    let fix = ["--standby", "[region] path (or --region)", "--region", "data.mojim"];
    refused_with(&["--node", "a2"], &[&fix[..], &["is not a mirror's copy"]].concat());
    let nowhere = s.c.dir.path().join("no-such-folder").join("data.mojim");
    refused_with(
        &["--node", "a2", "--region", nowhere.to_str().expect("utf-8")],
        &[&fix[..], &["no-such-folder, which is not a folder", "start this node's mojim serve first"]]
            .concat(),
    );
    let junk = s.c.dir.path().join("junk");
    std::fs::create_dir(&junk).expect("make a folder");
    std::fs::write(junk.join("data.mojim"), b"not a region").expect("write a file");
    let junk = junk.join("data.mojim");
    refused_with(&["--node", "a2", "--region", junk.to_str().expect("utf-8")], &["is not a region file"]);
    refused_with(&["--node", "zz", "--region", copy], &["node \"zz\"", "is in no shard", "a1, a2, b1, b2"]);

    // A standby of a2 waits (no roles name it); a stop signal ends it at once.
    for (signal, name) in [(Signal::TERM, "SIGTERM"), (Signal::INT, "SIGINT")] {
        let (mut child, log, reader) =
            waiting_standby(&s, &["--standby", "--region", copy, "--listen", &s.a2_kv]);
        let pid = Pid::from_raw(child.id() as i32).expect("a pid");
        // SIGHUP (a reload of its TLS files) does not end the wait.
        kill_process(pid, Signal::HUP).expect("send SIGHUP to the standby");
        std::thread::sleep(Duration::from_millis(300));
        let hup = child.try_wait().expect("poll");
        assert!(
            hup.is_none(),
            "SIGHUP ended a waiting standby ({hup:?}): {}",
            log.lock().expect("not poisoned")
        );
        kill_process(pid, signal).expect("signal the standby");
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("poll") {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the standby did not stop within 5 s of {name}: {}",
                    log.lock().expect("not poisoned")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Its log is read to the end once it exits.
        reader.join().expect("the log reader ends with the pipe");
        let said = log.lock().expect("not poisoned").clone();
        assert_eq!(status.code(), Some(0), "{name}: {status:?}: {said}");
        assert!(said.contains(&format!("{name}: stopping")), "{said}");
        assert!(said.contains("standby: stopped while waiting to take over; it served nothing"), "{said}");
    }
}

/// A cluster node whose listener is not the address the topology sends clients to is refused
/// at start, naming both addresses and the fix; on that address it serves.
#[test]
fn a_node_not_listening_where_the_topology_sends_clients_is_refused() {
    let Some(s) = OneShard::start("kv_ops_listen") else { return };
    let other = common::kv_cluster::free_addr();
    let args = s.kv_args("a1", &["--listen", &other]);
    // `refused` gives the configuration itself.
    let args: Vec<&str> = ["kv"].into_iter().chain(args.iter().skip(3).map(String::as_str)).collect();
    let says = [
        format!("gives node a1 the address {} (kv_addr", s.a1_kv),
        format!("this server listens on {other} (--listen or [kv] listen)"),
        format!("listen on {}", s.a1_kv),
    ];
    let says: Vec<&str> = says.iter().map(String::as_str).collect();
    refused(&s.c, &args, &says);
    let args = s.kv_args("a1", &["--listen", &s.a1_kv]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kv = ChildNode::spawn(common::exe(), &args).expect("mojim kv --cluster starts on its address");
    assert_eq!(kv.addr(), s.a1_kv);
}
