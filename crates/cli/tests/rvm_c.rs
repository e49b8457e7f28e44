//! Recoverable memory from C (`rvm_*` in include/mojim.h): programs built with the system's
//! `cc` against the libmojim this build made, run as processes on a region whose mirror runs
//! in a child process, and killed with SIGKILL.
//!
//! - tests/c/rvm_atomic.c changes an array at random places and commits it with its checksum
//!   and a commit counter; killed at random moments again and again, each new run finds
//!   exactly the state of one commit (checksum and replay agree), never before the last one
//!   that returned, and the counter never goes back. Once with tracking "auto" (userfaultfd
//!   where the kernel has it), once with the forced fallback, tracking "mprotect".
//! - tests/c/rvm_structs.c builds a linked list and a tree, commits, changes more, and is
//!   killed: the next run finds the committed structures at the same addresses from
//!   rvm_get_usr_data, frees and reallocates, and is killed again.
//! - tests/c/rvm_bad_input.c passes bad input: each is refused with its code and a message
//!   naming the bad value, and changes nothing; a region of the wrong size is refused.
//! - examples/c/rvm_counter.c (docs/RVM.md) counts on across a SIGKILL.
//! - On the Redis backend (a real `redis-server` of the test's), rvm_atomic is killed at
//!   random moments too, and memory stored with another `redis_capacity` is refused.

mod common;

use common::c::{cc_shared, have, repo};
use common::edit_rvm;
use common::{seed, Cluster, Rng, TempDir, WAIT};
use mojim::config::{write_private, ConfigFile};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// A running C program whose stdout lines arrive on a channel.
struct Run {
    child: Child,
    lines: Receiver<String>,
}

impl Run {
    fn start(exe: &Path, args: &[&str]) -> Run {
        let mut child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            // A line cut short by the kill has no newline: it is not one the program printed.
            for line in BufReader::new(out).split(b'\n') {
                let Ok(line) = line else { break };
                if tx.send(String::from_utf8(line).expect("utf-8 output")).is_err() {
                    break;
                }
            }
        });
        Run { child, lines }
    }

    /// The next line, which must come within `WAIT`.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no line from the program within {WAIT:?}: {e}"))
    }

    /// The next line, which must start with `prefix`.
    fn expect(&self, prefix: &str) -> String {
        let l = self.line();
        assert!(l.starts_with(prefix), "expected a line {prefix}..., the program printed {l:?}");
        l
    }

    /// SIGKILLs the program and returns the lines it printed that were not read yet.
    fn kill(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap the program");
        let lines: Vec<String> = self.lines.iter().collect();
        assert!(
            status.code().is_none(),
            "the program ended by itself ({status}) before it was killed; it printed {lines:?}"
        );
        lines
    }

    /// Waits for the program to end by itself, successfully, and returns its unread lines.
    fn finish(mut self) -> Vec<String> {
        let status = self.child.wait().expect("reap the program");
        let lines: Vec<String> = self.lines.iter().collect();
        assert!(status.success(), "the program failed ({status}); it printed {lines:?}");
        lines
    }
}

impl Drop for Run {
    /// A test that fails mid-run leaves no program behind (one may be waiting to be killed).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` words of a line.
fn fields(line: &str) -> HashMap<&str, &str> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).collect()
}

fn field_u64(line: &str, key: &str) -> u64 {
    fields(line)
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key}= in {line:?}"))
}

/// A cluster of a region of `size` bytes, its mirror running, the configuration's primary
/// aimed at it, and `edit` applied.
fn cluster(test: &str, size: u64, edit: impl FnOnce(&mut ConfigFile)) -> Cluster {
    let mut c = Cluster::new(test, size, edit);
    c.start_mirror();
    c.cfg.file.primary.mirror = c.mirror_addr();
    write_private(&c.cfg_path, &toml::to_string(&c.cfg.file).expect("serialise")).expect("write mojim.toml");
    c
}

fn cfg_arg(c: &Cluster) -> &str {
    c.cfg_path.to_str().expect("utf-8 path")
}

/// Compiles a program of tests/c.
fn build(dir: &TempDir, name: &str) -> PathBuf {
    cc_shared(dir.path(), &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(name))
}

/// What the atomicity rounds saw.
#[derive(Debug, Default)]
struct Seen {
    /// The highest commit counter seen: acknowledged by a "commit K" line, or recovered.
    known: u64,
    /// Whether any run committed (its "fresh" line, or any later one).
    committed: bool,
    /// Runs that recovered one commit past the last acknowledged one (in flight at the kill).
    in_flight: usize,
    /// Runs killed before they printed their first line (recovery not done).
    early: usize,
    commits: u64,
}

/// Checks the lines of one run of rvm_atomic against what earlier runs showed, and returns the
/// tracking method its status line named.
fn check_atomic_run(round: usize, lines: &[String], seen: &mut Seen) -> Option<String> {
    let Some(first) = lines.first() else {
        seen.early += 1;
        return None;
    };
    let mut k = if first.starts_with("fresh ") {
        assert!(!seen.committed, "round {round}: a fresh start after commits were made: {first}");
        0
    } else {
        assert!(first.starts_with("recovered "), "round {round}: {first}");
        let f = fields(first);
        assert_eq!(
            (f.get("sum"), f.get("replay")),
            (Some(&"ok"), Some(&"ok")),
            "round {round}: the recovered state is no committed state: {first}"
        );
        let k = field_u64(first, "commits");
        assert!(
            k == seen.known || (k == seen.known + 1 && seen.committed),
            "round {round}: recovered commit {k}, but commit {} was the last seen (acknowledged or \
             recovered): {first}",
            seen.known
        );
        if k > seen.known {
            seen.in_flight += 1;
        }
        k
    };
    seen.committed = true;
    seen.known = seen.known.max(k);
    for l in &lines[1..] {
        let n: u64 = l
            .strip_prefix("commit ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("round {round}: the program printed {l:?}"));
        assert_eq!(n, k + 1, "round {round}: commit {n} after commit {k}: the counter must go up by one");
        k = n;
        seen.commits += 1;
    }
    seen.known = k;
    fields(first).get("tracking").map(|t| t.to_string())
}

/// Starts rvm_atomic `rounds` times and kills each run: one in four at a random moment from
/// its start (before or during its recovery, or later), the others once they have printed a
/// random number of commits, a random fraction of a millisecond into the next. Then lets one
/// run finish; returns the tracking methods the runs reported.
fn kill_at_random(test: &str, c: &Cluster, exe: &Path, rounds: usize) -> Vec<String> {
    let mut rng = Rng::new(seed(test));
    let mut seen = Seen::default();
    let mut tracking = Vec::new();
    let mut waited = 0;
    for round in 0..rounds {
        let run = Run::start(exe, &[cfg_arg(c)]);
        let mut lines = Vec::new();
        if round % 4 == 0 {
            std::thread::sleep(Duration::from_millis(rng.range(0, 30)));
        } else {
            let commits = rng.range(0, 60);
            waited += commits;
            for _ in 0..=commits {
                lines.push(run.line());
            }
            std::thread::sleep(Duration::from_micros(rng.range(0, 1000)));
        }
        lines.extend(run.kill());
        tracking.extend(check_atomic_run(round, &lines, &mut seen));
    }
    println!("{test}: {rounds} runs killed: {seen:?}");
    assert!(seen.commits >= waited, "{seen:?}");
    // A run to the end: it finds the last state, commits 20 more, and the next run finds those.
    let lines = Run::start(exe, &[cfg_arg(c), "20"]).finish();
    tracking.extend(check_atomic_run(rounds, &lines[..lines.len() - 1], &mut seen));
    assert_eq!(lines.last().map(String::as_str), Some(format!("done commits={}", seen.known).as_str()));
    let lines = Run::start(exe, &[cfg_arg(c), "0"]).finish();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(field_u64(&lines[0], "commits"), seen.known, "{lines:?}");
    check_atomic_run(rounds + 1, &lines[..1], &mut seen);
    tracking
}

#[test]
fn commits_are_atomic_when_the_program_is_killed_at_random_moments() {
    if !have("cc", "gcc") {
        return;
    }
    let c = cluster("rvm-c-atomic", 4 << 20, |_| {});
    let dir = TempDir::new("rvm-c-atomic-build");
    let exe = build(&dir, "rvm_atomic.c");
    let tracking = kill_at_random("rvm_c_atomic", &c, &exe, 25);
    // "auto": userfaultfd where the kernel offers it, else the fallback (status says why).
    assert!(tracking.iter().all(|t| t == "uffd-async" || t == "mprotect"), "{tracking:?}");
    println!("tracking: {:?}", tracking.first());
}

#[test]
fn the_forced_mprotect_fallback_keeps_commits_atomic_and_says_so() {
    if !have("cc", "gcc") {
        return;
    }
    let c = cluster("rvm-c-mprotect", 4 << 20, |f| edit_rvm(f, |r| r.tracking = "mprotect".into()));
    let dir = TempDir::new("rvm-c-mprotect-build");
    let exe = build(&dir, "rvm_atomic.c");
    let tracking = kill_at_random("rvm_c_mprotect", &c, &exe, 10);
    assert!(!tracking.is_empty());
    assert!(tracking.iter().all(|t| t == "mprotect"), "status reported {tracking:?}, not mprotect");
    // Asked for by name, it is no fallback from userfaultfd: fell_back=0.
    let lines = Run::start(&exe, &[cfg_arg(&c), "1"]).finish();
    let f = fields(&lines[0]);
    assert_eq!((f.get("tracking"), f.get("fell_back")), (Some(&"mprotect"), Some(&"0")), "{lines:?}");
    assert_eq!((f.get("backend"), f.get("capacity")), (Some(&"mojim"), Some(&"4194304")), "{lines:?}");
}

/// The digest fields of a rvm_structs line, without its first word.
fn digest(line: &str) -> String {
    line.split_once(' ').map(|(_, d)| d.to_string()).unwrap_or_default()
}

fn assert_whole(line: &str) {
    let f = fields(line);
    assert_eq!((f.get("sorted"), f.get("names")), (Some(&"1"), Some(&"1")), "a damaged structure: {line}");
}

#[test]
fn a_list_and_a_tree_built_in_c_come_back_at_the_same_addresses_after_kill_9() {
    if !have("cc", "gcc") {
        return;
    }
    let c = cluster("rvm-c-structs", 16 << 20, |_| {});
    let dir = TempDir::new("rvm-c-structs-build");
    let exe = build(&dir, "rvm_structs.c");

    let run = Run::start(&exe, &[cfg_arg(&c), "build", "400"]);
    let built = run.expect("committed ");
    let dirty = run.expect("dirty ");
    run.kill();
    assert_whole(&built);
    assert_eq!(field_u64(&built, "list_len"), 400);
    assert_ne!(digest(&built), digest(&dirty), "the uncommitted changes changed nothing");

    let run = Run::start(&exe, &[cfg_arg(&c), "grow", "200"]);
    let recovered = run.expect("recovered ");
    assert_eq!(digest(&recovered), digest(&built), "not the committed list and tree, at the same addresses");
    let grown = run.expect("committed ");
    run.expect("dirty ");
    run.kill();
    assert_whole(&grown);
    assert_eq!(field_u64(&grown, "list_len"), 200 + 200, "every other node freed, 200 added");
    assert_eq!(fields(&grown).get("root"), fields(&built).get("root"), "the root moved");

    let lines = Run::start(&exe, &[cfg_arg(&c), "check"]).finish();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(digest(&lines[0]), digest(&grown), "not the second commit's list and tree");
    println!("built: {built}\ngrown: {grown}");
}

/// The lines rvm_bad_input printed, by case: (code name, message).
fn cases(out: &[String]) -> HashMap<String, (String, String)> {
    out.iter()
        .filter_map(|l| {
            let mut w = l.splitn(3, ' ');
            Some((w.next()?.to_string(), (w.next()?.to_string(), w.next().unwrap_or("").to_string())))
        })
        .collect()
}

#[test]
fn bad_input_from_c_gets_its_code_and_a_message_and_changes_nothing() {
    if !have("cc", "gcc") {
        return;
    }
    const BASE: &str = "0x610000000000";
    let c = cluster("rvm-c-bad", 4 << 20, |f| edit_rvm(f, |r| r.base = BASE.into()));
    let dir = TempDir::new("rvm-c-bad-build");
    let exe = build(&dir, "rvm_bad_input.c");
    let lines = Run::start(&exe, &[cfg_arg(&c), BASE]).finish();
    let text = lines.join("\n");
    println!("{text}");
    let got = cases(&lines);
    let expect = |case: &str, code: &str, needles: &[&str]| {
        let (c, msg) =
            got.get(case).unwrap_or_else(|| panic!("rvm_bad_input printed no case {case}:\n{text}"));
        assert_eq!(c, code, "case {case}: {msg}");
        for n in needles {
            assert!(msg.contains(n), "case {case}: the message {msg:?} does not say {n:?}");
        }
    };
    // The pointer a case passed, as C's %p prints it.
    let ptr = |case: &str| -> String {
        let prefix = format!("ptr {case} ");
        lines.iter().find_map(|l| l.strip_prefix(&prefix)).expect("the case's ptr line").to_string()
    };
    let fact = |key: &str| {
        let l =
            lines.iter().find(|l| l.starts_with(&format!("{key} "))).unwrap_or_else(|| panic!("no {key}"));
        assert_eq!(l, &format!("{key} OK"), "{text}");
    };

    expect("create-null-path", "MOJIM_EINVAL", &["config_path is NULL"]);
    expect("create-missing-config", "MOJIM_ECONFIG", &["/nonexistent/rvm-c-test.toml", "No such file"]);
    expect("create-options-size-unset", "MOJIM_EINVAL", &["options size is 0", "sizeof(rvm_options_t)"]);
    expect("create-options-unknown-flags", "MOJIM_EINVAL", &["unknown flag bits 0x6", "RVM_INSECURE"]);
    expect("create-options-bad-tracking", "MOJIM_EINVAL", &["opts->tracking is 9", "RVM_TRACKING_MPROTECT"]);
    expect("create-address-taken", "MOJIM_EADDRINUSE", &[BASE, "[rvm] base"]);
    expect("create", "MOJIM_OK", &[]);
    fact("create-at-base");
    expect("create-twice", "MOJIM_ESTATE", &["is open in this process already", "rvm_cfg_destroy it first"]);
    for case in ["alloc", "set-usr-data", "txn-start", "commit"] {
        expect(case, "MOJIM_OK", &[]);
    }
    expect("alloc-null-handle", "MOJIM_EINVAL", &["the handle is NULL"]);
    let too_large =
        lines.iter().find_map(|l| l.strip_prefix("size alloc-too-large ")).expect("the size line");
    expect(
        "alloc-too-large",
        "MOJIM_ENOSPC",
        &[&format!("cannot allocate {too_large} bytes"), "larger region"],
    );
    fact("alloc-too-large-changes-nothing");
    expect(
        "alloc-full",
        "MOJIM_ENOSPC",
        &["cannot allocate 262144 bytes", "of 4194304 bytes", "free blocks"],
    );
    expect("alloc-full-again", "MOJIM_ENOSPC", &["cannot allocate 262144 bytes"]);
    fact("alloc-full-changes-nothing");
    expect("free-filler", "MOJIM_OK", &[]);
    expect("alloc-after-free", "MOJIM_OK", &[]);
    fact("alloc-after-free-reuses");
    for case in ["free-stack", "free-malloc", "free-inside", "free-large-twice"] {
        expect(
            case,
            "MOJIM_EFOREIGN",
            &[
                &format!("rvm_free: {} is not a block rvm_alloc returned", ptr(case)),
                &format!("recoverable memory is {BASE}..0x610000400000"),
                "nothing was freed",
                "pass a pointer rvm_alloc returned",
            ],
        );
    }
    expect("free-large", "MOJIM_OK", &[]);
    expect("free-null-ptr", "MOJIM_OK", &[]);
    expect("free-null-handle", "MOJIM_EINVAL", &["the handle is NULL"]);
    expect(
        "set-usr-data-foreign",
        "MOJIM_EFOREIGN",
        &[
            &format!("rvm_set_usr_data: {} is outside recoverable memory", ptr("set-usr-data-foreign")),
            "the root is unchanged",
        ],
    );
    fact("set-usr-data-foreign-changes-nothing");
    for case in ["set-usr-data-null-handle", "get-usr-data-null-handle", "txn-start-null-handle"] {
        expect(case, "MOJIM_EINVAL", &["the handle is NULL"]);
    }
    expect("commit-null-handle", "MOJIM_EINVAL", &["the handle is NULL"]);
    expect("status-null-out", "MOJIM_EINVAL", &["out is NULL: pass a rvm_status_t"]);
    expect("status-size-unset", "MOJIM_EINVAL", &["status size is 0: set out->size = sizeof(rvm_status_t)"]);
    expect("status-null-handle", "MOJIM_EINVAL", &["the handle is NULL"]);
    expect("commit-forged-handle", "MOJIM_EINVAL", &["is not a handle rvm_cfg_create returned"]);
    expect("destroy-null", "MOJIM_EINVAL", &["the handle is NULL"]);
    for case in ["commit-after", "destroy", "recreate", "destroy-after-threads", "destroy-last"] {
        expect(case, "MOJIM_OK", &[]);
    }
    fact("intact");
    assert_eq!(lines.iter().find(|l| l.starts_with("threads ")).map(String::as_str), Some("threads OK"));
    fact("threads-recovered");
}

/// A key `[rvm]` does not have, or a value of the wrong type: `rvm_cfg_create` refuses it with
/// `MOJIM_ECONFIG`, naming the file, `[rvm]` and the key (the library keeps `[rvm]` as written;
/// mojim-rvm reads it).
#[test]
fn a_key_rvm_does_not_know_is_refused_with_econfig_naming_it() {
    if !have("cc", "gcc") {
        return;
    }
    let dir = TempDir::new("rvm-c-unknown-key-build");
    let exe = build(&dir, "rvm_bad_input.c");
    for (test, key, value, named) in [
        ("rvm-c-unknown-key", "tracking_mode", "uffd", "unknown field `tracking_mode`"),
        ("rvm-c-bad-type", "redis_tls", "yes", "invalid type: string \"yes\""),
    ] {
        let c = Cluster::new(test, 1 << 20, |f| {
            f.rvm.insert(key.into(), toml::Value::String(value.into()));
        });
        let lines = Run::start(&exe, &[cfg_arg(&c), "open"]).finish();
        let (code, msg) = cases(&lines).remove("open").expect("the open line");
        assert_eq!(code, "MOJIM_ECONFIG", "{msg}");
        let want = format!("{}: [rvm] {key}: {named}", cfg_arg(&c));
        assert!(msg.contains(&want), "{msg:?} does not say {want:?}");
    }
}

#[test]
fn recoverable_memory_in_a_region_of_another_size_is_refused_and_left_alone() {
    if !have("cc", "gcc") {
        return;
    }
    let dir = TempDir::new("rvm-c-size-build");
    let exe = build(&dir, "rvm_bad_input.c");
    // Recoverable memory made in a region of 4 MiB...
    let small = cluster("rvm-c-size-4", 4 << 20, |_| {});
    let lines = Run::start(&exe, &[cfg_arg(&small), "open"]).finish();
    assert_eq!(lines, ["open MOJIM_OK -"]);
    // ...copied into one of 8 MiB (a copy made with the wrong [region] size).
    let large = cluster("rvm-c-size-8", 8 << 20, |_| {});
    let region =
        |c: &Cluster| mojim_region::RegionFile::open(&c.cfg.resolve(&c.cfg.file.region.path)).expect("open");
    let mut meta = vec![0u8; 64 << 10];
    region(&small).read(0, &mut meta);
    region(&large).write(0, &meta);
    let lines = Run::start(&exe, &[cfg_arg(&large), "open"]).finish();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let (code, msg) = cases(&lines).remove("open").expect("the open line");
    assert_eq!(code, "MOJIM_ELAYOUT", "{msg}");
    for n in ["created in 4194304 bytes", "now holds 8388608", "recover it with a store of 4194304 bytes"] {
        assert!(msg.contains(n), "the message {msg:?} does not say {n:?}");
    }
    let mut now = vec![0u8; 64 << 10];
    region(&large).read(0, &mut now);
    assert!(now == meta, "the refused recovery changed the region");
    // The memory recovers in its own region.
    let lines = Run::start(&exe, &[cfg_arg(&small), "open"]).finish();
    assert_eq!(lines, ["open MOJIM_OK -"]);
}

#[test]
fn the_readme_counter_counts_on_after_kill_9() {
    if !have("cc", "gcc") {
        return;
    }
    let c = cluster("rvm-c-counter", 1 << 20, |_| {});
    let dir = TempDir::new("rvm-c-counter-build");
    let exe = cc_shared(dir.path(), &repo().join("examples/c/rvm_counter.c"));
    let number = |l: String| -> u64 { l.parse().unwrap_or_else(|_| panic!("rvm_counter printed {l:?}")) };
    let mut last = None;
    for round in 0..3 {
        let run = Run::start(&exe, &[cfg_arg(&c)]);
        let first = number(run.line());
        match last {
            None => assert_eq!(first, 0, "a fresh counter starts at 0"),
            // Killed between a commit and its printf, a run leaves one more than it printed.
            Some(l) => assert!(first == l || first == l + 1, "round {round}: {first} after {l}"),
        }
        let mut n = first;
        for _ in 0..20 {
            let next = number(run.line());
            assert_eq!(next, n + 1, "round {round}");
            n = next;
        }
        for l in run.kill() {
            n = number(l);
        }
        last = Some(n);
    }
}

/// A `redis-server` of the test's, without persistence, on a port of its own; killed when
/// dropped.
struct Redis {
    child: Child,
    addr: String,
}

impl Redis {
    fn start(dir: &Path) -> Redis {
        // Another process may take the port between choosing and binding it: choose again.
        for _ in 0..5 {
            let port =
                TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start redis-server ({e}): the Redis backend's tests need a real one; install \
                         the Debian package redis-server (./scripts/test does)"
                    )
                });
            let mut r = Redis { child, addr: format!("127.0.0.1:{port}") };
            if r.wait_for_pong() {
                return r;
            }
        }
        panic!("redis-server did not start on any of 5 ports");
    }

    /// Waits until the server answers PING (a start-up wait, not a timed test); false if it
    /// exited (its port was taken).
    fn wait_for_pong(&mut self) -> bool {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < WAIT {
            if self.child.try_wait().expect("poll redis-server").is_some() {
                return false;
            }
            if let Ok(mut c) = TcpStream::connect(&self.addr) {
                let mut pong = [0u8; 7];
                if c.write_all(b"PING\r\n").is_ok()
                    && c.read_exact(&mut pong).is_ok()
                    && &pong == b"+PONG\r\n"
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server at {} did not answer PING within {WAIT:?}", self.addr);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn on_the_redis_backend_commits_are_atomic_and_another_capacity_is_refused() {
    if !have("cc", "gcc") {
        return;
    }
    let dir = TempDir::new("rvm-c-redis");
    let redis = Redis::start(dir.path());
    let c = Cluster::new("rvm-c-redis-cfg", 1 << 20, |f| {
        edit_rvm(f, |r| {
            r.backend = "redis".into();
            r.redis = redis.addr.clone();
            r.redis_key = "rvm-c".into();
            r.redis_capacity = "4MiB".into();
        });
    });
    let atomic = build(&dir, "rvm_atomic.c");
    let tracking = kill_at_random("rvm_c_redis", &c, &atomic, 8);
    assert!(!tracking.is_empty());
    let lines = Run::start(&atomic, &[cfg_arg(&c), "0"]).finish();
    let f = fields(&lines[0]);
    assert_eq!((f.get("backend"), f.get("capacity")), (Some(&"redis"), Some(&"4194304")), "{lines:?}");

    // The same key read as memory of 8 MiB: refused, naming both sizes.
    let mut other = c.cfg.file.clone();
    edit_rvm(&mut other, |r| r.redis_capacity = "8MiB".into());
    let other_path = dir.path().join("other.toml");
    write_private(&other_path, &toml::to_string(&other).expect("serialise")).expect("write other.toml");
    let bad = build(&dir, "rvm_bad_input.c");
    let lines = Run::start(&bad, &[other_path.to_str().expect("utf-8"), "open"]).finish();
    let (code, msg) = cases(&lines).remove("open").expect("the open line");
    assert_eq!(code, "MOJIM_ELAYOUT", "{msg}");
    assert!(msg.contains("created in 4194304 bytes") && msg.contains("8388608"), "{msg}");
    // Left alone: it recovers at its own size.
    let lines = Run::start(&atomic, &[cfg_arg(&c), "0"]).finish();
    assert!(lines[0].starts_with("recovered ") && lines[0].contains("sum=ok replay=ok"), "{lines:?}");
}
