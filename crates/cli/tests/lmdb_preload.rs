//! LMDB, unmodified, replicated by libmojim_preload.so.
//!
//! A Python program using the `lmdb` module (crates/tools/assets/lmdb_loader.py, also `mojim bench --lmdb`'s) commits numbered
//! transactions under the interposer and prints each commit once it returned; it is killed with
//! SIGKILL at a random moment. The mirror's copy of the region (read through the admin client,
//! the file cut out with the file table) must pass `mdb_stat` and `mdb_dump` and hold every
//! transaction reported committed: in LMDB's default mode (pwrite + fdatasync, the meta page
//! through an O_DSYNC descriptor) and with writemap (stores into the mapping + msync). After a
//! promotion the same program opens the data on the promoted copy. Bad input ends the program
//! before it runs, with a message.
//!
//! Needs python3 with the lmdb module (Debian python3-lmdb) and mdb_stat/mdb_dump (lmdb-utils);
//! ./scripts/test installs them.

mod common;

use common::preload::{cluster, mirror_copy, preload_lib, save, text, under_preload};
use common::{wait_applied, Cluster, Rng, TempDir};
use mojim::config::write_private;
use mojim_format::files::FileTable;
use mojim_tools::child::ChildNode;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LOADER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/assets/lmdb_loader.py");
const MIB: u64 = 1 << 20;

/// A python3 that can `import lmdb`, and the LMDB tools; `None` (after `skip`) when missing.
fn tools() -> Option<PathBuf> {
    for tool in ["mdb_stat", "mdb_dump"] {
        if Command::new(tool).arg("-V").output().is_err() {
            common::skip(&format!("{tool} is not installed (Debian lmdb-utils)"));
            return None;
        }
    }
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py).args(["-c", "import lmdb"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Some(PathBuf::from(py));
        }
    }
    common::skip("no python3 with the lmdb module (Debian python3-lmdb, or pip install lmdb)");
    None
}

fn data_file(db: &Path) -> String {
    db.join("data.mdb").to_str().expect("utf-8").to_string()
}

/// Runs the loader under the interposer and SIGKILLs it at a random moment after its first
/// commit; returns the last transaction it reported committed.
fn load_and_kill(c: &Cluster, db: &Path, py: &Path, writemap: bool, rng: &mut Rng) -> u64 {
    let mut cmd = under_preload(py, &c.cfg_path, &data_file(db));
    cmd.arg(LOADER).arg(db).args(["--map-size", &(8 * MIB).to_string()]);
    if writemap {
        cmd.arg("--writemap");
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the loader");
    let out = child.stdout.take().expect("stdout");
    let committed: Arc<Mutex<Vec<u64>>> = Arc::default();
    let seen = committed.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("committed ") {
                seen.lock().unwrap().push(n.parse().expect("a transaction number"));
            }
        }
    });
    let t0 = Instant::now();
    while committed.lock().unwrap().is_empty() {
        if let Ok(Some(st)) = child.try_wait() {
            let o = child.wait_with_output().expect("loader output");
            panic!("the loader ended before its first commit ({st}): {}", text(&o));
        }
        assert!(t0.elapsed() < common::WAIT, "no commit within {:?}", common::WAIT);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(rng.range(50, 1500)));
    child.kill().expect("SIGKILL the loader");
    let status = child.wait().expect("reap the loader");
    reader.join().expect("the reader thread");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    assert!(err.is_empty(), "the loader said something on stderr: {err}");
    let v = committed.lock().unwrap().clone();
    assert!(v.windows(2).all(|w| w[1] == w[0] + 1) && v[0] == 0, "commits in order from 0");
    println!("loader killed ({status}) after {} commits", v.len());
    *v.last().expect("at least one commit")
}

/// `mdb_stat` and `mdb_dump` accept the database in `dir`, and every transaction up to `last`
/// is in it.
fn check_database(py: &Path, dir: &Path, last: u64, how: &str) {
    let stat = Command::new("mdb_stat").arg(dir).output().expect("run mdb_stat");
    assert!(stat.status.success(), "{how}: mdb_stat failed: {}", text(&stat));
    let dump = Command::new("mdb_dump").arg(dir).output().expect("run mdb_dump");
    assert!(dump.status.success(), "{how}: mdb_dump failed: {}", text(&dump));
    let check =
        Command::new(py).arg(LOADER).arg("--check").arg(dir).arg((last + 1).to_string()).output().unwrap();
    assert!(check.status.success(), "{how}: not every committed transaction is there: {}", text(&check));
    println!("{how}: {}", String::from_utf8_lossy(&check.stdout).trim());
}

fn killed_at_random(test: &str, writemap: bool) {
    let Some(py) = tools() else { return };
    let mut rng = Rng::new(common::seed(test));
    let (c, db) = cluster(test, 32 * MIB);
    let name = data_file(&db);
    let mut last = load_and_kill(&c, &db, &py, writemap, &mut rng);
    // The interposer restarts on the primary's copy (the table is found, not made), carries on,
    // and is killed again.
    let mut cmd = under_preload(&py, &c.cfg_path, &name);
    let more = cmd.arg(LOADER).arg(&db).args(["--count", "5", "--start", &(last + 1).to_string()]);
    if writemap {
        more.arg("--writemap");
    }
    let o = more.output().expect("run the loader again");
    assert!(o.status.success(), "the second run: {}", text(&o));
    last += 5;

    let copy = mirror_copy(&c, &name);
    let out = TempDir::new(&format!("{test}-copy"));
    std::fs::write(out.path().join("data.mdb"), &copy).expect("write the copy");
    check_database(&py, out.path(), last, "the mirror's copy");
    // And on the primary, under the interposer, the same program sees the same.
    let o = under_preload(&py, &c.cfg_path, &name)
        .arg(LOADER)
        .arg("--check")
        .arg(&db)
        .arg((last + 1).to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "the primary's copy: {}", text(&o));
    assert_eq!(std::fs::metadata(&name).expect("the placeholder").len(), 0, "the file on disk stays empty");
}

#[test]
fn lmdb_killed_at_random_keeps_every_commit_on_the_mirror() {
    killed_at_random("lmdb-pwrite", false);
}

#[test]
fn lmdb_with_writemap_killed_at_random_keeps_every_commit_on_the_mirror() {
    killed_at_random("lmdb-writemap", true);
}

#[test]
fn after_promotion_the_same_program_opens_the_data_on_the_new_primary() {
    let Some(py) = tools() else { return };
    let mut rng = Rng::new(common::seed("lmdb-promote"));
    let mut c = Cluster::new("lmdb-promote", 32 * MIB, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let dir = |n: &str| c.dir.path().join(n).to_str().unwrap().to_string();
    let cfg = c.cfg_path.to_str().unwrap().to_string();
    let backup = ChildNode::spawn(
        common::exe(),
        &["serve", "--config", &cfg, "--listen", "127.0.0.1:0", "--dir", &dir("b")],
    )
    .expect("start the backup");
    let mirror = ChildNode::spawn(
        common::exe(),
        &[
            "serve",
            "--config",
            &cfg,
            "--listen",
            "127.0.0.1:0",
            "--dir",
            &dir("m"),
            "--backup",
            backup.addr(),
        ],
    )
    .expect("start the mirror");
    c.cfg.file.primary.mirror = mirror.addr().to_string();
    save(&c);
    let db = c.dir.path().join("db");
    std::fs::create_dir_all(&db).unwrap();
    let last = load_and_kill(&c, &db, &py, rng.chance(2), &mut rng);

    // The primary's machine is lost: its files with it. The operator promotes the mirror.
    std::fs::remove_dir_all(&db).unwrap();
    let out = Command::new(common::exe())
        .args(["promote", "--config", &cfg, "--addr", mirror.addr(), "--peer", backup.addr()])
        .output()
        .expect("run mojim promote");
    assert!(out.status.success(), "promote: {}", text(&out));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("promote prints json");
    let region_path = reply["region_path"].as_str().expect("region_path").to_string();

    // On the new primary's node: the configuration names the promoted copy and the backup as
    // its mirror; the database's folder exists (the file does not: the interposer makes it).
    let mut file = c.cfg.file.clone();
    file.region.path = region_path;
    file.primary.mirror = backup.addr().to_string();
    let cfg2 = c.dir.path().join("promoted.toml");
    write_private(&cfg2, &toml::to_string(&file).unwrap()).unwrap();
    std::fs::create_dir_all(&db).unwrap();
    let name = data_file(&db);
    let o = under_preload(&py, &cfg2, &name)
        .arg(LOADER)
        .arg("--check")
        .arg(&db)
        .arg((last + 1).to_string())
        .output();
    let o = o.expect("run the reader");
    assert!(o.status.success(), "the reader on the promoted copy: {}", text(&o));
    let o = under_preload(Path::new("mdb_stat"), &cfg2, &name).arg(&db).output().expect("run mdb_stat");
    assert!(o.status.success(), "mdb_stat on the promoted copy: {}", text(&o));
    // A commit may have returned without being reported before the kill: at least as many.
    let entries: u64 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Entries: ").map(|n| n.parse().expect("a count")))
        .unwrap_or_else(|| panic!("mdb_stat gives no entry count: {}", text(&o)));
    assert!(entries > last, "{entries} entries, {} committed: {}", last + 1, text(&o));
    // And it writes there, replicated to the backup, now its mirror.
    let o = under_preload(&py, &cfg2, &name)
        .arg(LOADER)
        .arg(&db)
        .args(["--count", "3", "--start", &(last + 1).to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "the loader on the promoted copy: {}", text(&o));
    drop(mirror);
    drop(backup);
}

/// Runs `python3 -c print('main ran')` under the interposer and returns its output: bad input
/// must stop it before `main`.
fn run_python(py: &Path, env: &[(&str, Option<&str>)]) -> Output {
    let mut cmd = Command::new(py);
    cmd.args(["-c", "print('main ran')"]).env("LD_PRELOAD", preload_lib());
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    cmd.output().expect("run python3")
}

fn assert_refused(o: &Output, says: &[&str]) {
    assert_eq!(o.status.code(), Some(1), "{}", text(o));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("main ran"), "the program ran: {}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    for s in says {
        assert!(err.contains(s), "the message should say {s:?}: {}", text(o));
    }
}

#[test]
fn bad_configuration_and_file_lists_stop_the_program_before_it_runs() {
    let Some(py) = tools() else { return };
    let (mut c, db) = cluster("lmdb-bad-input", 8 * MIB);
    let cfg = c.cfg_path.to_str().unwrap().to_string();
    let name = data_file(&db);
    let files = Some(name.as_str());

    let o = run_python(&py, &[("MOJIM_CONFIG", None), ("MOJIM_FILES", files)]);
    assert_refused(&o, &["mojim-preload:", "MOJIM_CONFIG is not set"]);
    let o = run_python(&py, &[("MOJIM_CONFIG", Some("/nonexistent/mojim.toml")), ("MOJIM_FILES", files)]);
    assert_refused(&o, &["MOJIM_CONFIG=/nonexistent/mojim.toml", "cannot read"]);
    let garbage = c.dir.path().join("garbage.toml");
    std::fs::write(&garbage, "[region\nsize = ").unwrap();
    let o = run_python(&py, &[("MOJIM_CONFIG", garbage.to_str()), ("MOJIM_FILES", files)]);
    assert_refused(&o, &["garbage.toml"]);
    let o = run_python(&py, &[("MOJIM_CONFIG", Some(&cfg)), ("MOJIM_FILES", None)]);
    assert_refused(&o, &["MOJIM_FILES is not set"]);
    let o = run_python(&py, &[("MOJIM_CONFIG", Some(&cfg)), ("MOJIM_FILES", Some("/a::/b"))]);
    assert_refused(&o, &["has an empty entry"]);

    // The first run lays the table out for its list; another list is refused naming both.
    let o = run_python(&py, &[("MOJIM_CONFIG", Some(&cfg)), ("MOJIM_FILES", files)]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("main ran"), "{}", text(&o));
    let other = format!("{name}:/tmp/other");
    let o = run_python(&py, &[("MOJIM_CONFIG", Some(&cfg)), ("MOJIM_FILES", Some(&other))]);
    assert_refused(&o, &[&format!("holds the files {name}"), &format!("MOJIM_FILES lists {other}")]);

    // An unreachable mirror in block mode: refused before main.
    c.kill_mirror();
    c.cfg.file.primary.mirror = "127.0.0.1:1".into();
    c.cfg.file.primary.connect_timeout_ms = 2000;
    save(&c);
    let o = run_python(&py, &[("MOJIM_CONFIG", Some(&cfg)), ("MOJIM_FILES", files)]);
    assert_refused(&o, &["cannot open the region", "mirror 127.0.0.1:1"]);
}

#[test]
fn a_database_larger_than_its_slot_fails_before_any_commit() {
    let Some(py) = tools() else { return };
    // 4 MiB region: one slot of 4 MiB - 4 KiB; LMDB asks for a 16 MiB map.
    let (c, db) = cluster("lmdb-too-big", 4 * MIB);
    for writemap in [false, true] {
        let mut cmd = under_preload(&py, &c.cfg_path, &data_file(&db));
        cmd.arg(LOADER).arg(&db).args(["--map-size", &(16 * MIB).to_string(), "--count", "3"]);
        if writemap {
            cmd.arg("--writemap");
        }
        let o = cmd.output().expect("run the loader");
        assert!(!o.status.success(), "writemap {writemap}: {}", text(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("committed"),
            "a commit was reported: {}",
            text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let call = if writemap { "ftruncate(" } else { "mmap(" };
        for s in [call, "past the file's slot of 4190208 bytes", "[region] size"] {
            assert!(err.contains(s), "writemap {writemap}: the message should say {s:?}: {}", text(&o));
        }
    }
}

#[test]
fn bench_lmdb_reports_every_target() {
    if tools().is_none() {
        return;
    }
    let d = TempDir::new("lmdb-bench");
    let dir = d.path().to_str().unwrap();
    let o = Command::new(common::exe())
        .args(["bench", "--lmdb", "--lmdb-txns", "20", "--json", "--region-size", "64MiB"])
        .args(["--dir", dir, "--disk-dir", dir])
        .output()
        .expect("run mojim bench --lmdb");
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect();
    let targets: Vec<&str> = lines.iter().map(|v| v["target"].as_str().expect("a target")).collect();
    assert_eq!(targets, ["mojim-sync", "ext4-fdatasync", "tmpfs-none"], "{}", text(&o));
    for v in &lines {
        assert_eq!(v["txns"], 20, "{v}");
        for k in ["p50_us", "p99_us", "ops_per_s"] {
            assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {v}");
        }
    }
    // The benchmark removed its folders.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "the benchmark left files behind");
}

/// Ordinary file calls (Python's os and mmap modules: open, write, pwrite, writev, read, pread,
/// lseek, dup, O_APPEND, fstat, stat, ftruncate, truncate, posix_fallocate, fsync, fdatasync,
/// mmap, msync, munmap) behave on a listed file as on a local one, what cannot be honoured fails
/// with its errno and a message, and the mirror ends with the file's last synced contents.
const POSIX: &str = r#"
import errno, mmap, os, sys
p, cap = sys.argv[1], int(sys.argv[2])
fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
assert os.write(fd, b"hello") == 5
assert os.lseek(fd, 0, os.SEEK_CUR) == 5
assert os.pwrite(fd, b"XY", 10) == 2
assert os.fstat(fd).st_size == 12 and os.stat(p).st_size == 12
assert os.pread(fd, 100, 0) == b"hello\0\0\0\0\0XY", os.pread(fd, 100, 0)
assert os.lseek(fd, -2, os.SEEK_END) == 10
assert os.read(fd, 10) == b"XY" and os.read(fd, 10) == b""
d = os.dup(fd)
os.lseek(d, 1, os.SEEK_SET)
assert os.read(fd, 4) == b"ello"
os.close(d)
a = os.open(p, os.O_WRONLY | os.O_APPEND)
assert os.write(a, b"!!") == 2
os.close(a)
assert os.stat(p).st_size == 14
os.ftruncate(fd, 3)
os.ftruncate(fd, 8)
assert os.pread(fd, 100, 0) == b"hel\0\0\0\0\0"
os.lseek(fd, 8, os.SEEK_SET)
assert os.writev(fd, [b"ab", b"cd"]) == 4
os.fsync(fd)
os.truncate(p, 4096)
assert os.fstat(fd).st_size == 4096
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED)
m[0:4] = b"MMAP"
m.flush()
assert os.pread(fd, 12, 0) == b"MMAP\0\0\0\0abcd"
m.close()
for what, call, want in [
    ("MAP_PRIVATE", lambda: mmap.mmap(fd, 4096, mmap.MAP_PRIVATE), errno.ENODEV),
    ("posix_fallocate", lambda: os.posix_fallocate(fd, 0, cap + 1), errno.ENOSPC),
    ("pwrite", lambda: os.pwrite(fd, b"x", cap), errno.EFBIG),
    ("ftruncate", lambda: os.ftruncate(fd, cap + 4096), errno.EFBIG),
]:
    try:
        call()
        sys.exit("%s past the slot succeeded" % what)
    except OSError as e:
        assert e.errno == want, (what, e)
os.posix_fallocate(fd, 0, 5000)
assert os.fstat(fd).st_size == 5000
assert os.pwrite(fd, b"final", 4995) == 5
os.fdatasync(fd)
os.close(fd)
print("ok")
"#;

#[test]
fn file_calls_on_a_listed_file_behave_as_on_a_local_one() {
    let Some(py) = tools() else { return };
    let (c, db) = cluster("lmdb-posix", 8 * MIB);
    let name = data_file(&db);
    let cap = 8 * MIB - 4096;
    let o = under_preload(&py, &c.cfg_path, &name)
        .args(["-c", POSIX, &name, &cap.to_string()])
        .output()
        .expect("run python3");
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok"), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for s in [
        "mmap(fd",
        "MAP_SHARED (ENODEV)",
        "posix_fallocate(fd",
        "(ENOSPC)",
        "pwrite(fd",
        "(EFBIG)",
        "ftruncate(",
    ] {
        assert!(err.contains(s), "the messages should say {s:?}: {}", text(&o));
    }
    let copy = mirror_copy(&c, &name);
    assert_eq!(copy.len(), 5000);
    assert_eq!(&copy[..12], b"MMAP\0\0\0\0abcd");
    assert!(copy[12..4995].iter().all(|&b| b == 0));
    assert_eq!(&copy[4995..], b"final");
    assert_eq!(std::fs::metadata(&name).unwrap().len(), 0, "the file on disk stays empty");
}

const TWO_FILES: &str = r#"
import errno, os, sys
a, b = sys.argv[1], sys.argv[2]
fa = os.open(a, os.O_RDWR | os.O_CREAT, 0o644)
fb = os.open(b, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fa, b"A" * 5000)
os.write(fb, b"B" * 3)
os.fsync(fa)
os.fsync(fb)
pid = os.fork()
if pid == 0:
    try:
        os.write(fa, b"x")
        os._exit(3)
    except OSError as e:
        os._exit(0 if e.errno == errno.EIO else 4)
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0, st
os.write(fb, b"C")
print("ok", flush=True)
"#;

/// Two listed files share the region, each with its own size in the table; a sync point of one
/// sends only its own changes; a child forked after start may not touch them (EIO); a second
/// process under the interposer on the same region is refused while the first runs.
#[test]
fn two_files_a_forked_child_and_a_second_process() {
    let Some(py) = tools() else { return };
    let (c, db) = cluster("lmdb-two-files", 8 * MIB);
    let (a, b) = (db.join("a").to_str().unwrap().to_string(), db.join("b").to_str().unwrap().to_string());
    let files = format!("{a}:{b}");
    let o = under_preload(&py, &c.cfg_path, &files).args(["-c", TWO_FILES, &a, &b]).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("ok"), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a child forked from the process that opened it (EIO)")
    );

    let mut admin = c.admin();
    wait_applied(&mut admin);
    let table = FileTable::decode(&admin.read(0, 4096).unwrap()).expect("the mirror's file table");
    assert_eq!(table.names(), [a.as_str(), b.as_str()]);
    let (ea, eb) = (table.file(&a).unwrap().clone(), table.file(&b).unwrap().clone());
    assert_eq!((ea.size, eb.size), (5000, 3), "the unsynced byte of b is not on the mirror");
    assert_eq!(ea.capacity, eb.capacity);
    assert_eq!(admin.read(ea.slot_offset, 5000).unwrap(), vec![b'A'; 5000]);
    assert_eq!(admin.read(eb.slot_offset, 3).unwrap(), b"BBB");

    // While one process runs under the interposer on the region, another is refused.
    let mut holder = under_preload(&py, &c.cfg_path, &files)
        .args(["-c", "import sys, time; print('up', flush=True); time.sleep(60)"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "up");
    let o = run_python(&py, &[("MOJIM_CONFIG", c.cfg_path.to_str()), ("MOJIM_FILES", Some(&files))]);
    let pid = holder.id();
    holder.kill().unwrap();
    holder.wait().unwrap();
    let says = format!("is open as primary in process {pid}");
    assert_refused(&o, &[&says, "run one program per region under the interposer"]);
}
