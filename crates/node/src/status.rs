//! What `mojim status` shows.

use super::{session, Shared};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaneStatus {
    pub lane: u16,
    pub log_capacity: u64,
    pub log_used: u64,
}

/// A node's status: the JSON body of its Reply to a status request.
///
/// The admin protocol's bytes (the Request body, `MAX_READ` and how a read's reply is cut into
/// Reply frames) are `mojim_format::handshake`'s, beside the other frames; this document stays
/// here. It is not a fixed layout but a report of the node's own parts ([`BackupStatus`],
/// [`CopyProgress`](super::CopyProgress), [`RecoveryReport`](super::RecoveryReport)), read by
/// name, that grows a field whenever the node learns to count something (older readers skip
/// what they do not know; `#[serde(default)]` lets newer ones read older nodes). Putting it in
/// the format crate would move those types with it and make the crate that checks every byte
/// depend on serde for one JSON document it never checks.
///
/// [`BackupStatus`]: super::BackupStatus
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MirrorStatus {
    pub role: String,
    pub listen: String,
    pub region_uuid: String,
    pub region_size: u64,
    pub epoch: u64,
    /// The history this copy follows, and the one before it (hex).
    pub generation: String,
    pub prev_generation: String,
    /// False while a copy into the data area is unfinished: such a copy must not be promoted.
    pub consistent: bool,
    /// A copy into this node in progress.
    #[serde(default)]
    pub copy: Option<super::session::CopyProgress>,
    pub session: Option<String>,
    pub primary: Option<String>,
    pub session_lanes: u16,
    pub lanes: Vec<LaneStatus>,
    pub last_received_seq: u64,
    pub applied_seq: u64,
    pub lag_groups: usize,
    pub lag_bytes: u64,
    pub groups_received: u64,
    pub bytes_received: u64,
    pub violations: u64,
    /// Connections refused at their handshake and lanes refused as they joined a session, by
    /// reason (`timeout`, `tls`, `secret`, ...: every reason, 0 included).
    #[serde(default)]
    pub refused_handshakes: std::collections::BTreeMap<String, u64>,
    /// The last protocol violation that ended a data lane: the lane, the frame and what was
    /// expected.
    #[serde(default)]
    pub last_violation: Option<String>,
    pub sessions: u64,
    /// Copy frames that failed their check (changed while sent, or corrupted) and were asked
    /// for again.
    #[serde(default)]
    pub copy_retries: u64,
    /// Applied groups made persistent in the data area, each once (groups a backup still lacks
    /// stay in the log, but are not persisted again).
    #[serde(default)]
    pub groups_persisted: u64,
    /// Reclaim passes since the node started (each persists what was applied since the last
    /// and frees the log space every backup has acknowledged).
    #[serde(default)]
    pub reclaims: u64,
    pub data_persistence: String,
    /// Why the data area stopped accepting checkpoints, if it did.
    pub storage_failed: Option<String>,
    pub recovery: super::RecoveryReport,
    /// The backups this node feeds.
    pub backups: Vec<super::BackupStatus>,
    /// Times lanes waited for forwarding to catch up (`secondary_tier_thresh`), and how long.
    pub stalls: u64,
    pub stalled_ms: f64,
    /// `[mirror] secondary_tier_thresh`: bytes a backup may lag before lanes wait.
    #[serde(default)]
    pub secondary_tier_thresh: u64,
    pub uptime_s: f64,
    /// The etcd coordinator as this node last saw it (`[cluster] coordinator = "etcd"` only).
    #[serde(default)]
    pub coordinator: Option<super::CoordinatorStatus>,
    /// The emulated NVMM under the logs and the data area, if one is set (`[mirror] nvmm_*`).
    #[serde(default)]
    pub nvmm: Option<mojim::nvmm::NvmmStatus>,
}

pub(crate) fn status(s: &Shared) -> MirrorStatus {
    // Session before forwarding: a session's end holds the session slot while it becomes the
    // applier, and a reclaim, as the applier, takes the forwarding state.
    let sess = session::describe(s);
    let consistent = s.data.consistent();
    let copy = session::copy_progress(s);
    let here = || status_here(s, consistent, copy, sess);
    let f = &s.forward;
    // What this node has is taken with the forwarding state held, so that no group applied
    // meanwhile is counted here and missing from the backups' lag.
    let (fwd, mut st) = f.report(here);
    st.backups = fwd.backups;
    st.stalls = fwd.stalls;
    st.stalled_ms = fwd.stalled_micros as f64 / 1000.0;
    st
}

/// The status without the backups' part.
fn status_here(
    s: &Shared,
    consistent: bool,
    copy: Option<session::CopyProgress>,
    sess: Option<(u64, String, u16, u64)>,
) -> MirrorStatus {
    let lag = s.ckpt.lag();
    let (lag_groups, lag_bytes, applied) = (lag.groups, lag.bytes, lag.applied_seq);
    // A failed data area holds what was persisted before the failure, and no more.
    let applied = match s.data.failed() {
        Some(_) => s.data.area().applied_seq().unwrap_or(applied).min(applied),
        None => applied,
    };
    let lanes = (s.lanes.usage().into_iter())
        .map(|(lane, log_capacity, log_used)| LaneStatus { lane, log_capacity, log_used })
        .collect();
    let (generation, prev) = s.data.area().generation().unwrap_or((0, 0));
    let primary = s.data.is_primary();
    let counts = s.stats.counters();
    MirrorStatus {
        role: if primary {
            "primary"
        } else if s.session.is_backup() {
            "backup"
        } else {
            "mirror"
        }
        .into(),
        generation: format!("{generation:#x}"),
        prev_generation: format!("{prev:#x}"),
        consistent,
        copy,
        listen: s.stats.listen_addr(),
        region_uuid: mojim::config::format_uuid(&s.opts.region.uuid),
        region_size: s.opts.region.size,
        epoch: s.session.epoch(),
        session: sess.as_ref().map(|x| format!("{:#x}", x.0)),
        primary: sess.as_ref().map(|x| x.1.clone()),
        session_lanes: sess.as_ref().map_or(0, |x| x.2),
        lanes,
        last_received_seq: counts.last_received_seq,
        applied_seq: applied,
        lag_groups,
        lag_bytes,
        groups_received: counts.groups_received,
        bytes_received: counts.bytes_received,
        violations: counts.violations,
        refused_handshakes: counts.refused.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
        last_violation: counts.last_violation,
        sessions: counts.sessions,
        copy_retries: counts.copy_retries,
        groups_persisted: counts.groups_persisted,
        reclaims: counts.reclaims,
        data_persistence: s.data.area().persistence().into(),
        storage_failed: s.data.failed().cloned(),
        recovery: s.stats.recovery().clone(),
        backups: Vec::new(),
        stalls: 0,
        stalled_ms: 0.0,
        secondary_tier_thresh: s.opts.secondary_tier_thresh,
        uptime_s: counts.uptime_s,
        nvmm: s.nvmm.as_deref().map(mojim::nvmm::NvmmStatus::of),
        coordinator: s.opts.coordinator.is_some().then(|| s.coord.status()),
    }
}
