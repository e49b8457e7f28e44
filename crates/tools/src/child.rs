//! A mirror (or echo server) in a child process, for the demo, the benchmark and tests.

use mojim::error::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A child process that prints `serving on ADDR` when ready; killed on drop.
pub struct ChildNode {
    child: Child,
    addr: String,
    /// The lines it printed before that one (e.g. `metrics on ADDR`).
    printed: Vec<String>,
}

impl ChildNode {
    /// Runs `exe args...` and waits for its ready line.
    pub fn spawn(exe: &Path, args: &[&str]) -> Result<ChildNode> {
        let mut cmd = Command::new(exe);
        // A helper process speaks up only for warnings, unless the user asked for more.
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "warn");
        }
        Self::start(cmd, exe, args, Stdio::inherit())
    }

    /// As [`ChildNode::spawn`], its log (stderr, from level info unless `MOJIM_LOG` says
    /// otherwise) written to the file `log`, for a caller that reads what the process saw.
    pub fn spawn_logged(exe: &Path, args: &[&str], log: &Path) -> Result<ChildNode> {
        let mut cmd = Command::new(exe);
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "info");
        }
        let file = std::fs::File::create(log).map_err(Error::io(format!("create {}", log.display())))?;
        Self::start(cmd, exe, args, Stdio::from(file))
    }

    fn start(cmd: Command, exe: &Path, args: &[&str], stderr: Stdio) -> Result<ChildNode> {
        Self::launch_with(cmd, exe, args, stderr)?.ready()
    }

    /// Runs `exe args...` without waiting for its ready line: for a process that serves only
    /// once something else happens (a standby). [`Starting::ready`] waits for the line; a
    /// [`Starting`] dropped before that kills the process.
    pub fn launch(exe: &Path, args: &[&str]) -> Result<Starting> {
        let mut cmd = Command::new(exe);
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "warn");
        }
        Self::launch_with(cmd, exe, args, Stdio::inherit())
    }

    fn launch_with(mut cmd: Command, exe: &Path, args: &[&str], stderr: Stdio) -> Result<Starting> {
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(Error::io(format!("start {}", exe.display())))?;
        let out = child.stdout.take().expect("stdout is piped");
        Ok(Starting {
            child: Some(child),
            reader: Some(BufReader::new(out)),
            what: format!("{} {}", exe.display(), args.join(" ")),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The lines it printed before it was ready.
    pub fn printed(&self) -> &[String] {
        &self.printed
    }

    /// The address of its metrics listener, from its `metrics on ADDR` line.
    pub fn metrics_addr(&self) -> Option<&str> {
        self.printed.iter().find_map(|l| l.strip_prefix("metrics on "))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child to exit by itself, at most `timeout`; its status, or `None` if it
    /// still runs.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let t0 = std::time::Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if t0.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asks the child to stop (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.signal(rustix::process::Signal::TERM);
        let _ = self.child.wait();
    }

    /// Freezes the child (SIGSTOP): it holds its connections open and answers nothing.
    /// Returns once every thread of it has stopped: `kill` only queues the signal, and on a
    /// busy machine a thread may go on working for milliseconds after it.
    pub fn freeze(&self) -> std::io::Result<()> {
        self.signal(rustix::process::Signal::STOP)?;
        wait_stopped(self.child.id())
    }

    /// Lets a frozen child run again (SIGCONT).
    pub fn thaw(&self) -> std::io::Result<()> {
        self.signal(rustix::process::Signal::CONT)
    }

    fn signal(&self, sig: rustix::process::Signal) -> std::io::Result<()> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .ok_or_else(|| std::io::Error::other("the child has no valid pid"))?;
        rustix::process::kill_process(pid, sig).map_err(std::io::Error::from)
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until every thread of process `pid`, sent SIGSTOP, has stopped: `kill` only queues the
/// signal, and on a busy machine a thread may go on working for milliseconds after it. An error
/// if they do not within 10 s, or if `/proc/PID/task` cannot be read.
pub fn wait_stopped(pid: u32) -> std::io::Result<()> {
    let tasks = format!("/proc/{pid}/task");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !all_stopped(Path::new(&tasks))? {
        if std::time::Instant::now() > deadline {
            return Err(std::io::Error::other(format!("{tasks}: not every thread stopped within 10 s")));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

/// Whether every thread listed under `tasks` (`/proc/PID/task`) is stopped (state `T` or `t`)
/// or already gone.
fn all_stopped(tasks: &Path) -> std::io::Result<bool> {
    for entry in std::fs::read_dir(tasks)? {
        // A thread that ended between the listing and the read is not running either.
        let Ok(stat) = std::fs::read_to_string(entry?.path().join("stat")) else { continue };
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if !matches!(state, Some('T' | 't' | 'Z' | 'X')) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A child process started by [`ChildNode::launch`], not known to be ready yet; killed on drop.
pub struct Starting {
    /// Taken by [`Starting::ready`].
    child: Option<Child>,
    /// Taken by [`Starting::ready`] with the ready line.
    reader: Option<BufReader<std::process::ChildStdout>>,
    /// The command line, for errors.
    what: String,
}

impl Starting {
    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the `serving on ADDR` line (an error if the process exits first).
    pub fn ready(mut self) -> Result<ChildNode> {
        let mut line = String::new();
        let mut printed = Vec::new();
        loop {
            line.clear();
            let reader = self.reader.as_mut().expect("taken only with the ready line");
            let n = reader.read_line(&mut line).map_err(Error::io("read child output"))?;
            if n == 0 {
                let mut child = self.child.take().expect("a starting process has its child");
                let status = child.wait().map_err(Error::io("wait for child"))?;
                return Err(Error::Io {
                    op: format!("start {}", self.what),
                    source: std::io::Error::other(format!("exited ({status}) before it was ready")),
                });
            }
            if let Some(addr) = line.trim().strip_prefix("serving on ") {
                let addr = addr.to_string();
                let child = self.child.take().expect("a starting process has its child");
                let mut reader = self.reader.take().expect("read until now");
                // Keep draining stdout so the child never blocks on a full pipe.
                std::thread::spawn(move || {
                    let mut sink = String::new();
                    while reader.read_line(&mut sink).is_ok_and(|n| n > 0) {
                        sink.clear();
                    }
                });
                return Ok(ChildNode { child, addr, printed });
            }
            printed.push(line.trim_end().to_string());
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `freeze` returns only once the child is stopped, and `thaw` lets it run again.
    #[test]
    fn freeze_returns_once_every_thread_stopped() {
        let script = "echo serving on 127.0.0.1:1; exec sleep 30";
        let child = ChildNode::spawn(Path::new("/bin/sh"), &["-c", script]).expect("start sh");
        let tasks = format!("/proc/{}/task", child.child.id());
        assert!(!all_stopped(Path::new(&tasks)).expect("read the tasks"), "a sleeping child is not stopped");
        child.freeze().expect("freeze");
        assert!(all_stopped(Path::new(&tasks)).expect("read the tasks"));
        child.thaw().expect("thaw");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while all_stopped(Path::new(&tasks)).expect("read the tasks") {
            assert!(std::time::Instant::now() < deadline, "the child stayed stopped after SIGCONT");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
