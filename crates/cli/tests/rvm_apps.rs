//! Recoverable memory's example programs, `mojim rvm dgemv` and `mojim rvm kmer`, killed with
//! SIGKILL at random points (seeded) and restarted until they finish, against a mirror in a
//! child process: the answer equals an uninterrupted run's, every restart resumes at or after
//! the last commit the killed process reported, and none starts over. Bad input is refused
//! with a message naming it, and changes nothing.

mod common;

use common::edit_rvm;
use common::{seed, Cluster, Rng, WAIT};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Kills per program run.
const KILLS: usize = 4;

/// A cluster whose primary's configuration points at its running mirror.
fn cluster(test: &str, size: u64) -> Cluster {
    let mut c = Cluster::new(test, size, |_| {});
    c.start_mirror();
    let addr = c.mirror_addr();
    c.feed(&[], |f| f.primary.mirror = addr);
    c
}

fn cfg(c: &Cluster) -> String {
    c.cfg_path.to_str().expect("utf-8 path").to_string()
}

/// `mojim rvm <args>` to its end: (success, stdout, stderr).
fn mojim(args: &[String]) -> (bool, String, String) {
    let out = Command::new(common::exe()).arg("rvm").args(args).output().expect("run mojim rvm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The `answer:` line of a finished run.
fn answer(args: &[String]) -> String {
    let (ok, out, err) = mojim(args);
    assert!(ok, "mojim rvm {} failed:\n{out}\n{err}", args.join(" "));
    out.lines()
        .find_map(|l| l.strip_prefix("answer: "))
        .unwrap_or_else(|| panic!("no answer in:\n{out}"))
        .into()
}

fn step_of(line: &str, prefix: &str) -> Option<u64> {
    line.strip_prefix(prefix)?.split_whitespace().next()?.parse().ok()
}

fn spawn(args: &[String]) -> (Child, mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let mut child = Command::new(common::exe())
        .arg("rvm")
        .args(args)
        .env("MOJIM_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mojim rvm");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut err = child.stderr.take().expect("piped");
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    (child, rx, stderr)
}

/// What the runs of one program printed, for the checks and the failure message.
#[derive(Default, Debug)]
struct Record {
    kills: usize,
    /// Per restart: the last step the killed process reported committed, and where the next
    /// one resumed.
    resumes: Vec<(u64, u64)>,
    answer: Option<String>,
}

/// Runs `mojim rvm <args>` and SIGKILLs it `KILLS` times at random points: after a random
/// number of commit lines (0: any time after it starts) and a random delay; restarts it each
/// time, until a run ends by itself.
fn run_killed(args: &[String], rng: &mut Rng) -> Record {
    let mut rec = Record::default();
    let mut committed: Option<u64> = None;
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < 10 * WAIT, "no end after {:?}: {rec:?}", t0.elapsed());
        let plan = (rec.kills < KILLS).then(|| (rng.range(0, 5), Duration::from_micros(rng.range(0, 4000))));
        let (mut child, lines, stderr) = spawn(args);
        let started = Instant::now();
        let mut commits_seen = 0;
        let mut killed = false;
        let mut all = Vec::new();
        loop {
            let due = match plan {
                Some((0, delay)) => Some(started + delay * 10),
                _ => None,
            };
            let line = match due {
                Some(at) => match lines.recv_timeout(at.saturating_duration_since(Instant::now())) {
                    Ok(l) => Some(l),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match lines.recv_timeout(WAIT) {
                    Ok(l) => Some(l),
                    Err(mpsc::RecvTimeoutError::Timeout) => panic!("no output for {WAIT:?}: {all:?}"),
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
            };
            let Some(line) = line else {
                // The time of a kill not tied to a commit.
                let _ = child.kill();
                killed = true;
                break;
            };
            all.push(line.clone());
            if let Some(n) = step_of(&line, "committed: step ") {
                committed = Some(n);
                commits_seen += 1;
                if let Some((k, delay)) = plan {
                    if k > 0 && commits_seen == k {
                        std::thread::sleep(delay);
                        let _ = child.kill();
                        killed = true;
                        break;
                    }
                }
            }
            check_start(&line, committed, &mut rec, &all);
            if let Some(a) = line.strip_prefix("answer: ") {
                rec.answer = Some(a.to_string());
            }
        }
        // Lines the process printed before it died: their commits returned, so they are durable.
        for line in lines.iter() {
            all.push(line.clone());
            if let Some(n) = step_of(&line, "committed: step ") {
                committed = Some(n);
            }
            check_start(&line, committed, &mut rec, &all);
            if let Some(a) = line.strip_prefix("answer: ") {
                rec.answer = Some(a.to_string());
            }
        }
        let status = child.wait().expect("reap mojim rvm");
        let err = stderr.join().unwrap_or_default();
        assert!(
            status.success() || killed,
            "mojim rvm {} failed ({status}):\n{err}\n{all:?}",
            args.join(" ")
        );
        if killed {
            rec.kills += 1;
        }
        if rec.answer.is_some() {
            return rec;
        }
        assert!(killed, "mojim rvm {} ended without an answer ({status}):\n{err}\n{all:?}", args.join(" "));
    }
}

/// A `started` or `resumed` line, against the last commit a killed process reported.
fn check_start(line: &str, committed: Option<u64>, rec: &mut Record, all: &[String]) {
    if line.starts_with("started:") {
        assert!(committed.is_none(), "started over although step {committed:?} was committed: {all:?}");
    }
    if let Some(n) = step_of(line, "resumed: step ") {
        let c = committed.unwrap_or(0);
        assert!(n >= c, "resumed at step {n}, before step {c}, which a commit had returned for: {all:?}");
        rec.resumes.push((c, n));
    }
}

fn args(c: &Cluster, program: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = program.iter().map(|s| s.to_string()).collect();
    v.extend(["--config".into(), cfg(c)]);
    v
}

/// Kills `mojim rvm <a>` at random points until a run finishes, then checks its answer against
/// an uninterrupted run's, and a run with `fail_every` in-process failures against it too.
fn killed_runs_end_with_the_uninterrupted_answer(test: &str, a: &[String], fail_every: u64) {
    let s = seed(test);
    let mut rng = Rng::new(s);
    let rec = run_killed(a, &mut rng);
    println!("{test}: {rec:?}");
    assert_eq!(rec.kills, KILLS, "seed {s}: {rec:?}");
    assert!(
        rec.resumes.iter().any(|&(_, n)| n > 0),
        "seed {s}: no restart resumed past step 0, so recovery was not exercised: {rec:?}"
    );
    // The uninterrupted run, on the same memory from scratch.
    let mut fresh = a.to_vec();
    fresh.push("--fresh".into());
    let reference = answer(&fresh);
    assert_eq!(rec.answer.as_deref(), Some(reference.as_str()), "seed {s}: {rec:?}");
    // In-process failures (the memory closed without committing, then recovered) give it too.
    fresh.extend(["--fail-every".into(), fail_every.to_string(), "--quiet".into()]);
    let (ok, out, err) = mojim(&fresh);
    assert!(ok, "{out}\n{err}");
    let failures = out.lines().filter(|l| l.starts_with("failure injected after step")).count();
    assert!(failures >= 2, "with --fail-every {fail_every}: {failures} failures injected:\n{out}");
    assert!(err.contains("again after failures") && !err.contains("(0 again after failures)"), "{err}");
    assert!(
        out.contains(&format!("answer: {reference}")),
        "seed {s}: with --fail-every {fail_every}:\n{out}"
    );
    // A finished run resumes at its end and prints the same answer.
    let (ok, out, err) = mojim(a);
    assert!(ok && out.contains("resumed: step") && out.contains(&reference), "{out}\n{err}");
}

const DGEMV: [&str; 7] = ["dgemv", "--rows", "16384", "--cols", "16", "--iterations", "120"];

#[test]
fn dgemv_killed_at_random_points_or_failing_ends_with_the_uninterrupted_answer() {
    let c = cluster("rvm-dgemv-kill", 32 << 20);
    killed_runs_end_with_the_uninterrupted_answer("rvm-dgemv-kill", &args(&c, &DGEMV), 7);
}

#[test]
fn kmer_killed_at_random_points_ends_with_the_uninterrupted_answer() {
    let program = [
        "kmer",
        "--genome",
        "16384",
        "--coverage",
        "4",
        "--read-len",
        "50",
        "--k",
        "21",
        "--probes",
        "20000",
        "--commit-every",
        "1000",
    ];
    let c = cluster("rvm-kmer-kill", 32 << 20);
    killed_runs_end_with_the_uninterrupted_answer("rvm-kmer-kill", &args(&c, &program), 7919);
}

/// The same on the Redis backend: the program, killed, and a real redis-server in three
/// processes; the memory is the server's keys.
#[test]
fn dgemv_on_redis_killed_at_random_points_ends_with_the_uninterrupted_answer() {
    let dir = common::TempDir::new("rvm-dgemv-redis");
    let server =
        mojim_tools::rvm::stores::RedisServer::start(&dir.path().join("redis")).unwrap_or_else(|e| {
            panic!("this test needs a real redis-server (scripts/test installs it): {}", e.0)
        });
    let addr = server.addr().to_string();
    let c = Cluster::new("rvm-dgemv-redis-cfg", 4 << 20, |f| {
        edit_rvm(f, |r| {
            r.backend = "redis".into();
            r.redis = addr;
            r.redis_key = "rvm-apps-test".into();
            r.redis_capacity = "8MiB".into();
        });
    });
    killed_runs_end_with_the_uninterrupted_answer("rvm-dgemv-redis", &args(&c, &DGEMV), 11);
}

/// A Redis server with a password (`requirepass`): `mojim rvm` without one is refused, naming
/// the setting; with the password in `MOJIM_REDIS_PASSWORD` (the configuration holds none) it
/// runs.
#[test]
fn on_a_redis_with_a_password_it_is_taken_from_the_environment() {
    let dir = common::TempDir::new("rvm-redis-auth");
    let server =
        mojim_tools::rvm::stores::RedisServer::start(&dir.path().join("redis")).unwrap_or_else(|e| {
            panic!("this test needs a real redis-server (scripts/test installs it): {}", e.0)
        });
    let addr = server.addr().to_string();
    let mut conn = mojim_rvm::redis::resp::Conn::connect(&addr, std::time::Duration::from_secs(5))
        .expect("connect to redis-server");
    let set = conn.call(&[b"CONFIG", b"SET", b"requirepass", b"rvm-apps-password"]).expect("CONFIG SET");
    assert_eq!(set, mojim_rvm::redis::resp::Reply::Status("OK".into()));
    let c = Cluster::new("rvm-redis-auth-cfg", 4 << 20, |f| {
        edit_rvm(f, |r| {
            r.backend = "redis".into();
            r.redis = addr;
            r.redis_key = "rvm-apps-auth".into();
            r.redis_capacity = "4MiB".into();
        });
    });
    let a = args(&c, &["dgemv", "--rows", "256", "--cols", "4", "--iterations", "3"]);
    refused(&a, &["requires a password", "[rvm] redis_password", "MOJIM_REDIS_PASSWORD"]);
    let out = Command::new(common::exe())
        .arg("rvm")
        .args(&a)
        .env("MOJIM_REDIS_PASSWORD", "rvm-apps-password")
        .output()
        .expect("run mojim rvm");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "with MOJIM_REDIS_PASSWORD: {stdout}\n{stderr}");
    assert!(stdout.contains("answer: "), "{stdout}");
}

/// Runs `mojim rvm <args>`, which must fail with every one of `want` in its message.
fn refused(args: &[String], want: &[&str]) {
    let (ok, out, err) = mojim(args);
    assert!(!ok, "mojim rvm {} succeeded:\n{out}", args.join(" "));
    for w in want {
        assert!(err.contains(w), "mojim rvm {}: {w:?} not in:\n{err}", args.join(" "));
    }
}

#[test]
fn bad_input_is_refused_by_name_and_changes_nothing() {
    let c = cluster("rvm-bad", 4 << 20);
    let dgemv = args(&c, &["dgemv", "--rows", "2048", "--cols", "4", "--iterations", "10"]);
    let done = answer(&dgemv);
    let with = |extra: &[&str]| {
        let mut v = dgemv.clone();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    // Flags out of range.
    refused(&with(&["--commit-every", "0"]), &["--commit-every 0"]);
    refused(&with(&["--fail-every", "0"]), &["--fail-every 0"]);
    refused(&args(&c, &["dgemv", "--rows", "0"]), &["--rows 0"]);
    refused(&args(&c, &["dgemv", "--report-sizes", "--rows", "5"]), &["--report-sizes", "--rows"]);
    refused(&args(&c, &["kmer", "--k", "40"]), &["--k 40"]);
    refused(&args(&c, &["kmer", "--slots", "1000"]), &["--slots 1000"]);
    // Another run's parameters: named, with both ways on.
    refused(
        &args(&c, &["dgemv", "--rows", "2048", "--cols", "4", "--iterations", "11"]),
        &["rows=2048 cols=4 iterations=10 seed=1", "iterations=11", "--fresh"],
    );
    // Another program's state.
    refused(&args(&c, &["kmer"]), &["`mojim rvm dgemv`", "--fresh"]);
    // More than the region holds: named by the allocator, the state kept.
    refused(
        &args(&c, &["dgemv", "--rows", "1000000", "--cols", "4", "--iterations", "10", "--fresh"]),
        &["cannot allocate 8003584 bytes", "use a larger region"],
    );
    // None of it changed the state: the finished run is still there.
    let (ok, out, err) = mojim(&dgemv);
    assert!(ok, "{err}");
    assert!(out.contains("resumed: step 10 of 10") && out.contains(&done), "{out}");
    // A missing configuration file is named.
    refused(
        &["dgemv".into(), "--config".into(), "/nonexistent/mojim.toml".into()],
        &["/nonexistent/mojim.toml"],
    );
}

/// `mojim bench --rvm <extra>` with its folders in `dir`/mem and `dir`/disk: (success, stdout,
/// stderr).
fn bench(dir: &std::path::Path, extra: &[&str]) -> (bool, String, String) {
    let (mem, disk) = (dir.join("mem"), dir.join("disk"));
    std::fs::create_dir_all(&mem).expect("create mem");
    std::fs::create_dir_all(&disk).expect("create disk");
    let out = Command::new(common::exe())
        .args(["bench", "--rvm", "--dir"])
        .arg(&mem)
        .arg("--disk-dir")
        .arg(&disk)
        .args(extra)
        .env("MOJIM_LOG", "warn")
        .output()
        .expect("run mojim bench --rvm");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// What is left in `dir`/mem and `dir`/disk.
fn left(dir: &std::path::Path) -> Vec<String> {
    ["mem", "disk"]
        .iter()
        .flat_map(|d| std::fs::read_dir(dir.join(d)).expect("read the folder"))
        .map(|e| e.expect("an entry").path().display().to_string())
        .collect()
}

#[test]
fn bench_rvm_times_recovery_on_mojim_redis_and_a_dump_and_leaves_nothing_behind() {
    let dir = common::TempDir::new("rvm-bench");
    let (ok, out, err) = bench(dir.path(), &["--rvm-parts", "recovery", "--rvm-recoveries", "2", "--json"]);
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("rvm bench [4/4") && err.contains("Redis at 127.0.0.1:"), "progress lines:\n{err}");
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(rows.len(), 12, "three backends and the dump × three sizes:\n{out}");
    for (i, r) in rows.iter().enumerate() {
        let backend = ["mojim", "mojim", "redis", "dump"][i / 3];
        assert_eq!(r["backend"], backend, "{r}");
        assert_eq!(r["op"], "recover", "{r}");
        // The meta block's 16 pages, then 256 and 10 000 more.
        assert_eq!(r["pages"], [16, 272, 10016][i % 3], "{r}");
        assert_eq!(r["samples"], 2, "{r}");
        for k in ["p50_us", "mean_us", "p99_us", "vs_mojim_uffd"] {
            assert!(r[k].as_f64().is_some_and(|v| v > 0.0), "{k} in {r}");
        }
    }
    assert_eq!(rows[0]["tracking"], "uffd-async");
    assert_eq!(rows[3]["tracking"], "mprotect");
    assert_eq!(rows[9]["tracking"], "none");
    assert_eq!(left(dir.path()), Vec::<String>::new(), "the benchmark left files behind");
}

#[test]
fn bench_rvm_refuses_bad_flags_by_name_and_starts_nothing() {
    let dir = common::TempDir::new("rvm-bench-bad");
    let cases: [(&[&str], &str); 7] = [
        (&["--rvm-backends", "mojim-uffd,memcached"], "\"memcached\" is not a backend"),
        (&["--rvm-parts", "commit,everything"], "--rvm-parts: \"everything\" is not a part"),
        (&["--rvm-fail-every", "5,0"], "--rvm-fail-every: 0 is not an interval"),
        (&["--rvm-kmer-commit-every", "0"], "--rvm-kmer-commit-every: 0 is not an interval"),
        (&["--rvm-commits", "0"], "--rvm-commits 0"),
        (&["--repeat", "0"], "--repeat 0"),
        (
            &["--rvm-backends", "redis", "--rvm-redis", "127.0.0.1:1"],
            "--rvm-redis 127.0.0.1:1: cannot connect",
        ),
    ];
    for (extra, want) in cases {
        let (ok, out, err) = bench(dir.path(), extra);
        assert!(!ok, "{extra:?} succeeded:\n{out}");
        assert!(err.contains(want), "{extra:?}: {want:?} not in:\n{err}");
        assert_eq!(left(dir.path()), Vec::<String>::new(), "{extra:?} left files behind");
    }
}
