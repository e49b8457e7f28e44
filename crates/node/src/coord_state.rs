//! What the node last saw of the etcd coordinator, for `mojim status` and the metrics: whether
//! etcd answered, whether the primary of the roles' epoch held its lease, and whether the roles
//! name this node the mirror. Written by the takeover watcher at each poll, read at status time;
//! atomics only, so a status never waits for etcd.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The coordinator as the node saw it at its last poll.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoordinatorStatus {
    /// etcd answered the last poll.
    pub reachable: bool,
    /// Seconds since etcd last answered (the node's uptime if it never did).
    pub since_contact_s: f64,
    /// A primary held the lease of the roles' epoch at the last poll that reached etcd.
    pub primary_lease_held: bool,
    /// The roles' epoch at the last poll that reached etcd (0: none seen yet).
    pub roles_epoch: u64,
    /// The roles name this node the mirror (it is the one that takes over).
    pub named_mirror: bool,
}

pub(crate) struct CoordState {
    started: Instant,
    reachable: AtomicBool,
    /// Microseconds after `started` of etcd's last answer, plus one (0: never).
    contact_us: AtomicU64,
    lease_held: AtomicBool,
    roles_epoch: AtomicU64,
    named_mirror: AtomicBool,
}

impl CoordState {
    pub fn new() -> CoordState {
        CoordState {
            started: Instant::now(),
            reachable: AtomicBool::new(false),
            contact_us: AtomicU64::new(0),
            lease_held: AtomicBool::new(false),
            roles_epoch: AtomicU64::new(0),
            named_mirror: AtomicBool::new(false),
        }
    }

    /// A poll could not reach etcd.
    pub fn unreachable(&self) {
        self.reachable.store(false, Ordering::Relaxed);
    }

    /// etcd answered with roles of `epoch`, naming this node the mirror or not.
    pub fn roles(&self, epoch: u64, named_mirror: bool) {
        self.contact();
        self.roles_epoch.store(epoch, Ordering::Relaxed);
        self.named_mirror.store(named_mirror, Ordering::Relaxed);
    }

    /// etcd answered whether the roles' primary holds its lease.
    pub fn lease(&self, held: bool) {
        self.contact();
        self.lease_held.store(held, Ordering::Relaxed);
    }

    fn contact(&self) {
        self.reachable.store(true, Ordering::Relaxed);
        self.contact_us.store(self.started.elapsed().as_micros() as u64 + 1, Ordering::Relaxed);
    }

    pub fn status(&self) -> CoordinatorStatus {
        let now = self.started.elapsed().as_micros() as u64;
        let contact = self.contact_us.load(Ordering::Relaxed);
        CoordinatorStatus {
            reachable: self.reachable.load(Ordering::Relaxed),
            since_contact_s: now.saturating_sub(contact.saturating_sub(1)) as f64 / 1e6,
            primary_lease_held: self.lease_held.load(Ordering::Relaxed),
            roles_epoch: self.roles_epoch.load(Ordering::Relaxed),
            named_mirror: self.named_mirror.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_polls() {
        let c = CoordState::new();
        let st = c.status();
        assert!(!st.reachable && !st.primary_lease_held && st.roles_epoch == 0);
        c.roles(4, true);
        c.lease(true);
        let st = c.status();
        assert!(st.reachable && st.primary_lease_held && st.named_mirror, "{st:?}");
        assert_eq!(st.roles_epoch, 4);
        assert!(st.since_contact_s < 5.0, "{st:?}");
        c.unreachable();
        let st = c.status();
        assert!(!st.reachable, "{st:?}");
        assert!(st.primary_lease_held, "the last answer is kept: {st:?}");
        c.lease(false);
        assert!(!c.status().primary_lease_held);
    }
}
