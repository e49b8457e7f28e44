//! Sending a group and what to do when the mirror is lost or this primary was replaced.

use crate::error::KvError;
use mojim::{Error, Primary, Range, Ticket};
use mojim_format::handshake::RefuseCode;
use std::time::{Duration, Instant};

/// Whether an error means this node may no longer act as primary.
fn fenced(e: &Error) -> bool {
    matches!(e, Error::Fenced { .. } | Error::Refused { code: RefuseCode::Epoch, .. } | Error::Coordinator(_))
}

/// Sends `group` as one atomic group, retrying while the mirror is lost (`block`: every
/// client waits); returns an error when this primary is fenced or the region fails.
pub fn sync(primary: &Primary, group: &[Range]) -> Result<(), KvError> {
    let mut lost_since: Option<Instant> = None;
    loop {
        match primary.gmsync(group) {
            Ok(()) => {
                if let Some(t) = lost_since {
                    tracing::warn!(
                        after_ms = t.elapsed().as_millis() as u64,
                        "the mirror is back; serving again"
                    );
                }
                return Ok(());
            }
            Err(e) if fenced(&e) => return Err(e.into()),
            Err(Error::MirrorLost { reason }) => {
                if let Some(re) =
                    primary.status().reconnect_error.filter(|m| m.contains("fenced") || m.contains("(Epoch)"))
                {
                    return Err(KvError::Replaced(format!("reconnecting: {re}")));
                }
                if lost_since.is_none() {
                    tracing::warn!(%reason, "the mirror is lost: writes wait until it is back");
                    lost_since = Some(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Queues `group` without waiting for the mirror. `None` when the mirror is lost (the caller
/// falls back to [`sync`]); an error when this primary is fenced or the region fails.
pub fn persist(primary: &Primary, group: &[Range]) -> Result<Option<Ticket>, KvError> {
    match primary.persist(group) {
        Ok(t) => Ok(Some(t)),
        Err(e) if fenced(&e) => Err(e.into()),
        Err(Error::MirrorLost { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Waits for `ticket`: true once its group is acknowledged, false when its session ended
/// first (the mirror was lost; the caller sends the last sealed group again with [`sync`]);
/// an error when this primary is fenced.
pub fn wait(primary: &Primary, ticket: Ticket) -> Result<bool, KvError> {
    match primary.wait(ticket) {
        Ok(()) => Ok(true),
        Err(e) if fenced(&e) => Err(e.into()),
        Err(Error::MirrorLost { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Waits for a copy into the mirror (a new session's catch-up) to finish. A copy reads the
/// region as it is when each part is sent: while one runs, the stores of a batch in progress
/// could reach the mirror before the batch is sealed, so no batch starts until it is done.
pub fn settle(primary: &Primary) {
    if let Some(r) = primary.wait_resync(Duration::from_secs(24 * 3600)) {
        tracing::info!(resync = ?r, "the mirror has caught up");
    }
}
