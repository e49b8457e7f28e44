//! Operators' commands to a node (JSON over the admin connection): role changes under a new
//! epoch, and resolving divergence. Each command is checked whole before it changes anything.
//!
//! - `fence {epoch}`: take `epoch` (refusing every session and frame below it from now on) and
//!   end the current session if it is older.
//! - `promote {epoch, drain_ms}`: become the primary's node at `epoch`: end the session, apply
//!   everything logged, let the backups catch up (at most `drain_ms`), start a new generation
//!   with a dirty bitmap and a metadata log beside the data area, and stop serving data
//!   sessions. The application then opens the data area as its region.
//! - `demote {epoch}`: a former primary's node serves data sessions again (as a backup); its
//!   copy may hold writes nobody acknowledged, so it is marked for a full copy.
//! - `discard {}`: mark this copy inconsistent, so the next session copies everything into it
//!   (resolving a split brain in favour of the peer).
//! - `reset {base}`: before a feeding mirror copies its whole data area here: forget the logs,
//!   mark the copy inconsistent, and start the sequence over at `base + 1`.
//! - `backup_add {addr}`: start feeding the backup at `addr` as one named at start would be
//!   (`forward::add`); reply `{"added": addr, "backups": [...]}`, every backup fed now.
//! - `backup_remove {addr}`: stop feeding it and release the log space held for it alone;
//!   reply `{"removed": addr, "backups": [...]}`. Neither is kept across a restart.

use super::checkpoint_state::ResetRefused;
use super::operator_command_error::{CommandError, StorageError};
use super::{checkpoint, forward, session, Shared};
use mojim_format::region::{FLAG_INCONSISTENT, FLAG_PRIMARY};
use serde::Deserialize;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Command {
    Fence {
        epoch: u64,
    },
    Promote {
        epoch: u64,
        #[serde(default = "default_drain")]
        drain_ms: u64,
    },
    Demote {
        epoch: u64,
    },
    Discard {},
    Reset {
        base: u64,
    },
    BackupAdd {
        addr: String,
    },
    BackupRemove {
        addr: String,
    },
}

fn default_drain() -> u64 {
    5000
}

/// Runs one command and returns its JSON reply, or why it did not happen.
pub(crate) fn run(s: &Shared, json: &str) -> Result<Vec<u8>, CommandError> {
    let cmd: Command = serde_json::from_str(json)
        .map_err(|e| CommandError::BadRequest { json: json.to_string(), reason: e.to_string() })?;
    let reply = match cmd {
        Command::Fence { epoch } => {
            fence(s, epoch)?;
            serde_json::json!({ "epoch": s.session.epoch() })
        }
        Command::Promote { epoch, drain_ms } => promote(s, epoch, Duration::from_millis(drain_ms))?,
        Command::Demote { epoch } => {
            fence(s, epoch)?;
            let (flags, until) = s.data.area().copy_state().map_err(io("read the copy state"))?;
            if flags & FLAG_PRIMARY != 0 {
                s.data
                    .area()
                    .set_copy_state((flags & !FLAG_PRIMARY) | FLAG_INCONSISTENT, until)
                    .map_err(io("record the demotion"))?;
                tracing::warn!(epoch, "demoted: this copy needs a full copy from the current mirror");
            }
            serde_json::json!({ "epoch": epoch })
        }
        Command::Discard {} => {
            no_session(s)?;
            let (flags, _) = s.data.area().copy_state().map_err(io("read the copy state"))?;
            s.data
                .area()
                .set_copy_state(flags | FLAG_INCONSISTENT, 0)
                .map_err(io("mark the copy inconsistent"))?;
            tracing::warn!("this copy was discarded: the next session copies everything into it");
            serde_json::json!({ "discarded": true })
        }
        Command::Reset { base } => {
            reset(s, base)?;
            serde_json::json!({ "base": base })
        }
        Command::BackupAdd { addr } => forward::add(s, &addr)?,
        Command::BackupRemove { addr } => forward::remove(s, &addr)?,
    };
    Ok(reply.to_string().into_bytes())
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> StorageError {
    StorageError::io(op)
}

fn no_session(s: &Shared) -> Result<(), CommandError> {
    match session::describe(s) {
        Some((_, peer, _, _)) => Err(CommandError::SessionActive { peer }),
        None => Ok(()),
    }
}

/// Takes `epoch` if it is newer, persistently, and ends an older session.
fn fence(s: &Shared, epoch: u64) -> Result<(), CommandError> {
    session::fence(s, epoch)
}

pub(crate) fn promote(s: &Shared, epoch: u64, drain: Duration) -> Result<serde_json::Value, CommandError> {
    promote_to(s, epoch, drain, false)
}

/// As [`promote`]; `resume` also accepts this node's own epoch (a promotion claimed under it and
/// cut short by a restart).
pub(crate) fn promote_to(
    s: &Shared,
    epoch: u64,
    drain: Duration,
    resume: bool,
) -> Result<serde_json::Value, CommandError> {
    let current = s.session.epoch();
    if epoch < current || (epoch == current && !resume) {
        return Err(CommandError::EpochNotNew { epoch, current });
    }
    if !s.data.consistent() {
        return Err(CommandError::Inconsistent);
    }
    fence(s, epoch)?;
    session::wait_ended(s, Duration::from_secs(5))?;
    checkpoint::checkpoint(s, true);
    if let Some(msg) = s.data.failed() {
        return Err(CommandError::DataAreaFailed(msg.clone()));
    }
    let applied =
        s.data.area().applied_seq().map_err(StorageError::mojim("read the applied sequence number"))?;
    // Backups that are connected get what this node applied, so one can become the new mirror
    // with nothing to copy.
    let t0 = Instant::now();
    let drained = forward::wait_all_acked(s, applied, drain);
    let (old, _) = s.data.area().generation().map_err(io("read the generation"))?;
    let base = if old == 0 { mojim::history::new_generation() } else { old };
    let paths = mojim::history::PrimaryFiles::beside(&s.opts.data_path());
    paths
        .start_history(
            s.opts.region.uuid,
            s.opts.region.size,
            s.opts.dirty_chunk,
            s.opts.metadata_log_records,
            base,
            applied,
        )
        .map_err(StorageError::mojim("prepare the primary's files"))?;
    let generation = mojim::history::new_generation();
    s.data.area().set_generation(generation, base).map_err(io("persist the generation"))?;
    let (flags, until) = s.data.area().copy_state().map_err(io("read the copy state"))?;
    s.data.area().set_copy_state(flags | FLAG_PRIMARY, until).map_err(io("record the promotion"))?;
    s.data.area().sync().map_err(io("sync the data area"))?;
    tracing::warn!(epoch, applied, "promoted: this node's copy is the primary's now");
    Ok(serde_json::json!({
        "epoch": epoch,
        "applied_seq": applied,
        "generation": generation,
        "backups_drained": drained,
        "drain_ms": t0.elapsed().as_millis() as u64,
        "region_path": s.opts.data_path(),
    }))
}

/// Forgets the logs and starts the sequence over at `base + 1`, marked inconsistent.
fn reset(s: &Shared, base: u64) -> Result<(), CommandError> {
    no_session(s)?;
    let applier = s.ckpt.applier();
    let prepared = s.ckpt.reset_to(base, &applier, || -> Result<(), StorageError> {
        s.lanes.drop_records().map_err(io("drop the log's records"))?;
        let area = s.data.area();
        let (flags, _) = area.copy_state().map_err(io("read the copy state"))?;
        area.set_copy_state(flags | FLAG_INCONSISTENT, 0).map_err(io("mark the copy inconsistent"))?;
        area.set_applied_seq(base).map_err(io("persist the applied sequence number"))
    });
    match prepared {
        Ok(()) => {}
        Err(ResetRefused::Busy) => {
            return Err(CommandError::Busy("groups are still being applied here; try again".into()))
        }
        Err(ResetRefused::Prepare(e)) => return Err(CommandError::Storage(e)),
    }
    tracing::warn!(base, "reset for a full copy");
    Ok(())
}
