//! Building C programs against the libmojim of this build: the library built once per run in
//! the test's own target folder and profile, and `cc` with warnings as errors.

use super::skip;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository's root")
}

/// Builds libmojim (package mojim-capi) in this test's own target folder and profile, once per
/// run, and returns the profile folder that holds libmojim.so and libmojim.a. (`cargo test`
/// builds mojim-capi's code as a dev-dependency of this crate, so this only links it.)
pub fn libmojim() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // This binary is <target>/<profile folder>/deps/<test>-<hash>.
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("the profile folder").to_path_buf();
        let target = profile_dir.parent().expect("the target folder");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(p) => p.to_string(),
            None => panic!("no profile folder in {}", exe.display()),
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(repo())
            .args(["build", "--offline", "-p", "mojim-capi", "--profile", &profile, "--target-dir"])
            .arg(target)
            .output()
            .expect("run cargo build -p mojim-capi");
        assert!(
            out.status.success(),
            "cargo build -p mojim-capi failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for lib in ["libmojim.so", "libmojim.a"] {
            assert!(profile_dir.join(lib).is_file(), "{lib} is not in {}", profile_dir.display());
        }
        profile_dir
    })
}

/// Whether `tool --version` runs; if not, the test is skipped (or fails under
/// MOJIM_TEST_STRICT).
pub fn have(tool: &str, package: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        skip(&format!("{tool} is not installed (Debian package {package}; ./scripts/test installs it)"));
    }
    ok
}

/// Runs `cmd` and fails the test, showing its output, unless it succeeds.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles `source` into `dir` with `cc` (C11, warnings are errors) against include/mojim.h
/// and libmojim.so (found at run time by its rpath), and returns the program's path.
pub fn cc_shared(dir: &Path, source: &Path) -> PathBuf {
    let exe = dir.join(source.file_stem().expect("a file name"));
    let lib = libmojim();
    run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(source)
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lmojim"));
    exe
}
