//! `mojim bench` run to its end from a test, its folders in a test's own folder, checked to
//! leave nothing behind.

use std::path::Path;
use std::process::Command;

/// Every entry of `dir` (after a run there should be none left).
pub fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read the test folder")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect()
}

/// Runs `mojim bench` with `args`, its folders (`--dir`, `--disk-dir`) in `dir`, and asserts
/// that it left nothing there: (succeeded, stdout, stderr).
pub fn bench(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let d = dir.to_str().expect("utf-8 path");
    let out = Command::new(super::exe())
        .arg("bench")
        .args(args)
        .args(["--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(leftovers(dir).is_empty(), "{args:?} left behind: {:?}", leftovers(dir));
    (out.status.success(), stdout, stderr)
}
