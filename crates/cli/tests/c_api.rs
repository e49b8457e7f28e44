//! The C API as a C program uses it: the paper's Fig. 1 built with the system `cc` against
//! include/mojim.h and libmojim (through its pkg-config file), killed at random against a
//! mirror; and every misuse the API must answer with an error code and a message.

mod common;

use common::{wait_applied, Cluster, Rng, TempDir};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The folder holding libmojim.so, built with this test (the cli crate dev-depends on
/// mojim-capi, which cargo builds into the test's own folder; the one above may hold an older
/// build from `cargo build -p mojim-capi`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test binary's folder").to_path_buf();
    for dir in [deps.clone(), deps.parent().unwrap_or(&deps).to_path_buf()] {
        if dir.join("libmojim.so").is_file() {
            return dir;
        }
    }
    panic!(
        "libmojim.so is not in {} or its parent: build the workspace (cargo test builds it)",
        deps.display()
    );
}

/// Whether `cc` and `pkg-config` are there (a skip, failing under MOJIM_TEST_STRICT, if not).
fn have_tools() -> bool {
    for tool in ["cc", "pkg-config"] {
        if Command::new(tool).arg("--version").output().is_err() {
            common::skip(&format!("{tool} is not installed (scripts/test installs it)"));
            return false;
        }
    }
    true
}

/// Compiles `src` into `out` with `flags` after it.
fn compile(src: &Path, out: &Path, flags: &[String]) {
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11"])
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(flags)
        .output()
        .expect("run cc");
    assert!(o.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
}

/// The compiler flags pkg-config gives for a mojim.pc made from crates/capi/mojim.pc.in for
/// this build.
fn pkg_config_flags(dir: &Path) -> Vec<String> {
    let template =
        std::fs::read_to_string(Path::new(REPO).join("crates/capi/mojim.pc.in")).expect("mojim.pc.in");
    let repo = Path::new(REPO).canonicalize().expect("the repository");
    let pc = template
        .replace("@prefix@", repo.to_str().expect("utf-8"))
        .replace("@libdir@", lib_dir().to_str().expect("utf-8"));
    std::fs::write(dir.join("mojim.pc"), pc).expect("write mojim.pc");
    let o = Command::new("pkg-config")
        .args(["--cflags", "--libs", "mojim"])
        .env("PKG_CONFIG_PATH", dir)
        .output()
        .expect("run pkg-config");
    assert!(o.status.success(), "pkg-config: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).split_whitespace().map(String::from).collect()
}

/// A built C program, run with the library its rpath names: cargo's LD_LIBRARY_PATH for tests
/// also lists target/<profile>, whose libmojim.so may be an older build, and would win.
fn c_program(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd
}

fn direct_flags() -> Vec<String> {
    let lib = lib_dir();
    vec![
        format!("-I{REPO}/include"),
        format!("-L{}", lib.display()),
        "-lmojim".into(),
        format!("-Wl,-rpath,{}", lib.display()),
    ]
}

/// A cluster whose configuration names its running mirror, as a C program reads it.
fn cluster(test: &str) -> Cluster {
    let mut c = Cluster::new(test, 1 << 20, |f| f.primary.lanes = 2);
    c.start_mirror();
    c.cfg.file.primary.mirror = c.mirror_addr();
    let text = toml::to_string(&c.cfg.file).expect("serialise");
    mojim::config::write_private(&c.cfg_path, &text).expect("write mojim.toml");
    c
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Checks Fig. 1's invariants on a copy of the region and returns (count, log length): every
/// entry up to the length is whole, their counts rise, and the count is at least the last.
fn check_fig1(image: &[u8], how: &str) -> (u64, u64) {
    let count = u64_at(image, 0);
    let len = u64_at(image, 2048);
    let mut prev = 0;
    for i in 0..len as usize {
        let e = &image[4096 + 64 * i..4096 + 64 * (i + 1)];
        let c = u64_at(e, 0);
        let text = format!("access {c}");
        assert!(c > prev, "{how}: entry {i} has count {c} after {prev}");
        assert_eq!(&e[8..8 + text.len()], text.as_bytes(), "{how}: entry {i} is torn");
        prev = c;
    }
    assert!(count >= prev, "{how}: the count {count} is behind the log's last entry {prev}");
    (count, len)
}

/// Fig. 1 in C, killed with SIGKILL at random moments and run again on the same region: the
/// mirror's copy is always consistent (count and log agree, no torn entry) and holds every
/// state the program printed as acknowledged.
#[test]
fn fig1_in_c_killed_at_random_loses_nothing_acknowledged() {
    if !have_tools() {
        return;
    }
    let c = cluster("c-fig1");
    let bin = TempDir::new("c-fig1-bin");
    let fig1 = bin.path().join("fig1");
    compile(&Path::new(REPO).join("examples/c/fig1.c"), &fig1, &pkg_config_flags(bin.path()));
    // A first short run to a clean end: the region's first (whole) copy to the mirror is over
    // (closing waits for it), so what the kill rounds check is what their groups carried.
    let o = c_program(&fig1).arg(&c.cfg_path).arg("3").output().expect("run fig1");
    assert!(o.status.success(), "fig1: {}", String::from_utf8_lossy(&o.stderr));
    let mut rng = Rng::new(common::seed("c-fig1"));
    let mut acked = (0u64, 0u64);
    for round in 0..4 {
        let mut child = c_program(&fig1)
            .arg(&c.cfg_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fig1");
        let out = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(out).lines() {
                last = Some(line.expect("a line"));
            }
            last
        });
        std::thread::sleep(Duration::from_millis(rng.range(100, 400)));
        child.kill().expect("kill fig1");
        child.wait().expect("reap fig1");
        let last = reader.join().expect("the reader").unwrap_or_else(|| {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut err);
            panic!("round {round}: fig1 printed nothing before it was killed: {err}")
        });
        let nums: Vec<u64> =
            last.split(' ').map(|kv| kv.split('=').nth(1).expect("k=v").parse().expect("a number")).collect();
        acked = (nums[0], nums[1]);
        let mut admin = c.admin();
        let st = wait_applied(&mut admin);
        assert!(st.consistent, "round {round}: killed in a catch-up copy (rare: it lasts a few ms): {st:?}");
        let image = admin.read(0, c.size()).expect("read the mirror");
        let (count, len) = check_fig1(&image, &format!("round {round}"));
        assert!(
            count >= acked.0 && len >= acked.1,
            "round {round}: printed {last}, the mirror has count={count} log={len}"
        );
        println!("round {round}: printed {last}; the mirror has count={count} log={len}");
    }
    // And to a clean end: the program closes its handle, and the mirror has exactly its state.
    let o = c_program(&fig1).arg(&c.cfg_path).arg("50").output().expect("run fig1");
    assert!(o.status.success(), "fig1: {}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().expect("fig1 printed its states").to_string();
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let (count, len) = check_fig1(&admin.read(0, c.size()).expect("read the mirror"), "the last run");
    assert_eq!(last, format!("count={count} log={len}"));
    assert!(len >= acked.1 + 50);
}

/// Each misuse is an error code with a message that names what was wrong, and the valid calls
/// after them work on the same handle.
#[test]
fn misuse_of_the_c_api_is_an_error_not_a_crash() {
    if !have_tools() {
        return;
    }
    let c = cluster("c-errors");
    let bin = TempDir::new("c-errors-bin");
    let exe = bin.path().join("api_errors");
    compile(&Path::new(REPO).join("crates/cli/tests/c/api_errors.c"), &exe, &direct_flags());
    let o = c_program(&exe).arg(&c.cfg_path).output().expect("run api_errors");
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "api_errors: {stdout}{}", String::from_utf8_lossy(&o.stderr));
    let line = |name: &str| -> (i32, String) {
        let l = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name} in {stdout}"));
        let mut parts = l.splitn(3, ' ');
        parts.next();
        (parts.next().expect("a code").parse().expect("a number"), parts.next().unwrap_or("").to_string())
    };
    let expect = |name: &str, code: i32, says: &str| {
        let (rc, msg) = line(name);
        assert_eq!(rc, code, "{name}: {msg}");
        assert!(msg.contains(says), "{name}: {msg:?} does not say {says:?}");
    };
    const EINVAL: i32 = -1;
    const ERANGE: i32 = -2;
    expect("open-null-path", EINVAL, "config_path is NULL");
    expect("open-null-out", EINVAL, "out is NULL");
    expect("open-missing", -3, "cannot read /nonexistent/mojim.toml");
    expect("open-flags", EINVAL, "unknown flags 0x10");
    expect("close-null", EINVAL, "handle is NULL");
    expect("msync-null-handle", EINVAL, "handle is NULL");
    expect("msync-outside", ERANGE, "is not inside the region");
    expect("msync-past-end", ERANGE, "is not inside the region");
    expect("msync-at-past-end", ERANGE, "outside the region");
    expect("gmsync-null-ranges", EINVAL, "ranges is NULL but its count is 2");
    expect("gmsync-one-outside", ERANGE, "is not inside the region");
    expect("persist-null-ticket", EINVAL, "ticket is NULL");
    expect("wait-bogus-lane", ERANGE, "names lane 60000");
    expect("wait-null-ticket", EINVAL, "ticket is NULL");
    expect("status-size-0", EINVAL, "out->size is 0");
    let status = stdout.lines().find(|l| l.starts_with("status ")).expect("a status line");
    assert!(status.contains("role=1 mode=2 mirror=0 lanes=2 region=1048576"), "{status}");
    assert!(stdout.lines().last() == Some("ok"), "{stdout}");
    // The valid calls reached the mirror.
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(&admin.read(0, 8).expect("read the mirror")[..], b"C API ok");
}
