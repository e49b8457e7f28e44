//! Histories of string, list and sorted-set keys for the Porcupine checker
//! (`tools/porcupine-check`, whose `history.go` describes the format): recording them as JSON,
//! building the checker with Go and running it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a recorded operation did: one command, in the form the checker's models know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Get,
    Set,
    Append,
    /// `RPUSH k value`.
    Rpush,
    /// `LPUSH k value`.
    Lpush,
    /// `LPOP k`.
    Lpop,
    /// `LRANGE k 0 -1`.
    Lrange,
    /// `ZADD k score value`.
    Zadd,
    /// `ZINCRBY k score value`.
    Zincrby,
    /// `ZREM k value`.
    Zrem,
    /// `ZRANGE k 0 -1 WITHSCORES`.
    Zrange,
    /// `ZPOPMIN k`.
    Zpopmin,
}

impl Kind {
    /// The op's name in a history.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::Set => "set",
            Kind::Append => "append",
            Kind::Rpush => "rpush",
            Kind::Lpush => "lpush",
            Kind::Lpop => "lpop",
            Kind::Lrange => "lrange",
            Kind::Zadd => "zadd",
            Kind::Zincrby => "zincrby",
            Kind::Zrem => "zrem",
            Kind::Zrange => "zrange",
            Kind::Zpopmin => "zpopmin",
        }
    }
}

/// What a replied operation answered, in the form its op is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// GET's value ("" for a missing key), LPOP's value, ZINCRBY's new score.
    Text(String),
    /// LPOP of an empty list.
    Nil,
    /// RPUSH's and LPUSH's length, ZADD's and ZREM's 1 or 0.
    Int(i64),
    /// LRANGE's list, ZRANGE's members and scores, ZPOPMIN's member and score.
    List(Vec<String>),
}

/// One operation: its invocation and response times (ns on one monotonic clock), and its
/// result. `ret: None` is an operation whose outcome is unknown (no reply came).
#[derive(Clone, Debug)]
pub struct Op {
    /// The sequential process that ran it (a client gets a new one after an unknown outcome).
    pub client: usize,
    pub kind: Kind,
    pub key: String,
    /// What a set, append or push wrote; a sorted-set op's member.
    pub value: String,
    /// ZADD's score, ZINCRBY's increment.
    pub score: Option<i64>,
    /// What it answered; `None` for SET and APPEND, and when no reply came.
    pub output: Option<Output>,
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

fn json_output(o: Option<&Output>) -> String {
    match o {
        None | Some(Output::Nil) => "null".to_string(),
        Some(Output::Text(s)) => json_str(s),
        Some(Output::Int(n)) => n.to_string(),
        Some(Output::List(l)) => format!("[{}]", l.iter().map(|s| json_str(s)).collect::<Vec<_>>().join(",")),
    }
}

/// The history as the checker reads it: a JSON array of operations.
pub fn to_json(ops: &[Op]) -> String {
    let mut s = String::from("[\n");
    for (i, o) in ops.iter().enumerate() {
        let score = o.score.map_or("null".to_string(), |n| n.to_string());
        let ret = o.ret.map_or("null".to_string(), |r| r.to_string());
        s.push_str(&format!(
            "{{\"client\":{},\"op\":\"{}\",\"key\":{},\"value\":{},\"score\":{score},\"output\":{},\"call\":{},\"return\":{ret}}}",
            o.client,
            o.kind.name(),
            json_str(&o.key),
            json_str(&o.value),
            json_output(o.output.as_ref()),
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
