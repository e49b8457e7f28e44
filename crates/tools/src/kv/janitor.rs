//! Clean-up that survives the benchmark's own death. A small `sh` process, in a process group
//! of its own (so a Ctrl-C at the terminal does not reach it), reads on a pipe the folders and
//! child processes the benchmark creates. The benchmark removes them itself when it ends
//! normally and then says `done`; if it dies instead (Ctrl-C, SIGTERM, SIGKILL), the pipe
//! closes without `done`, and the janitor kills the children still listed and removes the
//! folders.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

const SCRIPT: &str = r#"
pids=
while IFS= read -r line; do
  case $line in
    "pid "*) pids="$pids ${line#pid }" ;;
    "unpid "*) p=${line#unpid }; rest=; for q in $pids; do [ "$q" = "$p" ] || rest="$rest $q"; done; pids=$rest ;;
    "dir "*) set -- "$@" "${line#dir }" ;;
    done) exit 0 ;;
  esac
done
if [ -n "$pids" ]; then kill -9 $pids 2>/dev/null; sleep 0.2; fi
[ $# -eq 0 ] || rm -rf -- "$@"
"#;

/// The janitor process and the pipe to it.
pub struct Janitor {
    child: Option<Child>,
    pipe: Option<ChildStdin>,
}

impl Janitor {
    /// Starts the janitor; without `sh` the benchmark still runs, and says that an interrupted
    /// run may leave files behind.
    pub fn start() -> Janitor {
        let spawned = Command::new("sh")
            .args(["-c", SCRIPT, "mojim-bench-kv-janitor"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => {
                let pipe = child.stdin.take();
                Janitor { child: Some(child), pipe }
            }
            Err(e) => {
                eprintln!("kv: warning: no clean-up process (sh: {e}); an interrupted run may leave its folders behind");
                Janitor { child: None, pipe: None }
            }
        }
    }

    fn say(&mut self, line: &str) {
        if let Some(p) = &mut self.pipe {
            // A janitor that died cannot be helped; the normal clean-up still runs.
            let _ = writeln!(p, "{line}").and_then(|_| p.flush());
        }
    }

    /// A folder to remove if the benchmark dies.
    pub fn folder(&mut self, dir: &Path) {
        if let Some(d) = dir.to_str().filter(|d| !d.contains('\n')) {
            self.say(&format!("dir {d}"));
        }
    }

    /// A child process to kill if the benchmark dies.
    pub fn process(&mut self, pid: u32) {
        self.say(&format!("pid {pid}"));
    }

    /// A child process that was reaped (its pid may be reused: never kill it).
    pub fn reaped(&mut self, pid: u32) {
        self.say(&format!("unpid {pid}"));
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        self.say("done");
        self.pipe.take();
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}
