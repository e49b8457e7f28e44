//! Restart recovery at open: the complete groups the logs hold are applied to the data area,
//! made persistent, recorded, and the logs freed, by `mojim_core::mirror::Restart` (the
//! checkpoint engine, in the running mirror's order) through `mojim_core::mirror::execute`. The
//! simulator runs the same recovery against its power-cut media; this file only executes the
//! commands against the node's files and names the file that failed.

use super::counters::RecoveryReport;
use super::data::DataArea;
use super::{checkpoint_state, MirrorOptions, MAX_FRAME_LIMIT};
use mojim::error::{Error, Result};
use mojim_core::checkpoint::Checkpointer;
use mojim_core::mirror::{execute, persist_positions, CheckpointEngine, Command, Logs, Restart};
use mojim_core::recovery::Recovered;
use mojim_region::{Bytes, LogFile};
use std::io;
use std::sync::OnceLock;

/// The logs as they are opened, before the lanes are made.
struct OpenLogs<'a>(&'a [OnceLock<LogFile>]);

impl OpenLogs<'_> {
    fn log(&self, lane: u16) -> &LogFile {
        self.0[lane as usize].get().expect("recovery names only lanes that have a log")
    }
}

impl Logs for OpenLogs<'_> {
    fn records(&self, lane: u16) -> Bytes<'_> {
        Bytes::Mapped(self.log(lane).area())
    }

    fn set_tail(&mut self, lane: u16, pos: u64) -> io::Result<()> {
        self.log(lane).set_tail(pos)
    }

    fn persist(&mut self, lane: u16, from: u64, to: u64) -> io::Result<()> {
        persist_positions(&mut self.log(lane), from, to)
    }
}

/// Applies the groups `found` after `applied_seq` (what the data area records), makes them
/// persistent and records the new applied number, then frees each log up to its head, or, with
/// `keep` (backups), keeps every recovered group in its log. Returns the engine and checkpointer
/// the running mirror goes on with.
pub(crate) fn replay(
    opts: &MirrorOptions,
    region: &DataArea,
    logs: &[OnceLock<LogFile>],
    found: &Recovered,
    applied_seq: u64,
    keep: bool,
    report: &mut RecoveryReport,
) -> Result<(CheckpointEngine, Checkpointer)> {
    let (engine, cp) = checkpoint_state::parts(logs.len(), applied_seq);
    let tails: Vec<Option<u64>> = logs.iter().map(|l| l.get().map(LogFile::tail)).collect();
    let mut restart = Restart::new(engine, cp, found, &tails, keep);
    let mut data = region;
    let mut lane_logs = OpenLogs(logs);
    let mut failed: Option<(Command, io::Error)> = None;
    while let Some(cmd) = restart.poll() {
        if let Command::FailStop(_) = cmd {
            let (cmd, source) = failed.expect("a command failed before the stop");
            return Err(Error::Io { op: what_failed(opts, &cmd), source });
        }
        let result = execute(&cmd, &mut data, &mut lane_logs, MAX_FRAME_LIMIT);
        match (&cmd, result) {
            (Command::WriteGroup(g), Ok(())) => {
                report.groups_applied += 1;
                report.bytes_applied += g.bytes;
                restart.done(Ok(()));
            }
            (_, Ok(())) => restart.done(Ok(())),
            (_, Err(e)) => {
                restart.done(Err(io::Error::new(e.kind(), e.to_string())));
                failed = Some((cmd, e));
            }
        }
    }
    Ok(restart.into_parts())
}

/// What the open was doing when `cmd` failed, naming the file.
fn what_failed(opts: &MirrorOptions, cmd: &Command) -> String {
    let data = opts.data_path();
    match cmd {
        Command::WriteGroup(_) | Command::PersistGroup(_) => {
            format!("apply recovered groups to {}", data.display())
        }
        Command::SyncData => format!("sync {}", data.display()),
        Command::SetAppliedSeq(_) => format!("persist the applied sequence number in {}", data.display()),
        Command::ReleaseTail { lane, .. } => {
            format!("persist the tail of {}", opts.log_path(*lane).display())
        }
        Command::PersistLog { lane, .. } => {
            format!("persist the records recovered from {}", opts.log_path(*lane).display())
        }
        Command::FailStop(f) => f.to_string(),
    }
}
