//! Automatic fail-over under the etcd coordinator: the mirror named in the roles watches the
//! primary's lease and, once it has expired, takes over (see `coord.rs`).
//!
//! A node is the mirror by name: the daemon that serves the primary's session in the roles'
//! epoch writes its `[cluster] node` name into the roles, and only the node of that name takes
//! over. A node without a name can never tell; it says so when it starts and whenever a lease
//! expires, as does every node when a lease expires while the roles name no mirror.

use super::Shared;
use mojim::coord::{Coordinator, Roles};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a promotion waits for this node's backups to catch up.
const DRAIN: Duration = Duration::from_secs(2);

/// Runs until shutdown: registers this node, names it the mirror when it serves the primary,
/// then watches the lease.
pub(crate) fn watch(s: &Shared, settings: &mojim::config::EtcdSettings) {
    let coord = match Coordinator::new(settings) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot use the coordinator; automatic fail-over is off");
            return;
        }
    };
    let addr = s.stats.listen_addr();
    let node = (!s.opts.node.is_empty()).then(|| s.opts.node.clone());
    if node.is_none() {
        tracing::error!(
            listen = %addr,
            "coordinator = \"etcd\" but this node has no name: it cannot tell whether the roles in etcd \
             name it as the mirror, so it will never take over from a lost primary; give every node a \
             name with [cluster] node or --node"
        );
    }
    let mut registered = node.is_none();
    // The epoch in which a primary was seen holding the lease: only its expiry is a failure.
    let mut seen_leader: Option<u64> = None;
    // The epoch whose expired lease this node already said it cannot act on.
    let mut said: Option<u64> = None;
    let poll = (settings.lease_renew / 2).max(Duration::from_millis(20));
    while !s.shutdown.load(Ordering::SeqCst) {
        std::thread::sleep(poll);
        if let (false, Some(node)) = (registered, &node) {
            registered = coord.register(node, &addr).is_ok();
        }
        let (roles, revision) = match coord.roles() {
            Ok(Some(r)) => r,
            Ok(None) => {
                s.coord.roles(0, false);
                continue;
            }
            Err(e) => {
                s.coord.unreachable();
                tracing::debug!(error = %e, "coordinator unreachable");
                continue;
            }
        };
        s.coord.roles(roles.epoch, node.as_deref().is_some_and(|n| roles.mirror == n));
        if let Some(node) = &node {
            if roles.by_takeover
                && roles.primary == *node
                && roles.epoch >= s.session.epoch()
                && !s.data.is_primary()
            {
                // This node claimed the roles but stopped before its promotion finished: finish it.
                finish_promotion(s, &roles);
                continue;
            }
            if roles.mirror != *node && s.session.primary_epoch() == roles.epoch && !s.data.is_primary() {
                name_as_mirror(&coord, node, &roles, revision);
                continue;
            }
        }
        let leader = coord.leader();
        match &leader {
            Ok(l) => s.coord.lease(l.as_ref().is_some_and(|l| l.epoch == roles.epoch)),
            Err(_) => s.coord.unreachable(),
        }
        match leader {
            Ok(Some(l)) if l.epoch == roles.epoch => seen_leader = Some(roles.epoch),
            Ok(Some(_)) => {}
            Ok(None) if seen_leader == Some(roles.epoch) => match &node {
                Some(node) if roles.mirror == *node => take_over(s, &coord, node, &roles, revision),
                _ if said == Some(roles.epoch) => {}
                _ => {
                    said = Some(roles.epoch);
                    cannot_take_over(s, node.as_deref(), &roles);
                }
            },
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "coordinator unreachable"),
        }
    }
}

/// This node serves the primary of the roles' epoch: it is that epoch's mirror, whatever
/// address the primary used to reach it. Records its name in the roles.
fn name_as_mirror(coord: &Coordinator, node: &str, roles: &Roles, revision: i64) {
    let named = Roles { mirror: node.to_string(), ..roles.clone() };
    match coord.swap_roles(&named, revision) {
        Ok(true) if roles.mirror.is_empty() => {
            tracing::info!(epoch = roles.epoch, node, "named this node the mirror in etcd")
        }
        Ok(true) => tracing::warn!(
            epoch = roles.epoch,
            node,
            was = %roles.mirror,
            "the primary replicates to this node: named it the mirror in etcd instead"
        ),
        // The roles changed meanwhile: the next poll looks again.
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "cannot record this node as the mirror in etcd"),
    }
}

/// Says, once per epoch, why this node does not take over from a primary whose lease expired.
fn cannot_take_over(s: &Shared, node: Option<&str>, roles: &Roles) {
    let served = s.session.primary_epoch() == roles.epoch;
    match node {
        None if served => tracing::error!(
            epoch = roles.epoch,
            old_primary = %roles.primary,
            "the primary's lease expired and this node was its mirror, but it has no name ([cluster] node \
             or --node), so it was never named the mirror in etcd: nobody takes over; promote it by \
             hand (mojim promote) or restart it with a name"
        ),
        None => tracing::error!(
            epoch = roles.epoch,
            mirror = %roles.mirror,
            "the primary's lease expired; this node has no name ([cluster] node or --node), so it cannot \
             tell whether it is the mirror the roles name: it does not take over"
        ),
        Some(_) if roles.mirror.is_empty() => tracing::error!(
            epoch = roles.epoch,
            old_primary = %roles.primary,
            mirror_addr = %roles.mirror_addr,
            "the primary's lease expired, but no mirror was named in etcd for this epoch (the daemon at \
             mirror_addr names itself once the primary's session reaches it, and only if it has a name): \
             nobody takes over; promote the mirror by hand (mojim promote)"
        ),
        Some(_) => {
            tracing::debug!(epoch = roles.epoch, mirror = %roles.mirror, "the primary's lease expired")
        }
    }
}

fn finish_promotion(s: &Shared, roles: &Roles) {
    match super::operator_commands::promote_to(s, roles.epoch, DRAIN, true) {
        Ok(reply) => tracing::warn!(%reply, "finished a promotion claimed before a restart"),
        Err(e) => tracing::error!(error = %e, "this node holds the primary's roles but cannot be promoted"),
    }
}

/// Claims the next epoch in etcd (so no other node can), then promotes this node's copy.
fn take_over(s: &Shared, coord: &Coordinator, node: &str, roles: &Roles, revision: i64) {
    // Only a copy that can be promoted may claim the roles.
    if !s.data.consistent() {
        tracing::error!("the primary's lease expired but this copy is inconsistent (a copy into it is unfinished): not taking over");
        return;
    }
    // The backup names itself the mirror once the new primary's application connects to it.
    let next = s.opts.backups.first().cloned().unwrap_or_default();
    let new = Roles {
        epoch: roles.epoch + 1,
        primary: node.to_string(),
        mirror: String::new(),
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
        "the primary's lease is gone (expired, or given up): taking over"
    );
    match super::operator_commands::promote(s, new.epoch, DRAIN) {
        Ok(reply) => {
            tracing::warn!(%reply, "promoted by the coordinator: start the application on this node")
        }
        Err(e) => {
            tracing::error!(error = %e, "the coordinator made this node primary but it cannot be promoted")
        }
    }
}
