//! The Debian package (scripts/package) of this build, installed with `dpkg -i` and used as an
//! operator would: `/usr/bin/mojim init`, a mirror (`mojim serve`) and `mojim kv` from
//! `/usr/bin`, a SET and a GET through redis-cli, the manual pages, the pkg-config file, a C
//! program built against the installed header and library, the units as installed. It is
//! removed again (`dpkg -r`, and the user it made), leaving the machine as found.
//!
//! Needs root and dpkg (skipped otherwise, failed under MOJIM_TEST_STRICT); skipped when a
//! mojim package is installed already, which this test must not replace.

mod common;

use common::c::{libmojim, repo, run};
use common::preload::preload_lib;
use common::{skip, TempDir};
use mojim_tools::child::ChildNode;
use std::path::{Path, PathBuf};
use std::process::Command;

const MOJIM: &str = "/usr/bin/mojim";

/// Removes the package (and the user its installation made) when dropped, even after a
/// failed check.
struct Installed {
    made_user: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let out = Command::new("dpkg").args(["-r", "mojim"]).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("dpkg -r mojim failed: {out:?}");
        }
        if self.made_user {
            let _ = Command::new("userdel").arg("mojim").output();
        }
    }
}

fn installed_already() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "mojim"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

fn user_exists(name: &str) -> bool {
    Command::new("getent").args(["passwd", name]).output().is_ok_and(|o| o.status.success())
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).expect("UTF-8 output").trim().to_string()
}

/// The target folder and cargo profile of this test binary (<target>/<profile>/deps/<test>).
fn target_and_profile() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("the profile folder");
    let name = profile_dir.file_name().and_then(|n| n.to_str()).expect("a profile name");
    let profile = if name == "debug" { "dev".to_string() } else { name.to_string() };
    (profile_dir.parent().expect("the target folder").to_path_buf(), profile)
}

#[test]
fn the_package_installs_runs_a_mirror_and_kv_from_usr_bin_and_removes_cleanly() {
    if !rustix::process::geteuid().is_root() {
        skip("installing a package needs root");
        return;
    }
    if Command::new("dpkg-deb").arg("--version").output().is_err() {
        skip("dpkg-deb is not installed (Debian package dpkg)");
        return;
    }
    if installed_already() {
        println!("skipped: a mojim package is installed on this machine; this test does not replace it");
        return;
    }
    let dir = TempDir::new("package");
    // What the package holds, built by this test run: libmojim (once), the interposer and the
    // binary (cargo builds both for the tests).
    libmojim();
    preload_lib();
    let (target, profile) = target_and_profile();
    let built = stdout(
        Command::new(repo().join("scripts/package"))
            .args(["--profile", &profile, "--no-build", "--compress", "none", "--out"])
            .arg(dir.path())
            .env("CARGO_TARGET_DIR", &target),
    );
    let deb = built.strip_prefix("wrote ").map(PathBuf::from).expect("scripts/package names the .deb");
    let control = stdout(Command::new("dpkg-deb").args(["--field"]).arg(&deb));
    assert!(control.contains("Depends: libc6 (>= 2."), "{control}");
    // The binary links the C library and libgcc's unwinder, nothing the package does not name.
    let ldd = stdout(Command::new("ldd").arg(common::exe()));
    for line in ldd.lines().filter(|l| l.contains("=>")) {
        let lib = line.split_whitespace().next().unwrap_or("");
        assert!(
            ["libc.so", "libm.so", "libgcc_s.so", "libpthread.so", "libdl.so", "librt.so"]
                .iter()
                .any(|p| lib.starts_with(p)),
            "mojim links {lib}, which the package's Depends do not cover:\n{ldd}"
        );
    }

    let made_user = !user_exists("mojim");
    run(Command::new("dpkg").arg("-i").arg(&deb));
    let _installed = Installed { made_user };
    assert!(user_exists("mojim"), "installing made no user mojim for the units");
    let files = stdout(Command::new("dpkg").args(["-L", "mojim"]));
    let multiarch = stdout(Command::new("gcc").arg("-print-multiarch"));
    for f in [
        MOJIM.to_string(),
        format!("/usr/lib/{multiarch}/libmojim.so"),
        format!("/usr/lib/{multiarch}/libmojim_preload.so"),
        format!("/usr/lib/{multiarch}/pkgconfig/mojim.pc"),
        "/usr/include/mojim.h".into(),
        "/lib/systemd/system/mojim-serve.service".into(),
        "/lib/systemd/system/mojim-kv.service".into(),
        "/usr/share/man/man1/mojim.1.gz".into(),
        "/usr/share/man/man1/mojim-serve.1.gz".into(),
        "/usr/share/man/man1/mojim-kv.1.gz".into(),
        "/usr/share/doc/mojim/copyright".into(),
    ] {
        assert!(files.lines().any(|l| l == f), "the package lacks {f}:\n{files}");
        assert!(Path::new(&f).is_file(), "{f} is not installed");
    }
    // The installed header is the repository's.
    assert_eq!(
        std::fs::read("/usr/include/mojim.h").expect("read the installed header"),
        std::fs::read(repo().join("include/mojim.h")).expect("read include/mojim.h")
    );

    // The manual pages, as `man` finds them (or as files, where man-db is not installed).
    let have_man = Command::new("man").arg("--version").output().is_ok_and(|o| o.status.success());
    for page in ["mojim", "mojim-serve", "mojim-kv"] {
        if have_man {
            let found = stdout(Command::new("man").args(["-w", page]));
            assert_eq!(found, format!("/usr/share/man/man1/{page}.1.gz"), "man -w {page}");
        }
    }
    if !have_man {
        println!("man is not installed: the pages were checked as files");
    }
    let page = stdout(Command::new("sh").arg("-c").arg("zcat /usr/share/man/man1/mojim-kv.1.gz"));
    // The long help, and the command list added to it.
    assert!(page.contains("tls_listen") && page.contains("ZRANGEBYSCORE"), "mojim-kv.1:\n{page}");

    // pkg-config finds the installed library and header (the system's own folders), and a C
    // program builds against them and runs, the library found by the loader's cache.
    let pc = |args: &[&str]| stdout(Command::new("pkg-config").env_remove("PKG_CONFIG_PATH").args(args));
    assert_eq!(pc(&["--modversion", "mojim"]), env!("CARGO_PKG_VERSION"));
    let cflags = pc(&["--cflags", "mojim"]);
    let libs = pc(&["--libs", "mojim"]);
    assert!(libs.contains("-lmojim"), "pkg-config --libs mojim: {libs}");
    let source = dir.path().join("installed.c");
    std::fs::write(
        &source,
        r#"#include <mojim.h>
#include <stdio.h>
int main(void) {
    struct mojim *h = NULL;
    int rc = mojim_open("/nonexistent/mojim.toml", 0, &h);
    if (rc == 0 || h != NULL) return 1;
    printf("%d %s\n", rc, mojim_last_error());
    return 0;
}
"#,
    )
    .expect("write the C program");
    let program = dir.path().join("installed");
    let build = format!(
        "cc -std=c11 -Wall -Wextra -Werror -o {} {} {cflags} {libs}",
        program.display(),
        source.display()
    );
    run(Command::new("sh").arg("-c").arg(&build));
    let said = stdout(&mut Command::new(&program));
    assert!(said.contains("/nonexistent/mojim.toml"), "the C program says {said:?}");
    // The installed interposer loads: in a program given no MOJIM_FILES it says what is missing.
    let preloaded = Command::new("true")
        .env("LD_PRELOAD", format!("/usr/lib/{multiarch}/libmojim_preload.so"))
        .env_remove("MOJIM_FILES")
        .output()
        .expect("run true under the interposer");
    let said = String::from_utf8_lossy(&preloaded.stderr);
    assert!(said.contains("mojim-preload: MOJIM_FILES is not set"), "under the interposer: {said}");

    // The units as installed, with the binary and the pages they name.
    if Command::new("systemd-analyze").arg("--version").output().is_ok() {
        run(Command::new("systemd-analyze")
            .arg("verify")
            .args(["/lib/systemd/system/mojim-serve.service", "/lib/systemd/system/mojim-kv.service"]));
    }

    // An operator's first steps, all from /usr/bin.
    let node = dir.path().join("node");
    run(Command::new(MOJIM).args(["init", "--size", "16MiB", "--listen", "127.0.0.1:0", "--dir"]).arg(&node));
    let cfg = node.join("mojim.toml");
    let cfg_s = cfg.to_str().expect("utf-8");
    let loaded = mojim::Config::load(&cfg).expect("the configuration init wrote");
    let password = loaded.section::<mojim_kv::KvSection>().expect("[kv] as init wrote it").password;
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = ChildNode::spawn(
        Path::new(MOJIM),
        &[
            "serve",
            "--config",
            cfg_s,
            "--listen",
            "127.0.0.1:0",
            "--dir",
            mirror_dir.to_str().expect("utf-8"),
        ],
    )
    .expect("start /usr/bin/mojim serve");
    let mut kv = ChildNode::spawn(
        Path::new(MOJIM),
        &["kv", "--config", cfg_s, "--listen", "127.0.0.1:0", "--mirror", mirror.addr()],
    )
    .expect("start /usr/bin/mojim kv");
    let port = kv.addr().rsplit(':').next().expect("host:port").to_string();
    let redis = |args: &[&str]| {
        stdout(
            Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "-p", &port, "-a", &password, "--no-auth-warning"])
                .args(args),
        )
    };
    if Command::new("redis-cli").arg("--version").output().is_ok() {
        assert_eq!(redis(&["SET", "installed", "from /usr/bin"]), "OK");
        assert_eq!(redis(&["GET", "installed"]), "from /usr/bin");
    } else {
        skip("redis-cli is not installed (Debian package redis-tools)");
    }
    let status = stdout(Command::new(MOJIM).args(["status", "--config", cfg_s, "--addr", mirror.addr()]));
    assert!(status.lines().any(|l| l.starts_with("role")), "mojim status: {status}");
    for (what, child) in [("mojim kv", &mut kv), ("mojim serve", &mut mirror)] {
        let pid = rustix::process::Pid::from_raw(child.pid() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let st = child.wait_exit(common::WAIT).unwrap_or_else(|| panic!("{what} did not stop"));
        assert!(st.success(), "{what} ended with {st} on SIGTERM");
    }
    drop(_installed);
    assert!(!Path::new(MOJIM).exists(), "dpkg -r left {MOJIM}");
    assert!(!installed_already(), "dpkg -r left the package installed");
}
