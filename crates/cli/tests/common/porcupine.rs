//! Key-value histories for the Porcupine checker (`tools/porcupine-check`): recording them as
//! JSON, building the checker with Go and running it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a recorded operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set,
    Append,
}

/// One operation: its invocation and response times (ns on one monotonic clock), and its
/// result. `ret: None` is an operation whose outcome is unknown (no reply came).
#[derive(Clone, Debug)]
pub struct Op {
    /// The sequential process that ran it (a client gets a new one after an unknown outcome).
    pub client: usize,
    pub kind: Kind,
    pub key: String,
    /// What a set or append wrote.
    pub value: String,
    /// What a get read ("" for a missing key).
    pub output: Option<String>,
    pub call: u64,
    pub ret: Option<u64>,
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The history as the checker reads it: a JSON array of operations.
pub fn to_json(ops: &[Op]) -> String {
    let mut s = String::from("[\n");
    for (i, o) in ops.iter().enumerate() {
        let kind = match o.kind {
            Kind::Get => "get",
            Kind::Set => "set",
            Kind::Append => "append",
        };
        let output = o.output.as_deref().map_or("null".to_string(), json_str);
        let ret = o.ret.map_or("null".to_string(), |r| r.to_string());
        s.push_str(&format!(
            "{{\"client\":{},\"op\":\"{kind}\",\"key\":{},\"value\":{},\"output\":{output},\"call\":{},\"return\":{ret}}}",
            o.client,
            json_str(&o.key),
            json_str(&o.value),
            o.call
        ));
        s.push_str(if i + 1 < ops.len() { ",\n" } else { "\n" });
    }
    s.push(']');
    s
}

/// The Go tool: `go` on the PATH or in the usual install folders; `None` (after `skip`, which
/// fails under `MOJIM_TEST_STRICT`) when there is none.
pub fn go() -> Option<PathBuf> {
    let candidates = ["go", "/usr/local/go/bin/go", "/usr/lib/go/bin/go"];
    for g in candidates {
        if Command::new(g).arg("version").output().is_ok_and(|o| o.status.success()) {
            return Some(PathBuf::from(g));
        }
    }
    super::skip("Go is not installed (Debian golang-go; ./scripts/test installs it)");
    None
}

/// The checker's source folder.
pub fn checker_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/porcupine-check")
}

/// Builds the checker into `dir` with `go` (fetching Porcupine through the module proxy the
/// first time) and returns its path.
pub fn build_checker(go: &Path, dir: &Path) -> PathBuf {
    let bin = dir.join("porcupine-check");
    let out = Command::new(go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(checker_source())
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build of tools/porcupine-check failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// The checker's verdict on one history file.
pub struct Verdict {
    /// 0 linearizable, 1 a violation, 2 bad input, 3 no answer in time.
    pub code: i32,
    pub output: String,
}

/// Runs the checker on `history`, writing the visualization to `html` on a violation.
pub fn check(checker: &Path, history: &Path, html: &Path) -> Verdict {
    let out = Command::new(checker)
        .args(["-timeout", "60s", "-html"])
        .arg(html)
        .arg(history)
        .output()
        .expect("run porcupine-check");
    Verdict {
        code: out.status.code().unwrap_or(-1),
        output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    }
}
