//! Fail-over of one shard. The region's own fail-over does the hard part: when a primary's
//! lease in etcd expires, the mirror the roles name claims the next epoch and promotes its copy
//! (`mojim serve`, `mojim_node::takeover`). What is left for the cluster:
//!
//! - a `mojim kv --cluster` that opened its region as primary (so it holds the region's lease
//!   in the roles' epoch) while the topology names another node of its shard as the primary
//!   takes the shard: one compare-and-swap sets `primary` to it and bumps the shard's
//!   `config_epoch` ([`take_shard`], [`claim_shard`]), before it serves a client. Clients
//!   still sent to the old node find it gone and ask again (redis-py's `RedisCluster` reloads
//!   `CLUSTER SLOTS`); the others are redirected here by `MOVED`.
//! - a standby `mojim kv --cluster --standby` on a mirror's node waits, watching the roles key
//!   in etcd, until the roles name its node the primary and the node's `mojim serve` has
//!   finished promoting the copy ([`await_promotion`]); then it opens that copy and takes the
//!   shard as above. No operator is needed. A stop signal ends the wait at once
//!   ([`Waited::Stopped`]); a region path no promoted copy can ever be at is refused before it
//!   ([`check_standby_region`]).
//!
//! An old primary restarted after the take-over is refused when it opens its region (the roles
//! name another node), so it never reaches the topology.

use super::store::{ClusterStoreError, TopologyStore};
use super::topology::Topology;
use super::view::ClusterView;
use crate::error::KvError;
use mojim::coord::Roles;
use mojim_etcd::{Client, EtcdError, Scope, WatchEvent};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// How often a standby whose roles name it looks at its copy for the end of the promotion.
const PROMOTION_POLL: Duration = Duration::from_millis(50);
/// A standby reads the roles again at least this often, even without a watch event (a watch
/// created "from now on" while the roles key was absent may miss the first write).
const ROLES_BACKSTOP: Duration = Duration::from_secs(5);
/// How often a standby tries again to read the roles while etcd is away.
const ROLES_RETRY: Duration = Duration::from_millis(250);

/// Makes `node` the primary of the shard that lists it: `primary` set to it and the shard's
/// `config_epoch` one more. Returns whether anything changed (not when it is the primary
/// already), `None` when no shard lists `node`. The caller bumps the topology's epoch.
pub fn take_shard(t: &mut Topology, node: &str) -> Option<bool> {
    let shard = t.shards.iter_mut().find(|s| s.nodes.iter().any(|n| n.name == node))?;
    if shard.primary == node {
        return Some(false);
    }
    shard.primary = node.to_owned();
    shard.config_epoch += 1;
    Some(true)
}

/// What [`claim_shard`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The topology named this node the shard's primary already; nothing was written.
    Already,
    /// It named `from`; now this node, at the topology's `epoch` and the shard's
    /// `config_epoch`.
    Taken {
        /// The shard's id.
        shard: String,
        /// The node the topology named before.
        from: String,
        /// The topology's epoch written.
        epoch: u64,
        /// The shard's configuration epoch written.
        config_epoch: u64,
    },
}

/// Why a change of [`claim_shard`] stopped before writing.
enum Stop {
    /// The node is the primary already.
    Already,
    Store(ClusterStoreError),
}

impl From<ClusterStoreError> for Stop {
    fn from(e: ClusterStoreError) -> Stop {
        Stop::Store(e)
    }
}

/// Makes `view`'s node the primary of its shard in the topology in etcd (one compare-and-swap,
/// made again on the new value if another writer got there first), and hands the result to
/// `view` at once, so that the server serves its slots from its first command. Call it only
/// while holding the region's primary lease (after `Primary::open` under the etcd
/// coordinator): a node the roles do not name never gets this far. With `lease_key`, the
/// region's leader key and its create revision read while holding the lease, the write is also
/// conditional on that key still being the same one in etcd: a primary whose lease expired
/// meanwhile gets [`ClusterStoreError::Fenced`] and writes nothing.
pub fn claim_shard(
    store: &TopologyStore,
    view: &ClusterView,
    lease_key: Option<(&str, i64)>,
) -> Result<Claim, ClusterStoreError> {
    let me = view.me();
    let mut from = String::new();
    let change = |t: &mut Topology| -> Result<(), Stop> {
        let shard = t.shards.iter().find(|s| s.nodes.iter().any(|n| n.name == me));
        from = shard.map(|s| s.primary.clone()).unwrap_or_default();
        match take_shard(t, me) {
            Some(true) => Ok(()),
            Some(false) => Err(Stop::Already),
            None => Err(Stop::Store(ClusterStoreError::NotInTopology {
                key: store.key().to_owned(),
                node: me.to_owned(),
                epoch: t.epoch,
            })),
        }
    };
    let written = match lease_key {
        None => store.update(change),
        Some((key, created)) => store.update_while(key, created, change),
    };
    match written {
        Ok(t) => {
            let shard = t.shards.iter().find(|s| s.primary == me).expect("take_shard made this node primary");
            let claim = Claim::Taken {
                shard: shard.id.clone(),
                from,
                epoch: t.epoch,
                config_epoch: shard.config_epoch,
            };
            view.set(t);
            Ok(claim)
        }
        Err(Stop::Already) => {
            // The view may hold an older topology than the one just read.
            if let Some((t, _)) = store.read()? {
                if t.epoch > view.current().epoch {
                    view.set(t);
                }
            }
            Ok(Claim::Already)
        }
        Err(Stop::Store(e)) => Err(e),
    }
}

/// What a `mojim kv --cluster` does once its region is open as primary and before it serves:
/// takes its shard in the topology if another node holds it there (logged), and only while
/// `primary` holds the region's lease in etcd: the write is conditional on the region's leader
/// key (`<etcd_prefix>/leader`, `[cluster] etcd_prefix`) being the one held with this
/// primary's lease.
pub fn take_over_shard(
    primary: &mojim::Primary,
    etcd_prefix: &str,
    store: &TopologyStore,
    view: &ClusterView,
) -> Result<(), KvError> {
    let lease = primary.status().lease;
    let lease_id = match lease.as_ref().map(|l| (&l.lost, l.valid_ms, l.id)) {
        Some((None, valid_ms, id)) if valid_ms > 0 => id,
        Some((Some(why), _, _)) => {
            return Err(KvError::Replaced(format!(
                "the region's lease in etcd was lost before serving ({why})"
            )))
        }
        _ => {
            return Err(KvError::Config(
                "cluster mode takes its shard only as the holder of the region's lease in etcd: set \
                 [cluster] coordinator = \"etcd\""
                    .into(),
            ))
        }
    };
    let leader_key = format!("{etcd_prefix}/leader");
    let held = store.client().get(&leader_key).map_err(ClusterStoreError::from)?;
    let created = match held {
        Some(kv) if kv.lease == lease_id => kv.create_revision,
        _ => return Err(ClusterStoreError::Fenced { held: leader_key }.into()),
    };
    match claim_shard(store, view, Some((&leader_key, created)))? {
        Claim::Already => {
            tracing::info!(node = view.me(), "the topology names this node its shard's primary")
        }
        Claim::Taken { shard, from, epoch, config_epoch } => tracing::warn!(
            shard = %shard,
            from = %from,
            epoch,
            config_epoch,
            "took over the shard in the cluster topology: {} is its primary now (was {from})",
            view.me()
        ),
    }
    Ok(())
}

/// Why the roles could not be read: etcd is away for now (unreachable, or without a leader),
/// which a standby waits out, or for good.
enum RolesUnread {
    Away(mojim_etcd::EtcdError),
    Failed(KvError),
}

/// The roles in etcd, or `None` when none are written yet; `Err` says why they cannot be read.
fn read_roles(client: &Client, key: &str) -> Result<Option<(Roles, i64)>, RolesUnread> {
    let kv = match client.get(key) {
        Ok(kv) => kv,
        Err(e @ (EtcdError::Unreachable { .. } | EtcdError::Http { status: 503, .. })) => {
            return Err(RolesUnread::Away(e))
        }
        Err(e) => {
            return Err(RolesUnread::Failed(KvError::Config(format!("read the roles at {key} in etcd: {e}"))))
        }
    };
    let Some(kv) = kv else {
        return Ok(None);
    };
    let roles: Roles = serde_json::from_slice(&kv.value).map_err(|e| {
        RolesUnread::Failed(KvError::Config(format!("the roles at {key} in etcd are not valid: {e}")))
    })?;
    Ok(Some((roles, kv.mod_revision)))
}

/// Whether the region file at `path` is a promoted copy (its header's primary flag, set by
/// `mojim serve` as the last step of a promotion).
fn promoted(path: &Path) -> Result<bool, KvError> {
    let region = mojim_region::RegionFile::open(path).map_err(|e| {
        KvError::Config(format!(
            "a standby opens its node's promoted copy, [region] path (or --region) {}: {e}; give the \
             mirror's <dir>/data.mojim",
            path.display()
        ))
    })?;
    let (flags, _) = region.copy_state();
    Ok(flags & mojim_format::region::FLAG_PRIMARY != 0)
}

/// The file name of a mirror's copy in its folder (`mojim serve`'s `<[mirror] dir>/data.mojim`).
pub const MIRROR_DATA_FILE: &str = "data.mojim";

/// Refuses, before a standby waits, a region path at which its node's promoted copy can never
/// be: a copy is always `<the mirror's [mirror] dir>/data.mojim`, so a path of another name (the
/// primary's `[region] path` left as it was, say), a folder, one whose folder does not exist, or
/// a file that is not a region file would be waited for forever. `mirror_data` is where this
/// configuration's own `mojim serve` keeps its copy, given in the fix.
pub fn check_standby_region(region: &Path, mirror_data: &Path) -> Result<(), KvError> {
    let refuse = |why: String| {
        Err(KvError::Config(format!(
            "--standby (or [kv] standby = true) serves its node's promoted copy, and [region] path (or \
             --region) {} {why}: give the mirror's copy, --region {} (<[mirror] dir>/{MIRROR_DATA_FILE} of this \
             node's mojim serve)",
            region.display(),
            mirror_data.display()
        )))
    };
    if region.file_name().is_none_or(|n| n != MIRROR_DATA_FILE) {
        return refuse(format!("is not a mirror's copy, which is always named {MIRROR_DATA_FILE}"));
    }
    let folder = match region.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !folder.is_dir() {
        return refuse(format!(
            "is in {}, which is not a folder (start this node's mojim serve first: it makes its folder)",
            folder.display()
        ));
    }
    match std::fs::metadata(region) {
        Ok(m) if m.is_dir() => refuse("is a folder".into()),
        Ok(_) => match mojim_region::RegionFile::open(region) {
            Ok(_) => Ok(()),
            Err(e) => refuse(format!("is not a region file ({e})")),
        },
        // Not made yet: the mirror makes it when it first serves.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => refuse(format!("cannot be read ({e})")),
    }
}

/// How a standby's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The roles name this node the primary and its copy is promoted: open it and serve.
    Promoted,
    /// A stop signal came first: serve nothing and exit.
    Stopped,
}

/// What wakes a standby.
enum Wake {
    /// The roles key changed (`true`: the watch is reconnecting).
    Roles(bool),
    /// The stop descriptor became readable.
    Stop,
}

/// A standby's wait: returns [`Waited::Promoted`] once the roles under `roles_key` (`[cluster]
/// etcd_prefix`'s `roles`) name `node` the primary and, after a take-over, the copy at `region`
/// is promoted; [`Waited::Stopped`] as soon as `stop` (the stop signals' descriptor, readable
/// at the first) becomes readable. It follows the roles key with an etcd watch (each change
/// read again), not by polling; only the end of the promotion, a local file, is looked at every
/// [`PROMOTION_POLL`].
pub fn await_promotion(
    client: &Client,
    roles_key: &str,
    node: &str,
    region: &Path,
    stop: Option<BorrowedFd<'_>>,
) -> Result<Waited, KvError> {
    let (tx, rx) = mpsc::channel();
    if let Some(stop) = stop {
        // A copy of the descriptor, so that the thread never polls one closed under it; it
        // ends at the signal (its message then goes nowhere once the wait is over).
        let fd = stop.try_clone_to_owned().map_err(KvError::io("dup the stop descriptor"))?;
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("standby-stop".into())
            .spawn(move || {
                let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
                while rustix::event::poll(&mut fds, None).is_err() {}
                let _ = tx.send(Wake::Stop);
            })
            .map_err(KvError::io("start the standby's stop thread"))?;
    }
    let mut watch = None;
    let mut said_waiting = false;
    let mut said_promoting = false;
    let mut said_away = false;
    loop {
        // etcd away (restarting, or cut off for a while) is waited out: the standby's whole job
        // is to wait, and the roles it waits for are written once etcd is back.
        let read = read_roles(client, roles_key);
        if let Err(RolesUnread::Away(e)) = &read {
            if !said_away {
                tracing::warn!(key = roles_key, error = %e, "standby: cannot read the roles in etcd; trying again");
                said_away = true;
            }
        }
        let roles = match read {
            Ok(roles) => {
                if said_away {
                    tracing::info!(key = roles_key, "standby: etcd answers again");
                    said_away = false;
                }
                roles
            }
            Err(RolesUnread::Away(_)) => {
                if stopped(&rx, ROLES_RETRY, node) {
                    return Ok(Waited::Stopped);
                }
                continue;
            }
            Err(RolesUnread::Failed(e)) => return Err(e),
        };
        if watch.is_none() {
            // From just after the revision read: no change after that read is missed.
            let from = roles.as_ref().map_or(0, |(_, revision)| revision + 1);
            let tx = tx.clone();
            let w = client
                .watch(roles_key, Scope::Key, from, move |e: WatchEvent| {
                    let _ = tx.send(Wake::Roles(matches!(e, WatchEvent::Interrupted { .. })));
                })
                .map_err(|e| KvError::Config(format!("watch the roles at {roles_key} in etcd: {e}")))?;
            watch = Some(w);
        }
        let mut wait = ROLES_BACKSTOP;
        match &roles {
            Some((r, _)) if r.primary == node => {
                if !r.by_takeover || promoted(region)? {
                    tracing::info!(
                        epoch = r.epoch,
                        node,
                        region = %region.display(),
                        "the roles name this node the primary: opening its copy"
                    );
                    return Ok(Waited::Promoted);
                }
                if !said_promoting {
                    tracing::info!(
                        epoch = r.epoch,
                        region = %region.display(),
                        "this node took over; waiting for its mojim serve to finish promoting the copy"
                    );
                    said_promoting = true;
                }
                wait = PROMOTION_POLL;
            }
            Some((r, _)) if !said_waiting => {
                tracing::info!(
                    epoch = r.epoch,
                    primary = %r.primary,
                    node,
                    key = roles_key,
                    "standby: node {} is the region's primary; waiting for this node to take over",
                    r.primary
                );
                said_waiting = true;
            }
            None if !said_waiting => {
                tracing::info!(key = roles_key, "standby: no roles in etcd yet; waiting for them");
                said_waiting = true;
            }
            _ => {}
        }
        if stopped(&rx, wait, node) {
            return Ok(Waited::Stopped);
        }
    }
}

/// Waits up to `wait` for a wake-up: true when it is the stop signal (said in the log).
fn stopped(rx: &mpsc::Receiver<Wake>, wait: Duration, node: &str) -> bool {
    match rx.recv_timeout(wait) {
        Ok(Wake::Stop) => {
            tracing::info!(node, "standby: stopped while waiting to take over; it served nothing");
            true
        }
        Ok(Wake::Roles(true)) => {
            tracing::debug!("the watch on the roles is reconnecting");
            false
        }
        Ok(Wake::Roles(false)) | Err(mpsc::RecvTimeoutError::Timeout) => false,
        Err(mpsc::RecvTimeoutError::Disconnected) => unreachable!("await_promotion holds a sender"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::{Shard, ShardNode, SlotRange};
    use super::*;
    use mojim_etcd::testing::EtcdServer;

    fn topology() -> Topology {
        let shard = |n: u16, names: [&str; 2], slots: SlotRange| Shard {
            id: format!("{n:040x}"),
            config_epoch: 3,
            slots: vec![slots],
            nodes: names
                .iter()
                .enumerate()
                .map(|(i, name)| ShardNode {
                    name: (*name).into(),
                    kv_addr: format!("127.0.0.{}:6379", i + 1),
                    serve_addr: format!("127.0.0.{}:7070", i + 1),
                    zone: String::new(),
                    kv_tls_addr: None,
                })
                .collect(),
            primary: names[0].into(),
        };
        Topology {
            epoch: 7,
            shards: vec![
                shard(1, ["a1", "a2"], SlotRange { start: 0, end: 8191 }),
                shard(2, ["b1", "b2"], SlotRange { start: 8192, end: 16383 }),
            ],
            moves: vec![],
        }
    }

    #[test]
    fn a_shard_is_taken_by_its_other_node_alone() {
        let mut t = topology();
        assert_eq!(take_shard(&mut t, "a2"), Some(true));
        assert_eq!((t.shards[0].primary.as_str(), t.shards[0].config_epoch), ("a2", 4));
        assert_eq!(t.shards[1], topology().shards[1], "the other shard is untouched");
        assert_eq!(t.epoch, 7, "the store bumps the topology's epoch");
        assert!(t.check().is_ok());
        // Taking it again changes nothing.
        assert_eq!(take_shard(&mut t, "a2"), Some(false));
        assert_eq!(t.shards[0].config_epoch, 4);
        assert_eq!(take_shard(&mut t, "zz"), None);
    }

    #[test]
    fn claiming_writes_once_and_hands_the_view_the_result() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let store = TopologyStore::new(server.client(Duration::from_secs(2)), "/claim");
        store.create(topology(), false).unwrap();
        let view = ClusterView::new("a2", store.read_existing().unwrap().0);
        let claim = claim_shard(&store, &view, None).unwrap();
        let want =
            Claim::Taken { shard: format!("{:040x}", 1), from: "a1".into(), epoch: 2, config_epoch: 4 };
        assert_eq!(claim, want);
        assert_eq!(view.current().shards[0].primary, "a2", "the view has it before any watch");
        let (t, revision) = store.read_existing().unwrap();
        assert_eq!(t.shards[0].primary, "a2");
        assert_eq!(t.shards[1], topology().shards[1], "the other shard is untouched");
        // Claimed again: nothing written.
        assert_eq!(claim_shard(&store, &view, None).unwrap(), Claim::Already);
        assert_eq!(store.read_existing().unwrap().1, revision);
        let stranger = ClusterView::new("zz", t);
        let e = claim_shard(&store, &stranger, None).unwrap_err().to_string();
        assert!(e.contains("node \"zz\" is in no shard") && e.contains("add-shard"), "{e}");
    }

    #[test]
    fn a_claim_under_a_lease_key_made_again_since_writes_nothing() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(2));
        let store = TopologyStore::new(client.clone(), "/fenced");
        store.create(topology(), false).unwrap();
        // a2 held the region's leader key when it read it; a1's claim, under the key as a1
        // read it before, is fenced once the key is made again.
        let first = client.put("/region/leader", b"a1", None).unwrap();
        client.delete("/region/leader").unwrap();
        let now = client.put("/region/leader", b"a2", None).unwrap();
        let a2 = ClusterView::new("a2", store.read_existing().unwrap().0);
        assert!(matches!(claim_shard(&store, &a2, Some(("/region/leader", now))), Ok(Claim::Taken { .. })));
        let (t, revision) = store.read_existing().unwrap();
        let a1 = ClusterView::new("a1", t);
        let e = claim_shard(&store, &a1, Some(("/region/leader", first))).unwrap_err();
        assert!(matches!(&e, ClusterStoreError::Fenced { held } if held == "/region/leader"), "{e}");
        assert!(e.to_string().contains("no longer this primary's"), "{e}");
        let (after, after_revision) = store.read_existing().unwrap();
        assert_eq!((after.shards[0].primary.as_str(), after_revision), ("a2", revision), "nothing written");
    }

    /// A standby waits etcd out: killed while the standby waits (its watch breaks, so the roles
    /// are read again at once, and fail), etcd gives no error to the standby, which serves once
    /// etcd is back and the roles name its node.
    #[test]
    fn a_standby_waits_while_etcd_is_away() {
        let Some(mut server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_millis(300));
        let (tx, rx) = mpsc::channel();
        let waiting = client.clone();
        std::thread::spawn(move || {
            let _ = tx.send(await_promotion(
                &waiting,
                "/away/roles",
                "m0",
                Path::new("/nowhere/data.mojim"),
                None,
            ));
        });
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "no roles yet: it waits");
        server.kill();
        let away = rx.recv_timeout(Duration::from_secs(2));
        assert!(away.is_err(), "the standby gave up while etcd was away: {away:?}");
        server.restart().expect("etcd restarts on its data");
        let roles = Roles {
            epoch: 2,
            primary: "m0".into(),
            mirror: String::new(),
            mirror_addr: "127.0.0.1:1".into(),
            by_takeover: false,
        };
        let value = serde_json::to_vec(&roles).unwrap();
        let t0 = std::time::Instant::now();
        while client.put("/away/roles", &value, None).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(30), "etcd did not come back");
            std::thread::sleep(Duration::from_millis(50));
        }
        let got = rx.recv_timeout(Duration::from_secs(30)).expect("it serves once the roles name it");
        assert_eq!(got.expect("no error"), Waited::Promoted);
    }
}
