//! The executor: one [`Command`] against any [`DataMedia`] and lane logs. The node runs it
//! against its mapped files and disk data area, the simulator against media a power cut tears:
//! both execute the same steps in the order the engine emits them.

use super::command::Command;
use crate::checkpoint::GroupRef;
use crate::recovery::for_each_verified_write;
use mojim_region::{Bytes, DataMedia, LogMedia};
use std::io;

/// The lanes' logs, as the executor reads groups from them and frees them.
pub trait Logs {
    /// The record area of `lane`'s log (it exists: a group was received into it).
    fn records(&self, lane: u16) -> Bytes<'_>;

    /// See [`LogMedia::set_tail`].
    fn set_tail(&mut self, lane: u16, pos: u64) -> io::Result<()>;

    /// Makes `lane`'s log positions `from..to` persistent (at most the log's capacity; the
    /// positions wrap around its record area).
    fn persist(&mut self, lane: u16, from: u64, to: u64) -> io::Result<()>;
}

impl<L: LogMedia> Logs for [L] {
    fn records(&self, lane: u16) -> Bytes<'_> {
        self[lane as usize].records()
    }

    fn set_tail(&mut self, lane: u16, pos: u64) -> io::Result<()> {
        self[lane as usize].set_tail(pos)
    }

    fn persist(&mut self, lane: u16, from: u64, to: u64) -> io::Result<()> {
        persist_positions(&mut self[lane as usize], from, to)
    }
}

/// Makes log positions `from..to` of `log` persistent: one range of its record area, or two
/// where the positions wrap around its end.
pub fn persist_positions<L: LogMedia + ?Sized>(log: &mut L, from: u64, to: u64) -> io::Result<()> {
    let cap = log.len();
    assert!(from <= to && to - from <= cap, "log positions {from}..{to} in a log of {cap} bytes");
    if from == to {
        return Ok(());
    }
    let start = from % cap;
    let len = to - from;
    let first = len.min(cap - start);
    log.persist(start, first)?;
    if first < len {
        log.persist(0, len - first)?;
    }
    Ok(())
}

/// Runs `cmd` (anything but [`Command::FailStop`], which is the runtime's to act on) against
/// `data` and `logs`, whose records are checked against `max_body`. An error names what failed;
/// hand it to [`super::CheckpointEngine::done`], which never retries.
pub fn execute<D: DataMedia + ?Sized, L: Logs + ?Sized>(
    cmd: &Command,
    data: &mut D,
    logs: &mut L,
    max_body: u32,
) -> io::Result<()> {
    match *cmd {
        Command::WriteGroup(ref g) => write_group(data, logs.records(g.lane), g, max_body),
        Command::PersistGroup(ref g) => {
            if !data.persists_ranges() {
                return Ok(());
            }
            let mut result = Ok(());
            for_each_verified_write(&logs.records(g.lane), g, max_body, |off, body| {
                if result.is_ok() {
                    result = data.persist(off, body.len() as u64);
                }
            });
            result
        }
        Command::SyncData => data.sync(),
        Command::SetAppliedSeq(seq) => data.set_applied_seq(seq),
        Command::ReleaseTail { lane, pos } => logs.set_tail(lane, pos),
        Command::PersistLog { lane, from, to } => logs.persist(lane, from, to),
        Command::FailStop(ref f) => panic!("FailStop ({f}) is the runtime's, not the media's"),
    }
}

/// Copies group `g`'s record bodies from `records` into `data`, stopping at the first error,
/// which says which bytes.
fn write_group<D: DataMedia + ?Sized>(
    data: &mut D,
    records: Bytes<'_>,
    g: &GroupRef,
    max_body: u32,
) -> io::Result<()> {
    let mut result = Ok(());
    for_each_verified_write(&records, g, max_body, |off, body| {
        if result.is_ok() {
            result = data
                .write(off, body)
                .map_err(|e| io::Error::new(e.kind(), format!("{} bytes at offset {off}: {e}", body.len())));
        }
    });
    result
}
