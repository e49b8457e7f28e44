//! Opening a node: the logs of the lanes a primary is expected to open are made then, before
//! any handshake, and a lane beyond them still gets its log at its first handshake.

use crate::test_peer::{join, node_options, region, Scratch};
use crate::Mirror;
use mojim_transport::MemTransport;
use std::path::Path;
use std::time::{Duration, Instant};

#[test]
fn the_logs_of_the_expected_lanes_are_made_when_the_node_opens() {
    let scratch = Scratch::new("logs-at-start");
    let id = region(1 << 20);
    let mut opts = node_options(&scratch.dir, "node", id, 1 << 20);
    opts.logs_at_start = 2;
    let m = Mirror::open(opts.clone()).expect("open the node");
    for lane in 0..2 {
        assert!(opts.log_path(lane).exists(), "lane {lane}'s log is made when the node opens");
        assert!(m.shared.lanes.log(lane).is_some(), "and lane {lane} has it");
    }
    assert!(!opts.log_path(2).exists(), "a lane beyond them waits for its first handshake");

    let net = MemTransport::new();
    let node = m.serve_with(net.clone()).expect("serve the node");
    let lanes: Vec<_> = (0..3).map(|lane| join(&net, node.addr(), id, 0x5e55, lane, 3)).collect();
    assert!(opts.log_path(2).exists(), "lane 2's log is made at its first handshake");
    drop(lanes);
    node.shutdown();

    // Reopened: the logs made earlier are opened again, whatever logs_at_start says now.
    opts.logs_at_start = 0;
    let m = Mirror::open(opts.clone()).expect("reopen the node");
    assert!((0..3).all(|lane| m.shared.lanes.log(lane).is_some()));
}

/// Bytes of this process's mapping of `path` that have page-table entries (its `Rss` in smaps).
fn mapped_bytes(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let name = path.to_str().expect("a UTF-8 path");
    let mut lines = smaps.lines().skip_while(|l| !l.ends_with(name));
    assert!(lines.next().is_some(), "{name} is not mapped");
    let rss = lines.find(|l| l.starts_with("Rss:")).expect("an Rss line");
    let kb: u64 = rss.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("Rss in kB");
    kb * 1024
}

/// A node maps few of its files' pages when it opens, brand-new or again: only those its header
/// checks and recovery read (mapping every zeroed page of a brand-new 1 GiB data area took
/// seconds, and held up serving). Once it serves, a thread of its own maps them all.
#[test]
fn a_node_opens_without_mapping_its_files_pages_and_maps_them_once_serving() {
    let scratch = Scratch::new("lazy-pages");
    let (size, log) = (64 << 20, 16 << 20);
    let mut opts = node_options(&scratch.dir, "node", region(size), log);
    opts.logs_at_start = 2;
    let files = [(opts.data_path(), size), (opts.log_path(0), log), (opts.log_path(1), log)];
    for start in ["brand-new", "again"] {
        let m = Mirror::open(opts.clone()).expect("open the node");
        for (path, len) in &files {
            // A quarter: room for the kernel's fault-around and huge pages.
            let n = mapped_bytes(path);
            assert!(n <= len / 4, "{start}: {n} bytes of {} mapped at open", path.display());
        }
        let node = m.serve_with(MemTransport::new()).expect("serve the node");
        let deadline = Instant::now() + Duration::from_secs(60);
        for (path, len) in &files {
            let whole = 4096 + len;
            while mapped_bytes(path) < whole {
                let n = mapped_bytes(path);
                assert!(
                    Instant::now() < deadline,
                    "{start}: {n} of {whole} bytes of {} mapped",
                    path.display()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        node.shutdown();
    }
}

/// A node named more backups than it feeds ([`crate::MAX_BACKUPS`]) refuses to open, naming the
/// count, the limit and the fix, and makes nothing; as many as it feeds open.
#[test]
fn more_backups_than_a_node_feeds_are_refused_at_open() {
    let scratch = Scratch::new("too-many-backups");
    let id = region(1 << 20);
    let mut opts = node_options(&scratch.dir.join("node"), "node", id, 1 << 20);
    let max = crate::MAX_BACKUPS;
    opts.backups = (0..=max).map(|k| format!("127.0.0.1:{}", 7000 + k)).collect();
    let e = Mirror::open(opts.clone()).err().expect("17 backups are refused").to_string();
    for says in [format!("names {} backups", max + 1), format!("the {max} a node feeds"), "1 fewer".into()] {
        assert!(e.contains(&says), "{says:?} not in {e}");
    }
    assert!(!scratch.dir.join("node").exists(), "the refused node made its folder");
    opts.backups.pop();
    Mirror::open(opts).expect("as many backups as a node feeds");
}

#[test]
fn a_backup_named_twice_is_refused_at_open() {
    let scratch = Scratch::new("backup-twice");
    let id = region(1 << 20);
    let mut opts = node_options(&scratch.dir.join("node"), "node", id, 1 << 20);
    opts.backups = vec!["127.0.0.1:7001".into(), "127.0.0.1:7002".into(), "127.0.0.1:7001".into()];
    let e = Mirror::open(opts).err().expect("a backup named twice is refused").to_string();
    assert!(e.contains("names 127.0.0.1:7001 twice"), "{e}");
    assert!(!scratch.dir.join("node").exists(), "the refused node made its folder");
}

/// A node named as its own backup (its listen address among `backups`) is refused by every way
/// of opening one, not only by `mojim serve`, and makes nothing.
#[test]
fn a_node_named_as_its_own_backup_is_refused_at_open() {
    let scratch = Scratch::new("own-backup");
    let id = region(1 << 20);
    let mut opts = node_options(&scratch.dir.join("node"), "node", id, 1 << 20);
    opts.backups = vec!["127.0.0.1:7001".into(), opts.listen.clone()];
    let e = Mirror::open(opts).err().expect("a node named as its own backup is refused").to_string();
    assert!(e.contains("listens on node:0 and names itself as its own backup"), "{e}");
    assert!(!scratch.dir.join("node").exists(), "the refused node made its folder");
}
