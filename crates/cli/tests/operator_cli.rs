//! The operator's commands as a user runs them: what `mojim cat` promises about the bytes it
//! prints, log output fit for a file (or a log shipper: `MOJIM_LOG_FORMAT=json`), and `mojim
//! serve --check-config`.

mod common;

use common::{raw, wait_applied, Cluster};
use mojim::{Primary, Range};
use mojim_format::handshake::{PeerRole, Request};
use mojim_format::FrameKind;
use mojim_transport::AnyConn;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn cat(c: &Cluster, offset: u64, len: u64) -> std::process::Output {
    Command::new(common::exe())
        .args(["cat", "--config", c.cfg_path.to_str().expect("utf-8 path"), "--addr", &c.mirror_addr()])
        .args(["--offset", &offset.to_string(), "--len", &len.to_string()])
        .output()
        .expect("run mojim cat")
}

/// A `cat` longer than one Reply frame (16 MiB) prints one consistent image while groups keep
/// landing: never bytes of two different states. Every group writes its number at three places
/// 20 MiB apart, so a read that mixed two states shows different numbers.
#[test]
fn a_long_cat_is_one_consistent_image() {
    let size = 48 * MIB;
    let marks = [0, 20 * MIB, 40 * MIB];
    let mut c = Cluster::new("long-cat", size, |f| f.primary.lanes = 1);
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let ranges: Vec<Range> = marks.iter().map(|&m| Range::new(m, 8)).collect();
    let stop = AtomicBool::new(false);
    let mut changing = 0;
    std::thread::scope(|t| {
        t.spawn(|| {
            let mut n = 1u64;
            while !stop.load(Ordering::Relaxed) {
                for &m in &marks {
                    p.write(m, &n.to_le_bytes()).expect("write");
                }
                p.gmsync(&ranges).expect("gmsync");
                n += 1;
            }
        });
        // The writer stops when the reads end, and when an assertion below fails.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        let mut last = 0;
        for read in 0..5 {
            let out = cat(&c, 0, size);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(out.stdout.len() as u64, size);
            let at = |m: u64| {
                u64::from_le_bytes(out.stdout[m as usize..m as usize + 8].try_into().expect("8 bytes"))
            };
            let seen: Vec<u64> = marks.iter().map(|&m| at(m)).collect();
            assert!(seen.iter().all(|&x| x == seen[0]), "read {read} mixed groups: marks {seen:?}");
            changing += usize::from(seen[0] != last);
            last = seen[0];
        }
    });
    assert!(changing >= 3, "the groups did not land while the reads ran ({changing} of 5 saw a new one)");
    // Past the end: refused, naming the read and the region's size.
    let out = cat(&c, 8 * MIB, size);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("region of {size} bytes")), "{err}");
    // Quiet: the whole image, once, equals the primary's.
    wait_applied(&mut c.admin());
    let out = cat(&c, 0, size);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut mine = vec![0u8; size as usize];
    p.read(0, &mut mine).expect("read the primary");
    common::assert_same_image("cat of a quiet mirror", &mine, &out.stdout);
}

/// Starts `mojim serve` with its log piped and `MOJIM_LOG_FORMAT` set to `format` (unset:
/// None), waits until it serves, stops it and returns what it logged.
fn serve_log(c: &Cluster, format: Option<&str>) -> String {
    let mut cmd = Command::new(common::exe());
    cmd.args(["serve", "--config", c.cfg_path.to_str().expect("utf-8 path"), "--listen", "127.0.0.1:0"])
        .env("MOJIM_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(f) = format {
        cmd.env("MOJIM_LOG_FORMAT", f);
    }
    let mut child = cmd.spawn().expect("start mojim serve");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut ready).expect("read stdout");
    assert!(ready.starts_with("serving on "), "{ready}");
    child.kill().expect("kill");
    child.wait().expect("wait");
    let mut log = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut log).expect("read stderr");
    log
}

/// Log lines written to a file or a pipe carry no colour escapes.
#[test]
fn logs_to_a_pipe_are_plain_text() {
    let c = Cluster::new("plain-logs", MIB, |_| {});
    let log = serve_log(&c, None);
    assert!(log.contains("mirror serving"), "{log}");
    assert!(!log.contains('\x1b'), "colour escapes in a piped log: {log:?}");
}

/// `MOJIM_LOG_FORMAT=json`: every log line is one JSON object with the time, the level and the
/// message; a format it does not know is refused, naming the value and the choices.
#[test]
fn json_logs_are_one_object_per_line() {
    let c = Cluster::new("json-logs", MIB, |_| {});
    let log = serve_log(&c, Some("json"));
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let serving = lines.iter().find(|v| v["message"] == "mirror serving").expect("the serving line");
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert!(serving["timestamp"].is_string(), "{serving}");

    let out = Command::new(common::exe())
        .args(["status", "--config", c.cfg_path.to_str().expect("utf-8 path")])
        .env("MOJIM_LOG_FORMAT", "yaml")
        .output()
        .expect("run mojim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("MOJIM_LOG_FORMAT=\"yaml\"") && err.contains("json"), "{err}");
}

/// `mojim serve --check-config` says whether the node would start, and starts nothing: a good
/// configuration is OK (no folder made, no port bound); a bad value, a missing TLS file and a
/// data folder that is a file are each refused naming the setting.
#[test]
fn serve_check_config_checks_and_starts_nothing() {
    let c = Cluster::new("check-config", MIB, |_| {});
    let cfg = c.cfg_path.to_str().expect("utf-8 path");
    let check = |extra: &[&str]| {
        let out = Command::new(common::exe())
            .args(["serve", "--config", cfg, "--check-config"])
            .args(extra)
            .output()
            .expect("run mojim serve --check-config");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let fresh = c.dir.path().join("never-made");
    let (ok, text) = check(&["--dir", fresh.to_str().expect("utf-8"), "--listen", "127.0.0.1:1"]);
    assert!(ok && text.contains("configuration OK"), "{text}");
    assert!(!fresh.exists(), "--check-config made the data folder");
    let (ok, text) = check(&["--listen", "nowhere"]);
    assert!(!ok && text.contains("\"nowhere\"") && text.contains("[mirror] listen"), "{text}");
    let file = c.dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write a file");
    let (ok, text) = check(&["--dir", file.to_str().expect("utf-8")]);
    assert!(!ok && text.contains("[mirror] dir") && text.contains("not a folder"), "{text}");
    // A configuration with TLS on and no certificate files.
    let tls = Cluster::new("check-config-tls", MIB, |f| {
        f.security.tls = true;
        f.security.ca_file = "missing-ca.pem".into();
        f.security.cert_file = "missing-node.pem".into();
        f.security.key_file = "missing-node.key".into();
    });
    let out = Command::new(common::exe())
        .args(["serve", "--config", tls.cfg_path.to_str().expect("utf-8"), "--check-config"])
        .output()
        .expect("run mojim serve --check-config");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("missing-ca.pem"), "{err}");
    // A typo in [kv], which `serve` does not read: warned about, naming the key, and the node
    // would still start.
    let typo = Cluster::new("check-config-kv-typo", MIB, |f| {
        f.kv.insert("max_clinets".into(), 5.into());
    });
    let out = Command::new(common::exe())
        .args(["serve", "--config", typo.cfg_path.to_str().expect("utf-8"), "--check-config"])
        .output()
        .expect("run mojim serve --check-config");
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && all.contains("configuration OK"), "{all}");
    assert!(all.contains("[kv]") && all.contains("max_clinets") && all.contains("WARN"), "{all}");
}

/// A node named more backups than it feeds ([`mojim_node::MAX_BACKUPS`]), in `[mirror] backups`
/// or in `--backup` flags, is refused at start and by `--check-config`, naming the count, the
/// limit and the fix; flags naming fewer replace a list that is too long.
#[test]
fn more_backups_than_a_node_feeds_are_refused_at_start() {
    let max = mojim_node::MAX_BACKUPS;
    let many: Vec<String> = (0..=max).map(|k| format!("127.0.0.1:{}", 7100 + k)).collect();
    let c = Cluster::new("too-many-backups", MIB, |f| f.mirror.backups = many.clone());
    let cfg = c.cfg_path.to_str().expect("utf-8 path");
    let refused = |text: &str| {
        for says in
            [format!("names {} backups", max + 1), format!("the {max} a node feeds"), "1 fewer".into()]
        {
            assert!(text.contains(&says), "{says:?} not in {text}");
        }
    };
    let check = |extra: &[&str]| {
        let out = Command::new(common::exe())
            .args(["serve", "--config", cfg, "--check-config"])
            .args(extra)
            .output()
            .expect("run mojim serve --check-config");
        (out.status.success(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (ok, err) = check(&[]);
    assert!(!ok, "--check-config accepted {} backups", max + 1);
    refused(&err);

    let log = c.dir.path().join("serve.log");
    let listen = common::listen_addr(c.dir.path());
    let dir = c.dir.path().join("node");
    let args = ["serve", "--config", cfg, "--listen", &listen, "--dir", dir.to_str().expect("utf-8")];
    let started = mojim_tools::child::ChildNode::spawn_logged(common::exe(), &args, &log);
    assert!(started.is_err(), "a node with {} backups started", max + 1);
    refused(&std::fs::read_to_string(&log).expect("read the node's log"));

    let (ok, _) = check(&["--backup", &many[0]]);
    assert!(ok, "one --backup flag replaces the list");
    let flags: Vec<&str> = many.iter().flat_map(|b| ["--backup", b.as_str()]).collect();
    let (ok, err) = check(&flags);
    assert!(!ok, "--check-config accepted {} --backup flags", max + 1);
    refused(&err);
}

/// `cat` refuses a data area marked inconsistent (here by `mojim resolve --discard`, as a copy
/// into it would), and reads it only when told to, with a warning.
#[test]
fn cat_refuses_an_inconsistent_data_area_unless_told() {
    let mut c = Cluster::new("cat-inconsistent", MIB, |_| {});
    c.start_mirror();
    let cfg = c.cfg_path.to_str().expect("utf-8 path").to_string();
    let out = Command::new(common::exe())
        .args(["resolve", "--config", &cfg, "--discard", &c.mirror_addr()])
        .output()
        .expect("run mojim resolve");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = cat(&c, 0, 64);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "cat of an inconsistent copy succeeded: {err}");
    assert!(err.contains("is inconsistent") && err.contains("--inconsistent"), "{err}");
    assert!(out.stdout.is_empty(), "printed bytes: {:?}", out.stdout);
    let out = Command::new(common::exe())
        .args(["cat", "--config", &cfg, "--addr", &c.mirror_addr(), "--offset", "0", "--len", "64"])
        .arg("--inconsistent")
        .output()
        .expect("run mojim cat");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning") && err.contains("is inconsistent"), "{err}");
    assert_eq!(out.stdout.len(), 64);
}

/// An operator's connection that asks for `len` bytes of the data area and then reads nothing.
fn stuck_reader(c: &Cluster, len: u64) -> AnyConn {
    let hello = raw::hello(PeerRole::Admin, ([0; 16], 0), 0, 0, 0);
    let (mut s, _) = raw::handshake(&c.mirror_addr(), &hello, &c.secret().0);
    let req = Request::Read { offset: 0, len }.encode();
    let header = mojim_transport::frames::frame_header(FrameKind::Request, 0, &req);
    s.write_all(&header).and_then(|_| s.write_all(&req)).expect("send the read request");
    s
}

/// An operator's long read holds the data area against checkpoints, but never the lanes: a
/// peer that asks for the whole region and stops reading (or reads slowly) does not stop the
/// primary's sync points. A lane thread that applied inline used to wait for the data area,
/// and the primary lost its mirror at the heartbeat timeout.
#[test]
fn a_stuck_long_read_does_not_stop_the_lanes() {
    let size = 64 * MIB;
    let mut c = Cluster::new("stuck-read", size, |f| f.primary.lanes = 1);
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    p.write(0, b"first").expect("write");
    p.msync(0, 5).expect("msync before the read");
    let reader = stuck_reader(&c, size);
    // Give the node time to fill the connection's buffers and block in the send.
    std::thread::sleep(Duration::from_millis(300));
    let page = vec![0x5a; 4096];
    for i in 0..300u64 {
        let off = (i * 4096 * 13) % (size - 4096);
        p.write(off, &page).expect("write");
        p.msync(off, 4096).unwrap_or_else(|e| panic!("sync point {i} while an operator read was stuck: {e}"));
    }
    // The read's deadline (5 s, plus 2 s for its 64 MiB at 32 MiB/s) cuts the stuck reader:
    // then the checkpointer applies everything, the reader still connected.
    wait_applied(&mut c.admin());
    drop(reader);
    let mut mine = vec![0u8; size as usize];
    p.read(0, &mut mine).expect("read the primary");
    common::assert_same_image(
        "the mirror after the stuck read",
        &mine,
        &common::mirror_image(&mut c.admin(), size),
    );
}
