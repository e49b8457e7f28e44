//! What the node counts and remembers for `mojim status`: counters of what it received,
//! refused and reclaimed, the last protocol violation, when it started, what restart recovery
//! did, and the address it listens on.
//!
//! Locks: `last_violation`, and nothing is taken under it (see the lock order in lib.rs).

use super::refused::Refused;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// What restart recovery found and did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RecoveryReport {
    pub groups_applied: usize,
    pub groups_discarded: usize,
    pub bytes_applied: u64,
    pub applied_seq: u64,
    pub micros: u64,
}

pub(crate) struct Stats {
    groups_received: AtomicU64,
    bytes_received: AtomicU64,
    last_received_seq: AtomicU64,
    violations: AtomicU64,
    /// Connections and lanes refused, per [`Refused`] reason (in `Refused::ALL`'s order).
    refused: [AtomicU64; Refused::ALL.len()],
    /// What the last protocol violation on a data lane was.
    last_violation: Mutex<Option<String>>,
    sessions: AtomicU64,
    /// Copy frames that failed their check and were asked for again.
    copy_retries: AtomicU64,
    /// Applied groups whose writes a reclaim made persistent in the data area.
    groups_persisted: AtomicU64,
    /// Reclaim passes: persist what was applied, free what every backup has.
    reclaims: AtomicU64,
    started: Instant,
    recovery: RecoveryReport,
    listen_addr: OnceLock<String>,
}

/// The counters at one moment, for status.
pub(crate) struct Counters {
    pub groups_received: u64,
    pub bytes_received: u64,
    pub last_received_seq: u64,
    pub violations: u64,
    /// Refusals per reason, each reason's label and count, in `Refused::ALL`'s order.
    pub refused: Vec<(&'static str, u64)>,
    pub last_violation: Option<String>,
    pub sessions: u64,
    pub copy_retries: u64,
    pub groups_persisted: u64,
    pub reclaims: u64,
    pub uptime_s: f64,
}

impl Stats {
    /// Nothing counted yet; starting now, after `recovery`.
    pub fn new(recovery: RecoveryReport) -> Stats {
        Stats {
            groups_received: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            last_received_seq: AtomicU64::new(0),
            violations: AtomicU64::new(0),
            refused: Default::default(),
            last_violation: Mutex::new(None),
            sessions: AtomicU64::new(0),
            copy_retries: AtomicU64::new(0),
            groups_persisted: AtomicU64::new(0),
            reclaims: AtomicU64::new(0),
            started: Instant::now(),
            recovery,
            listen_addr: OnceLock::new(),
        }
    }

    /// `n` bytes of frame bodies received.
    pub fn received_bytes(&self, n: u64) {
        self.bytes_received.fetch_add(n, Ordering::Relaxed);
    }

    pub fn bytes_received(&self) -> u64 {
        self.bytes_received.load(Ordering::Relaxed)
    }

    /// Group `seq` was received whole.
    pub fn received_group(&self, seq: u64) {
        self.groups_received.fetch_add(1, Ordering::Relaxed);
        self.last_received_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// A peer was refused or a lane closed for breaking the protocol.
    pub fn violation(&self) {
        self.violations.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was refused at its handshake, or a lane as it joined, for `why`.
    pub fn refused(&self, why: Refused) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// What the last protocol violation on a data lane was.
    pub fn set_last_violation(&self, what: String) {
        *self.last_violation.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
    }

    pub fn session_began(&self) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// A Copy frame failed its check and was asked for again.
    pub fn copy_retried(&self) {
        self.copy_retries.fetch_add(1, Ordering::Relaxed);
    }

    /// A reclaim pass began.
    pub fn reclaimed(&self) {
        self.reclaims.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` applied groups were made persistent in the data area.
    pub fn persisted(&self, n: u64) {
        self.groups_persisted.fetch_add(n, Ordering::Relaxed);
    }

    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The address the node listens on, once it serves.
    pub fn set_listen_addr(&self, addr: String) {
        let _ = self.listen_addr.set(addr);
    }

    /// The address the node listens on (empty before it serves).
    pub fn listen_addr(&self) -> String {
        self.listen_addr.get().cloned().unwrap_or_default()
    }

    pub fn counters(&self) -> Counters {
        Counters {
            groups_received: self.groups_received.load(Ordering::Relaxed),
            bytes_received: self.bytes_received.load(Ordering::Relaxed),
            last_received_seq: self.last_received_seq.load(Ordering::Relaxed),
            violations: self.violations.load(Ordering::Relaxed),
            refused: Refused::ALL
                .iter()
                .map(|r| (r.name(), self.refused[*r as usize].load(Ordering::Relaxed)))
                .collect(),
            last_violation: self.last_violation.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            sessions: self.sessions.load(Ordering::Relaxed),
            copy_retries: self.copy_retries.load(Ordering::Relaxed),
            groups_persisted: self.groups_persisted.load(Ordering::Relaxed),
            reclaims: self.reclaims.load(Ordering::Relaxed),
            uptime_s: self.started.elapsed().as_secs_f64(),
        }
    }
}
