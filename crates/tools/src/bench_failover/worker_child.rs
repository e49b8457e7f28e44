//! A worker as the benchmark sees it: a child whose output arrives as events, killed on drop, and
//! the check of the groups it had acknowledged.

use super::worker::{group_bytes, group_offset, half_slots};
use super::{failed, now_ns, GROUP, STEP};
use mojim::error::{Error, Result};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// What a worker printed.
#[derive(Debug)]
pub(super) enum Event {
    Open(u64),
    Ack {
        k: u64,
        ns: u64,
    },
    Resync {
        kind: String,
        seconds: f64,
        bytes: u64,
    },
    /// `resync failed` or `error`.
    Failed(String),
    /// The worker's output ended.
    Exit,
}

impl Event {
    pub(super) fn parse(line: &str) -> Option<Event> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        Some(match *f.first()? {
            "open" => Event::Open(num(1)?),
            "ack" => Event::Ack { k: num(1)?, ns: num(2)? },
            "resync" if f.get(1) == Some(&"none") => {
                Event::Resync { kind: "none".into(), seconds: 0.0, bytes: 0 }
            }
            "resync" if f.get(1) == Some(&"failed") => Event::Failed(line.into()),
            "resync" => Event::Resync {
                kind: f.get(1)?.to_string(),
                seconds: f.get(2)?.parse().ok()?,
                bytes: num(3)?,
            },
            "error" => Event::Failed(line.into()),
            _ => return None,
        })
    }
}

/// A `mojim bench-worker` child whose output arrives as events; killed on drop.
pub(super) struct Worker {
    pub(super) child: Child,
    pub(super) events: Receiver<Event>,
    /// When it was started (real-time nanoseconds).
    pub(super) started_ns: u64,
}

impl Worker {
    pub(super) fn spawn(
        exe: &Path,
        cfg: &Path,
        region: &Path,
        mirror: &str,
        node: &str,
        upper_half: bool,
    ) -> Result<Worker> {
        let mut cmd = Command::new(exe);
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "warn");
        }
        cmd.arg("bench-worker")
            .arg("--config")
            .arg(cfg)
            .arg("--region")
            .arg(region)
            .args(["--mirror", mirror, "--node", node])
            .args(upper_half.then_some("--upper-half"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let started_ns = now_ns();
        let mut child = cmd.spawn().map_err(Error::io(format!("start {} bench-worker", exe.display())))?;
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let e =
                    Event::parse(&line).unwrap_or_else(|| Event::Failed(format!("unexpected line {line:?}")));
                if tx.send(e).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Exit);
        });
        Ok(Worker { child, events, started_ns })
    }

    /// The next event, at most [`STEP`] from now.
    pub(super) fn next(&self, stage: &str) -> Result<Event> {
        match self.events.recv_timeout(STEP) {
            Ok(Event::Failed(why)) => Err(failed(stage, format!("the worker said: {why}"))),
            Ok(Event::Exit) => Err(failed(stage, "the worker exited".into())),
            Ok(e) => Ok(e),
            Err(RecvTimeoutError::Timeout) => {
                Err(failed(stage, format!("the worker said nothing for {} s", STEP.as_secs())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(failed(stage, "the worker's output ended".into())),
        }
    }

    /// SIGKILL, without waiting: none of the worker's code runs after this, but the kernel takes
    /// a while to tear the process down (unmap its region, close its sockets), which a machine
    /// that dies does not do.
    pub(super) fn kill_now(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits until a killed worker is gone; returns the last acknowledgement it printed that
    /// was not read yet, if any.
    pub(super) fn reap(&mut self) -> Option<(u64, u64)> {
        let _ = self.child.wait();
        let mut last = None;
        while let Ok(e) = self.events.recv_timeout(Duration::from_secs(5)) {
            match e {
                Event::Ack { k, ns } => last = Some((k, ns)),
                Event::Exit => break,
                _ => {}
            }
        }
        last
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks that the groups `1..=last` of the lower half that were not overwritten since are
/// whole in the region file at `path`; returns how many it checked.
pub(super) fn check_groups(path: &Path, last: u64) -> Result<u64> {
    let r = mojim_region::RegionFile::open(path)?;
    let first = last.saturating_sub(half_slots(r.size()) - 1).max(1);
    let mut got = vec![0u8; GROUP as usize];
    for k in first..=last {
        let off = group_offset(k, r.size(), false);
        r.read(off, &mut got);
        let want = group_bytes(k);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            return Err(failed(
                "check",
                format!(
                    "acknowledged group {k} (of 1..={last}) is not whole on the promoted node: byte {i} at \
                     offset {} is {:#04x}, not {:#04x}",
                    off + i as u64,
                    got[i],
                    want[i]
                ),
            ));
        }
    }
    Ok(last - first + 1)
}
