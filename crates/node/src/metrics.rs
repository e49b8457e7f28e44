//! `mojim serve`'s Prometheus metrics, `/healthz` and `/readyz`: its status
//! ([`MirrorStatus`]), rendered when a scrape asks for it, so that serving metrics adds
//! nothing to the node's own paths. docs/METRICS.md lists each metric and the status field it
//! is.

use crate::{MirrorStatus, StatusSource};
use mojim_metrics::{Exposition, Kind, Pages};

/// The listener's pages for a serving mirror.
pub fn pages(source: StatusSource) -> Pages {
    let (m, h, r) = (source.clone(), source.clone(), source);
    Pages {
        metrics: Box::new(move || render(&m.status())),
        health: Box::new(move || match h.serving() {
            true => Ok(()),
            false => Err("the node is stopping".into()),
        }),
        // The page's body says why not: the reason becomes text here.
        ready: Box::new(move || ready(&r.status()).map_err(|e| e.to_string())),
    }
}

/// Whether a load balancer may send this node what a mirror takes: its data area is
/// consistent, has not failed, and the node has not been promoted. Else why not.
pub fn ready(st: &MirrorStatus) -> Result<(), NotReady> {
    if let Some(why) = &st.storage_failed {
        return Err(NotReady::StorageFailed(why.clone()));
    }
    if !st.consistent {
        let progress = st.copy.as_ref().map(|c| (c.received_bytes, c.total_bytes));
        return Err(NotReady::Inconsistent { progress });
    }
    if st.role == "primary" {
        return Err(NotReady::Promoted { epoch: st.epoch });
    }
    Ok(())
}

/// Why a mirror is not ready for sessions: its own storage's state, or an operator's promotion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// The data area failed (this node's storage) and takes no more checkpoints: why.
    StorageFailed(String),
    /// A copy into the data area is unfinished: `(received, total)` bytes, when one is running.
    Inconsistent {
        /// Bytes of the copy received so far and in all.
        progress: Option<(u64, u64)>,
    },
    /// The node was promoted (by an operator or the coordinator): it refuses sessions.
    Promoted {
        /// The epoch it was promoted at.
        epoch: u64,
    },
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReady::StorageFailed(why) => {
                write!(f, "the data area failed and takes no more checkpoints: {why}")
            }
            NotReady::Inconsistent { progress } => {
                f.write_str("the data area is inconsistent: a copy into it is unfinished")?;
                match progress {
                    Some((received, total)) => write!(f, " ({received} of {total} bytes received)"),
                    None => Ok(()),
                }
            }
            NotReady::Promoted { epoch } => write!(
                f,
                "promoted at epoch {epoch}: the data area is the primary's region, and this node refuses \
                 sessions"
            ),
        }
    }
}

impl std::error::Error for NotReady {}

/// The metrics page for `st`.
pub fn render(st: &MirrorStatus) -> String {
    use Kind::{Counter, Gauge};
    let mut e = Exposition::new();
    e.family("mojim_node_role", Gauge, "The node's role: 1 for the role it has (status: role).");
    for role in ["mirror", "backup", "primary"] {
        e.sample(&[("role", role)], st.role == role);
    }
    e.single("mojim_node_epoch", Gauge, "The epoch this node is at (status: epoch).", st.epoch);
    e.single(
        "mojim_region_size_bytes",
        Gauge,
        "Bytes in the region's data area (status: region_size).",
        st.region_size,
    );
    e.single(
        "mojim_uptime_seconds",
        Gauge,
        "Seconds since the node started (status: uptime_s).",
        st.uptime_s,
    );

    e.single(
        "mojim_data_area_consistent",
        Gauge,
        "1 when the data area is consistent; 0 while a copy into it is unfinished (status: consistent).",
        st.consistent,
    );
    e.single(
        "mojim_data_area_failed",
        Gauge,
        "1 when the data area failed and takes no more checkpoints (status: storage_failed).",
        st.storage_failed.is_some(),
    );
    e.family(
        "mojim_data_area_persistence",
        Gauge,
        "How the data area persists: 1 for its way (status: data_persistence).",
    );
    e.sample(&[("persistence", &st.data_persistence)], 1u64);

    e.single(
        "mojim_session_active",
        Gauge,
        "1 while a primary or mirror has a session here (status: session).",
        st.session.is_some(),
    );
    e.single(
        "mojim_session_lanes",
        Gauge,
        "Lanes of the current session (status: session_lanes).",
        st.session_lanes,
    );
    e.single(
        "mojim_sessions_total",
        Counter,
        "Sessions begun since the node started (status: sessions).",
        st.sessions,
    );

    e.family("mojim_lane_log_capacity_bytes", Gauge, "Bytes of a lane's log (status: lanes[].log_capacity).");
    for l in &st.lanes {
        e.sample(&[("lane", &l.lane.to_string())], l.log_capacity);
    }
    e.family("mojim_lane_log_used_bytes", Gauge, "Bytes of a lane's log in use (status: lanes[].log_used).");
    for l in &st.lanes {
        e.sample(&[("lane", &l.lane.to_string())], l.log_used);
    }
    e.family(
        "mojim_lane_log_fill_ratio",
        Gauge,
        "A lane's log in use, 0 to 1 (status: lanes[].log_used / log_capacity).",
    );
    for l in &st.lanes {
        e.sample(&[("lane", &l.lane.to_string())], l.log_used as f64 / l.log_capacity.max(1) as f64);
    }

    e.single(
        "mojim_received_groups_total",
        Counter,
        "Groups received whole since the node started (status: groups_received).",
        st.groups_received,
    );
    e.single(
        "mojim_received_bytes_total",
        Counter,
        "Bytes of frame bodies received since the node started (status: bytes_received).",
        st.bytes_received,
    );
    e.single(
        "mojim_last_received_sequence",
        Gauge,
        "The highest group sequence number received (status: last_received_seq).",
        st.last_received_seq,
    );
    e.single(
        "mojim_applied_sequence",
        Gauge,
        "The sequence number up to which every group is applied to the data area (status: applied_seq).",
        st.applied_seq,
    );
    e.single(
        "mojim_persisted_groups_total",
        Counter,
        "Applied groups made persistent in the data area since the node started (status: groups_persisted).",
        st.groups_persisted,
    );
    e.single(
        "mojim_reclaims_total",
        Counter,
        "Reclaim passes since the node started (status: reclaims).",
        st.reclaims,
    );
    e.single(
        "mojim_checkpoint_lag_groups",
        Gauge,
        "Groups received but not yet applied to the data area (status: lag_groups).",
        st.lag_groups,
    );
    e.single(
        "mojim_checkpoint_lag_bytes",
        Gauge,
        "Bytes of groups received but not yet applied to the data area (status: lag_bytes).",
        st.lag_bytes,
    );

    e.single(
        "mojim_protocol_violations_total",
        Counter,
        "Peers refused and lanes closed for breaking the protocol (status: violations).",
        st.violations,
    );
    e.family(
        "mojim_refused_handshakes_total",
        Counter,
        "Connections refused at their handshake and lanes refused as they joined a session, by reason \
         (status: refused_handshakes).",
    );
    for (reason, n) in &st.refused_handshakes {
        e.sample(&[("reason", reason)], *n);
    }

    let copy = st.copy.as_ref();
    e.single(
        "mojim_copy_in_progress",
        Gauge,
        "1 while a full copy into this node runs (status: copy).",
        copy.is_some(),
    );
    e.single(
        "mojim_copy_size_bytes",
        Gauge,
        "Bytes of the full copy into this node, 0 when none runs (status: copy.total_bytes).",
        copy.map_or(0, |c| c.total_bytes),
    );
    e.single(
        "mojim_copy_received_bytes",
        Gauge,
        "Bytes of the full copy into this node received so far (status: copy.received_bytes).",
        copy.map_or(0, |c| c.received_bytes),
    );
    e.single(
        "mojim_copy_elapsed_seconds",
        Gauge,
        "Seconds the full copy into this node has run (status: copy.seconds).",
        copy.map_or(0.0, |c| c.seconds),
    );
    e.single(
        "mojim_copy_retries_total",
        Counter,
        "Copy frames that failed their check and were asked for again (status: copy_retries).",
        st.copy_retries,
    );

    let backups = |e: &mut Exposition,
                   name: &str,
                   help: &str,
                   value: &dyn Fn(&crate::BackupStatus) -> mojim_metrics::Value| {
        e.family(name, Gauge, help);
        for b in &st.backups {
            e.sample(&[("backup", &b.addr)], value(b));
        }
    };
    backups(
        &mut e,
        "mojim_backup_connected",
        "1 while the link to a backup is up (status: backups[].connected).",
        &|b| b.connected.into(),
    );
    backups(
        &mut e,
        "mojim_backup_acked_sequence",
        "The highest sequence number a backup acknowledged (status: backups[].acked_seq).",
        &|b| b.acked_seq.into(),
    );
    backups(
        &mut e,
        "mojim_backup_lag_groups",
        "Groups applied here that a backup has not acknowledged (status: backups[].lag_groups).",
        &|b| b.lag_groups.into(),
    );
    backups(
        &mut e,
        "mojim_backup_lag_bytes",
        "Bytes of groups applied here that a backup has not acknowledged (status: backups[].lag_bytes).",
        &|b| b.lag_bytes.into(),
    );
    backups(
        &mut e,
        "mojim_backup_lag_seconds",
        "Seconds since the oldest group applied here that a backup has not acknowledged was applied, 0 when \
         there is none (status: backups[].lag_seconds).",
        &|b| b.lag_seconds.into(),
    );
    backups(
        &mut e,
        "mojim_backup_needs_copy",
        "1 while a backup waits for a full copy (status: backups[].needs_copy).",
        &|b| b.needs_copy.into(),
    );
    backups(
        &mut e,
        "mojim_backup_copy_in_progress",
        "1 while a full copy to a backup is not yet confirmed (status: backups[].copying).",
        &|b| b.copying.into(),
    );
    backups(
        &mut e,
        "mojim_backup_copy_sent_bytes",
        "Bytes of the full copy to a backup sent (status: backups[].copy_sent).",
        &|b| b.copy_sent.into(),
    );
    backups(
        &mut e,
        "mojim_backup_copy_size_bytes",
        "Bytes of the full copy to a backup, 0 when none ran (status: backups[].copy_total).",
        &|b| b.copy_total.into(),
    );
    e.single(
        "mojim_forward_threshold_bytes",
        Gauge,
        "Bytes a backup may lag before lanes wait for forwarding ([mirror] secondary_tier_thresh; status: \
         secondary_tier_thresh).",
        st.secondary_tier_thresh,
    );
    e.single(
        "mojim_forward_stalls_total",
        Counter,
        "Times lanes waited for forwarding to the backups to catch up (status: stalls).",
        st.stalls,
    );
    e.single(
        "mojim_forward_stalled_seconds_total",
        Counter,
        "Seconds lanes waited for forwarding to the backups to catch up (status: stalled_ms / 1000).",
        st.stalled_ms / 1000.0,
    );

    // The coordinator's families are always named (a dashboard's queries find them); their
    // samples exist only under etcd.
    let c = st.coordinator.as_ref();
    e.single_or_none(
        "mojim_etcd_reachable",
        Gauge,
        "1 when etcd answered the node's last poll (status: coordinator.reachable).",
        c.map(|c| c.reachable),
    );
    e.single_or_none(
        "mojim_etcd_since_contact_seconds",
        Gauge,
        "Seconds since etcd last answered the node (status: coordinator.since_contact_s).",
        c.map(|c| c.since_contact_s),
    );
    e.single_or_none(
        "mojim_etcd_primary_lease_held",
        Gauge,
        "1 when the primary of the roles' epoch held its lease at the last poll (status: \
         coordinator.primary_lease_held).",
        c.map(|c| c.primary_lease_held),
    );
    e.single_or_none(
        "mojim_etcd_roles_epoch",
        Gauge,
        "The epoch of the roles in etcd at the last poll (status: coordinator.roles_epoch).",
        c.map(|c| c.roles_epoch),
    );
    e.single_or_none(
        "mojim_etcd_named_mirror",
        Gauge,
        "1 when the roles in etcd name this node the mirror, the one that takes over (status: \
         coordinator.named_mirror).",
        c.map(|c| c.named_mirror),
    );

    let r = &st.recovery;
    e.single(
        "mojim_recovery_applied_groups",
        Gauge,
        "Groups restart recovery applied when the node started (status: recovery.groups_applied).",
        r.groups_applied,
    );
    e.single(
        "mojim_recovery_discarded_groups",
        Gauge,
        "Incomplete groups restart recovery discarded when the node started (status: recovery.groups_discarded).",
        r.groups_discarded,
    );
    e.single(
        "mojim_recovery_duration_seconds",
        Gauge,
        "Seconds restart recovery took (status: recovery.micros / 1e6).",
        r.micros as f64 / 1e6,
    );
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(extra: serde_json::Value) -> MirrorStatus {
        let mut v = serde_json::json!({
            "role": "mirror", "listen": "127.0.0.1:7420", "region_uuid": "u", "region_size": 4096,
            "epoch": 3, "generation": "0x1", "prev_generation": "0x0", "consistent": true,
            "session": null, "primary": null, "session_lanes": 0,
            "lanes": [{"lane": 0, "log_capacity": 65536, "log_used": 16384}],
            "last_received_seq": 9, "applied_seq": 9, "lag_groups": 0, "lag_bytes": 0,
            "groups_received": 9, "bytes_received": 900, "violations": 1, "sessions": 1,
            "data_persistence": "memory", "storage_failed": null, "recovery": {
                "groups_applied": 0, "groups_discarded": 0, "bytes_applied": 0, "applied_seq": 0, "micros": 1500
            },
            "backups": [{"addr": "b\"1:7420", "connected": true, "acked_seq": 7, "lag_groups": 2, "lag_bytes": 200,
                "lag_seconds": 1.5, "error": null, "needs_copy": false}],
            "stalls": 0, "stalled_ms": 2.5, "uptime_s": 1.0, "secondary_tier_thresh": 41943040,
            "refused_handshakes": {"secret": 2, "tls": 0},
            "coordinator": {"reachable": true, "since_contact_s": 0.5, "primary_lease_held": true,
                "roles_epoch": 3, "named_mirror": false}
        });
        for (k, x) in extra.as_object().expect("an object") {
            v[k] = x.clone();
        }
        serde_json::from_value(v).expect("a status")
    }

    #[test]
    fn every_family_has_help_and_type_and_the_labels_are_escaped() {
        let page = render(&status(serde_json::json!({})));
        for line in [
            "mojim_node_role{role=\"mirror\"} 1",
            "mojim_node_epoch 3",
            "mojim_lane_log_fill_ratio{lane=\"0\"} 0.25",
            "mojim_received_groups_total 9",
            "mojim_protocol_violations_total 1",
            "mojim_backup_lag_groups{backup=\"b\\\"1:7420\"} 2",
            "mojim_backup_lag_seconds{backup=\"b\\\"1:7420\"} 1.5",
            "mojim_forward_stalled_seconds_total 0.0025",
            "mojim_recovery_duration_seconds 0.0015",
            "mojim_refused_handshakes_total{reason=\"secret\"} 2",
            "mojim_forward_threshold_bytes 41943040",
            "mojim_etcd_primary_lease_held 1",
            "mojim_etcd_named_mirror 0",
        ] {
            assert!(page.lines().any(|l| l == line), "{line:?} not in\n{page}");
        }
        let families: Vec<&str> = page.lines().filter_map(|l| l.strip_prefix("# TYPE ")).collect();
        for f in &families {
            let name = f.split(' ').next().unwrap();
            assert!(page.contains(&format!("# HELP {name} ")), "{name} has no HELP");
        }
        assert_eq!(families.len(), page.lines().filter(|l| l.starts_with("# HELP ")).count());
        let without = render(&status(serde_json::json!({"coordinator": null})));
        let etcd_samples = without.lines().filter(|l| l.starts_with("mojim_etcd_")).count();
        assert_eq!(etcd_samples, 0, "no coordinator, no etcd samples:\n{without}");
        assert!(without.contains("# TYPE mojim_etcd_reachable gauge"), "{without}");
    }

    #[test]
    fn readiness_needs_a_consistent_unfailed_unpromoted_data_area() {
        assert_eq!(ready(&status(serde_json::json!({}))), Ok(()));
        let copying = status(serde_json::json!({"consistent": false, "copy": {
            "total_bytes": 4096, "received_bytes": 1024, "remaining_bytes": 3072, "seconds": 1.0, "mb_per_s": 0.0
        }}));
        assert_eq!(ready(&copying), Err(NotReady::Inconsistent { progress: Some((1024, 4096)) }));
        assert_eq!(
            ready(&copying).unwrap_err().to_string(),
            "the data area is inconsistent: a copy into it is unfinished (1024 of 4096 bytes received)"
        );
        let failed = status(serde_json::json!({"storage_failed": "fdatasync: EIO"}));
        assert!(ready(&failed).unwrap_err().to_string().contains("fdatasync: EIO"));
        let promoted = status(serde_json::json!({"role": "primary"}));
        assert_eq!(ready(&promoted), Err(NotReady::Promoted { epoch: 3 }));
        assert!(ready(&promoted).unwrap_err().to_string().starts_with("promoted at epoch 3"));
    }
}
