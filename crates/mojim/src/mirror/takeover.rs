//! Automatic fail-over under the etcd coordinator: the mirror named in the roles watches the
//! primary's lease and, once it has expired, takes over (see `coord.rs`).

use super::Shared;
use crate::coord::{Coordinator, Roles};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a promotion waits for this node's backups to catch up.
const DRAIN: Duration = Duration::from_secs(2);

/// Runs until shutdown: registers this node, then watches the lease.
pub(crate) fn watch(s: &Shared, settings: &crate::config::EtcdSettings) {
    let coord = match Coordinator::new(settings) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot use the coordinator; automatic fail-over is off");
            return;
        }
    };
    let addr = s.listen_addr.get().cloned().unwrap_or_default();
    let node = if s.opts.node.is_empty() { addr.clone() } else { s.opts.node.clone() };
    let mut registered = false;
    // The epoch in which a primary was seen holding the lease: only its expiry is a failure.
    let mut seen_leader: Option<u64> = None;
    let poll = (settings.lease_renew / 2).max(Duration::from_millis(20));
    while !s.shutdown.load(Ordering::SeqCst) {
        std::thread::sleep(poll);
        if !registered {
            registered = coord.register(&node, &addr).is_ok();
        }
        let (roles, revision) = match coord.roles() {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(error = %e, "coordinator unreachable");
                continue;
            }
        };
        if roles.by_takeover
            && roles.primary == node
            && roles.epoch >= s.epoch.load(Ordering::SeqCst)
            && !is_primary(s)
        {
            // This node claimed the roles but stopped before its promotion finished: finish it.
            finish_promotion(s, &roles);
            continue;
        }
        if roles.mirror_addr != addr {
            continue;
        }
        match coord.leader() {
            Ok(Some(l)) if l.epoch == roles.epoch => seen_leader = Some(roles.epoch),
            Ok(Some(_)) => {}
            Ok(None) if seen_leader == Some(roles.epoch) => take_over(s, &coord, &node, &roles, revision),
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "coordinator unreachable"),
        }
    }
}

fn is_primary(s: &Shared) -> bool {
    s.region.copy_state().is_ok_and(|(f, _)| f & mojim_format::region::FLAG_PRIMARY != 0)
}

fn finish_promotion(s: &Shared, roles: &Roles) {
    match super::command::promote_to(s, roles.epoch, DRAIN, true) {
        Ok(reply) => tracing::warn!(%reply, "finished a promotion claimed before a restart"),
        Err(e) => tracing::error!(error = %e, "this node holds the primary's roles but cannot be promoted"),
    }
}

/// Claims the next epoch in etcd (so no other node can), then promotes this node's copy.
fn take_over(s: &Shared, coord: &Coordinator, node: &str, roles: &Roles, revision: i64) {
    // Only a copy that can be promoted may claim the roles.
    if !super::session::consistent(s) {
        tracing::error!("the primary's lease expired but this copy is inconsistent (a copy into it is unfinished): not taking over");
        return;
    }
    let next = s.opts.backups.first().cloned().unwrap_or_default();
    let new = Roles {
        epoch: roles.epoch + 1,
        primary: node.to_string(),
        mirror: next.clone(),
        mirror_addr: next,
        by_takeover: true,
    };
    match coord.swap_roles_leaderless(&new, revision) {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot claim the next epoch");
            return;
        }
    }
    tracing::warn!(
        old_primary = %roles.primary,
        epoch = new.epoch,
        mirror = %new.mirror_addr,
        "the primary's lease expired: taking over"
    );
    match super::command::promote(s, new.epoch, DRAIN) {
        Ok(reply) => {
            tracing::warn!(%reply, "promoted by the coordinator: start the application on this node")
        }
        Err(e) => {
            tracing::error!(error = %e, "the coordinator made this node primary but it cannot be promoted")
        }
    }
}
