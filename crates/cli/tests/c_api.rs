//! The C API from C: programs built with the system's `cc` against include/mojim.h and the
//! libmojim this build made, run against a mirror in a child process.
//!
//! - examples/c/fig1.c (the paper's Fig. 1, linked against libmojim.so with the flags
//!   `pkg-config --cflags --libs mojim` gives for the mojim.pc scripts/mojim-pc writes) is
//!   killed with SIGKILL at random points, again and again on the same region: on the mirror
//!   the count and the log always agree (the log append is atomic), and no state it printed
//!   (acknowledged) is lost.
//! - tests/c/bad_input.c (linked against libmojim.a) passes bad arguments: clear codes and
//!   messages, and good calls still work after them (`mojim_metrics` counts five sync points);
//!   then four threads sync through one handle and their last values are on the mirror.

mod common;

use common::c::{have, libmojim, repo, run};
use common::{seed, wait_applied, Cluster, Rng, TempDir};
use mojim::config::write_private;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const REGION: u64 = 4 << 20;
const ROUNDS: usize = 5;

/// Writes mojim.pc for the built library into `dir` (with scripts/mojim-pc) and returns what
/// `pkg-config` says for `args` with it.
fn pkg_config(dir: &Path, args: &[&str]) -> Vec<String> {
    let pc = dir.join("mojim.pc");
    if !pc.exists() {
        run(Command::new(repo().join("scripts/mojim-pc")).arg(libmojim()).arg(&pc));
    }
    let out = run(Command::new("pkg-config").env("PKG_CONFIG_PATH", dir).args(args).arg("mojim"));
    String::from_utf8(out.stdout).expect("utf-8").split_whitespace().map(String::from).collect()
}

/// Compiles `source` into `dir` with `cc` (warnings are errors) and the given link flags.
fn cc(dir: &Path, source: &Path, flags: &[String]) -> PathBuf {
    let exe = dir.join(source.file_stem().expect("a file name"));
    run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(source)
        .args(flags));
    exe
}

/// Points the configuration's primary at the running mirror, for a program that reads it.
fn aim_at_mirror(c: &mut Cluster) {
    c.cfg.file.primary.mirror = c.mirror_addr();
    write_private(&c.cfg_path, &toml::to_string(&c.cfg.file).expect("serialise")).expect("write mojim.toml");
}

/// The Fig. 1 state a run printed after a sync point returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct State {
    count: u64,
    log: u64,
}

fn parse(line: &str) -> State {
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("fig1 printed {line:?}, not count=C log=S"))
    };
    State { count: field("count="), log: field("log=") }
}

/// Starts fig1 and collects the states it prints, in a thread, until it ends.
fn start_fig1(
    exe: &Path,
    cfg: &Path,
    iterations: Option<u64>,
) -> (Child, std::thread::JoinHandle<Vec<State>>) {
    let mut cmd = Command::new(exe);
    cmd.arg(cfg);
    if let Some(n) = iterations {
        cmd.arg(n.to_string());
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start fig1");
    let out = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        // A line cut short by the kill is not a state the run printed.
        let mut states = Vec::new();
        for line in BufReader::new(out).split(b'\n') {
            let line = String::from_utf8(line.expect("read fig1's output")).expect("utf-8");
            states.push(parse(&line));
        }
        states
    });
    (child, reader)
}

/// The mirror's Fig. 1 state: its count and log, checked for agreement: entry i holds i + 1
/// and the count is the log's size or one more.
fn mirror_state(c: &Cluster) -> State {
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let head = admin.read(0, 16).expect("read the mirror's count and log size");
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let s = State { count: word(&head[..8]), log: word(&head[8..16]) };
    assert!(s.log <= (REGION - 16) / 8, "the mirror's log size {} is past the region", s.log);
    assert!(
        s.count == s.log || s.count == s.log + 1,
        "on the mirror count={} and log={} disagree: the count is the log's size or one more",
        s.count,
        s.log
    );
    let log = admin.read(16, s.log * 8).expect("read the mirror's log");
    for (i, e) in log.chunks(8).enumerate() {
        assert_eq!(word(e), i as u64 + 1, "the mirror's log entry {i} (of {}) is wrong", s.log);
    }
    s
}

#[test]
fn fig1_in_c_killed_at_random_keeps_count_and_log_consistent_on_the_mirror() {
    if !have("cc", "gcc") || !have("pkg-config", "pkg-config") {
        return;
    }
    let mut rng = Rng::new(seed("c_api_fig1"));
    let mut c = Cluster::new("c-fig1", REGION, |_| {});
    c.start_mirror();
    aim_at_mirror(&mut c);
    let build = TempDir::new("c-fig1-build");
    let flags = pkg_config(build.path(), &["--cflags", "--libs"]);
    let fig1 = cc(build.path(), &repo().join("examples/c/fig1.c"), &flags);

    let mut acked = State::default();
    for round in 0..ROUNDS {
        let (mut child, reader) = start_fig1(&fig1, &c.cfg_path, None);
        let run_for = Duration::from_millis(rng.range(20, 500));
        std::thread::sleep(run_for);
        let _ = child.kill();
        let status = child.wait().expect("reap fig1");
        let states = reader.join().expect("the reader thread");
        assert!(
            status.code().is_none(),
            "round {round}: fig1 ended by itself ({status}) before it was killed; states: {:?}",
            states.last()
        );
        // The states a run acknowledges only grow, and start from the last run's.
        for w in states.windows(2) {
            assert!(w[0] <= w[1], "round {round}: fig1 went back from {:?} to {:?}", w[0], w[1]);
        }
        if let Some(first) = states.first() {
            assert!(*first >= acked, "round {round}: fig1 started at {first:?}, before {acked:?}");
        }
        let last = states.last().copied().unwrap_or(acked);
        let mirror = mirror_state(&c);
        assert!(
            mirror.count >= last.count && mirror.log >= last.log,
            "round {round}: fig1 acknowledged {last:?} but the mirror holds {mirror:?}"
        );
        println!(
            "round {round}: killed after {run_for:?}: {} states, last {last:?}, mirror {mirror:?}",
            states.len()
        );
        acked = last;
    }
    assert!(acked.log > 0, "fig1 appended nothing in {ROUNDS} rounds");

    // A run to the end: its last state is exactly the mirror's.
    let (mut child, reader) = start_fig1(&fig1, &c.cfg_path, Some(50));
    let status = child.wait().expect("reap fig1");
    let states = reader.join().expect("the reader thread");
    assert!(status.success(), "fig1 with 50 iterations failed: {status}");
    let last = *states.last().expect("fig1 printed its states");
    assert!(last.log >= acked.log + 50, "50 iterations after {acked:?} ended at {last:?}");
    assert_eq!(last.count, last.log, "a run that ends finishes its last iteration");
    assert_eq!(mirror_state(&c), last, "the mirror holds another state than fig1's last");
}

/// The lines bad_input.c printed, by case: (code name, message).
fn cases(out: &str) -> std::collections::HashMap<String, (String, String)> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.splitn(3, ' ');
            Some((w.next()?.to_string(), (w.next()?.to_string(), w.next().unwrap_or("").to_string())))
        })
        .collect()
}

#[test]
fn bad_input_through_c_gives_clear_codes_and_messages() {
    if !have("cc", "gcc") || !have("pkg-config", "pkg-config") {
        return;
    }
    let mut c = Cluster::new("c-bad-input", REGION, |_| {});
    c.start_mirror();
    aim_at_mirror(&mut c);
    let build = TempDir::new("c-bad-input-build");
    // Linked against libmojim.a, with what pkg-config says the static library needs.
    let mut flags = pkg_config(build.path(), &["--cflags"]);
    flags.push(libmojim().join("libmojim.a").to_str().expect("utf-8").to_string());
    flags.extend(
        pkg_config(build.path(), &["--static", "--libs-only-l"]).into_iter().filter(|f| f != "-lmojim"),
    );
    let exe = cc(build.path(), &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/bad_input.c"), &flags);
    let out = run(Command::new(&exe).arg(&c.cfg_path));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    println!("{text}");
    let got = cases(&text);
    let expect = |case: &str, code: &str, needles: &[&str]| {
        let (c, msg) = got.get(case).unwrap_or_else(|| panic!("bad_input printed no case {case}:\n{text}"));
        assert_eq!(c, code, "case {case}: {msg}");
        for n in needles {
            assert!(msg.contains(n), "case {case}: the message {msg:?} does not say {n:?}");
        }
    };
    expect(
        "open-missing-config",
        "MOJIM_ECONFIG",
        &["configuration: cannot read /nonexistent/mojim-c-test.toml", "No such file"],
    );
    expect("open-null-path", "MOJIM_EINVAL", &["config_path is NULL"]);
    expect("open-null-out", "MOJIM_EINVAL", &["out is NULL"]);
    expect("open-unknown-flags", "MOJIM_EINVAL", &["unknown flag bits 0x6", "MOJIM_OPEN_INSECURE (0x1)"]);
    expect("open", "MOJIM_OK", &[]);
    let region = c.cfg.resolve(&c.cfg.file.region.path);
    expect(
        "open-twice",
        "MOJIM_ELOCKED",
        &[&format!("the region {} is open as primary in this process already", region.display())],
    );
    for case in ["msync-before-base", "msync-past-end", "msync-far-away", "gmsync-one-outside"] {
        expect(case, "MOJIM_ERANGE", &["pointer range 0x", "is not inside the region mapped at 0x"]);
    }
    expect("msync-null-ptr", "MOJIM_EINVAL", &["ptr is NULL"]);
    expect("msync-null-handle", "MOJIM_EINVAL", &["the handle is NULL"]);
    expect(
        "msync-at-past-end",
        "MOJIM_ERANGE",
        &[&format!("range offset {REGION} len 1 is outside the region")],
    );
    expect("msync-at-overflow", "MOJIM_ERANGE", &["range offset 18446744073709551615 len 2 is outside"]);
    expect("gmsync-null-range-ptr", "MOJIM_EINVAL", &["ranges[1].ptr is NULL"]);
    expect(
        "gmsync-null-ranges",
        "MOJIM_EINVAL",
        &["ranges is NULL: pass the group's array of 1 struct mojim_range"],
    );
    expect("gmsync-too-many", "MOJIM_ERANGE", &["group has 1025 ranges, the limit is 1024"]);
    expect("gmsync-at-outside", "MOJIM_ERANGE", &["is outside the region"]);
    expect("base-null-handle", "MOJIM_EINVAL", &[]);
    expect("size-null-handle", "MOJIM_EINVAL", &[]);
    for case in ["msync", "gmsync", "gmsync-at", "persist", "wait", "persist-at", "wait-at", "status"] {
        expect(case, "MOJIM_OK", &[]);
    }
    expect("persist-null-ticket", "MOJIM_EINVAL", &["ticket is NULL"]);
    expect("wait-forged", "MOJIM_EINVAL", &["was not issued by this handle or was changed"]);
    expect(
        "status-size-unset",
        "MOJIM_EINVAL",
        &["status size is 0: set out->size = sizeof(struct mojim_status)"],
    );
    expect("status-null", "MOJIM_EINVAL", &["out is NULL"]);
    expect("status-short", "MOJIM_OK", &[]);
    expect(
        "metrics-size-unset",
        "MOJIM_EINVAL",
        &["status size is 0: set out->size = sizeof(struct mojim_metrics)"],
    );
    expect("metrics-null", "MOJIM_EINVAL", &["out is NULL"]);
    expect("metrics", "MOJIM_OK", &[]);
    expect("metrics-after", "MOJIM_OK", &[]);
    expect("close-null", "MOJIM_EINVAL", &["the handle is NULL"]);
    expect("close", "MOJIM_OK", &[]);
    let line = |prefix: &str| {
        text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} line:\n{text}"))
    };
    assert_eq!(
        line("status-fields "),
        format!(
            "status-fields size=632 role=1 mode=2 mirror_state=1 lanes=2 acked_ok=1 vulnerable=none mirror={}",
            c.mirror_addr()
        )
    );
    assert_eq!(line("status-short-fields "), "status-short-fields size=16 untouched=1");
    assert_eq!(
        line("metrics-fields "),
        "metrics-fields size=320 mirror_state=1 lanes=2 count=5 groups=5 bytes=40 buckets_ok=1 sum_ok=1 \
         vulnerable=none"
    );
    assert_eq!(line("strerror "), "strerror MOJIM_EBUG MOJIM_E?");
    assert_eq!(line("threads "), "threads OK", "threads sharing a handle failed");

    // What the good calls synced is on the mirror.
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(admin.read(0, 12).expect("read the mirror"), b"hello from C");
    assert_eq!(admin.read(4096, 3).expect("read the mirror"), b"abc");
    for t in 0..4u64 {
        let counter = admin.read(8192 + t * 4096, 8).expect("read the mirror");
        assert_eq!(counter, 200u64.to_le_bytes(), "thread {t}'s counter on the mirror");
    }
}
