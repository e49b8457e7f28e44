//! One primary per region. A second `mojim kv` on a region another one serves is refused at
//! start, with a message that names the region and the holder's pid, and the first keeps every
//! write; a holder killed with SIGKILL leaves the region free for the next.

mod common;

use common::exe;
use common::kv::{bulk, KvCluster};
use mojim_kv::resp::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

/// Starts `mojim kv` on `k`'s region, which must refuse to start: its stderr. (A server that
/// starts after all is killed, and the test fails.)
fn second_server(k: &KvCluster) -> String {
    let mirror = k.c.mirror_addr();
    let mut child = Command::new(exe())
        .args(["kv", "--config", k.c.cfg_path.to_str().expect("utf-8"), "--listen", "127.0.0.1:0"])
        .args(["--mirror", &mirror])
        .env("MOJIM_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mojim kv");
    let mut err = String::new();
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let _ = stderr.read_to_string(&mut err);
        err
    });
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        if line.is_ok_and(|l| l.starts_with("serving on")) {
            child.kill().expect("kill the second server");
            let _ = child.wait();
            panic!("a second mojim kv started on a region another one serves");
        }
    }
    let status = child.wait().expect("wait for mojim kv");
    let err = reader.join().expect("the stderr reader");
    assert!(!status.success(), "mojim kv exited 0 without serving: {err}");
    err
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

#[test]
fn a_second_kv_on_a_region_in_use_is_refused_and_the_first_keeps_every_write() {
    let mut k = KvCluster::new("lock-second-kv", 8 << 20);
    let holder = k.kv.as_ref().expect("the first server").pid();
    let mut first = k.client();
    for i in 0..20 {
        assert_eq!(first.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }

    let err = second_server(&k);
    let region = k.c.cfg.resolve(&k.c.cfg.file.region.path);
    assert!(
        err.contains(&format!("the region {} is open as primary in process {holder}", region.display())),
        "{err}"
    );
    assert!(err.contains("one primary per region"), "{err}");

    // The first server goes on, its session untouched.
    for i in 20..40 {
        assert_eq!(first.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
    for i in 0..40 {
        assert_eq!(bulk(&first.cmd(&["GET", &format!("k{i}")])), Some(format!("v{i}").as_bytes()));
    }

    // Killed with SIGKILL, it leaves the region free: a new server opens it and holds every
    // acknowledged write, each key once.
    k.kill();
    k.start();
    let mut again = k.client();
    for i in 0..40 {
        assert_eq!(bulk(&again.cmd(&["GET", &format!("k{i}")])), Some(format!("v{i}").as_bytes()), "k{i}");
    }
    let Value::Array(keys) = again.cmd(&["KEYS", "*"]) else { panic!("KEYS answers an array") };
    let mut names: Vec<&[u8]> = keys.iter().map(|v| bulk(v).expect("a key")).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!((keys.len(), names.len()), (40, 40), "every key once");
}
