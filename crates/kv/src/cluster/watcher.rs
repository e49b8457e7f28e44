//! Keeps a [`ClusterView`] current: watches the topology's key in etcd and replaces the view's
//! topology with each valid new value. A value that is not a valid topology, or a delete of the
//! key, is logged and ignored: the view keeps the last good topology.

use super::store::TopologyStore;
use super::view::ClusterView;
use mojim_etcd::{EtcdError, Scope, Watch, WatchEvent};
use std::sync::Arc;

/// The running watch; dropping it stops it (the view keeps what it last got).
#[derive(Debug)]
pub struct TopologyWatcher {
    _watch: Watch,
}

impl TopologyWatcher {
    /// Starts watching `store`'s key for changes after `revision` (the revision the view's
    /// topology was read at).
    pub fn start(
        store: &TopologyStore,
        view: Arc<ClusterView>,
        revision: i64,
    ) -> Result<TopologyWatcher, EtcdError> {
        let reader = store.clone();
        let watch = store.client().watch(store.key(), Scope::Key, revision + 1, move |event| {
            apply(&reader, &view, event);
        })?;
        Ok(TopologyWatcher { _watch: watch })
    }
}

/// Applies one event of the watch to `view`.
fn apply(store: &TopologyStore, view: &ClusterView, event: WatchEvent) {
    match event {
        WatchEvent::Put(kv) => match store.decode(&kv.value) {
            Ok(t) => {
                tracing::info!(epoch = t.epoch, revision = kv.mod_revision, "cluster topology changed");
                view.set(t);
            }
            Err(e) => tracing::error!(
                revision = kv.mod_revision,
                "refused a new cluster topology, keeping epoch {}: {e}",
                view.current().epoch
            ),
        },
        WatchEvent::Delete { key, revision } => tracing::error!(
            revision,
            "the cluster topology {key} was deleted in etcd; keeping epoch {} until a new one is written \
             (mojim kv cluster create)",
            view.current().epoch
        ),
        WatchEvent::Compacted { revision } => {
            // Changes between the last one seen and `revision` are gone from etcd's history:
            // the key's value now is what counts.
            tracing::warn!(revision, "etcd compacted the topology's history; reading it again");
            match store.read() {
                Ok(Some((t, _))) => view.set(t),
                Ok(None) => tracing::error!("the cluster topology is gone from etcd; keeping the last one"),
                Err(e) => tracing::error!("reading the cluster topology after a compaction: {e}"),
            }
        }
        WatchEvent::Interrupted { error } => {
            tracing::warn!("the watch on the cluster topology is reconnecting: {error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::ClusterStoreError;
    use super::super::topology::{Shard, ShardNode, SlotRange, Topology};
    use super::*;
    use mojim_etcd::testing::EtcdServer;
    use std::time::{Duration, Instant};

    fn topology(ranges: &[(u16, u16)]) -> Topology {
        let shards = ranges
            .iter()
            .enumerate()
            .map(|(i, &(start, end))| Shard {
                id: format!("{:040x}", i + 1),
                config_epoch: 1,
                slots: vec![SlotRange { start, end }],
                nodes: vec![ShardNode {
                    name: format!("n{i}"),
                    kv_addr: format!("127.0.0.{}:6379", i + 1),
                    serve_addr: format!("127.0.0.{}:7070", i + 1),
                    zone: String::new(),
                    kv_tls_addr: None,
                }],
                primary: format!("n{i}"),
            })
            .collect();
        Topology { epoch: 0, shards, moves: vec![] }
    }

    fn wait_epoch(view: &ClusterView, epoch: u64) {
        let started = Instant::now();
        while view.current().epoch != epoch {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "epoch {} never became {epoch}",
                view.current().epoch
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn the_view_follows_valid_changes_and_keeps_the_last_good_one() {
        let Some(mut server) = EtcdServer::start_for_test() else { return };
        let store = TopologyStore::new(server.client(Duration::from_secs(2)), "/w");
        store.create(topology(&[(0, 16383)]), false).unwrap();
        let (t, revision) = store.read_existing().unwrap();
        let view = Arc::new(ClusterView::new("n0", t));
        let _watcher = TopologyWatcher::start(&store, Arc::clone(&view), revision).unwrap();
        let generation = view.generation();
        store
            .update(|t: &mut Topology| -> Result<(), ClusterStoreError> {
                *t = Topology { epoch: t.epoch, ..topology(&[(0, 8191), (8192, 16383)]) };
                Ok(())
            })
            .unwrap();
        wait_epoch(&view, 2);
        assert!(view.generation() > generation);
        assert_eq!(view.current().shards.len(), 2);
        // Written past the store's checks (as a hand edit would be): refused, the view stays.
        let mut bad = topology(&[(0, 9000), (9000, 16383)]);
        bad.epoch = 3;
        let bad_revision = store.client().put(store.key(), &serde_json::to_vec(&bad).unwrap(), None).unwrap();
        store.client().put("/w/other", b"x", None).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(view.current().epoch, 2, "a topology owning slot 9000 twice was refused");
        assert!(bad_revision > revision);
        store.client().delete(store.key()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(view.current().epoch, 2, "a delete keeps the last good topology");
        // After an etcd restart the watch reconnects, and a change still arrives.
        server.restart().unwrap();
        let mut good = topology(&[(0, 16383)]);
        good.epoch = 7;
        store.create(good, true).unwrap();
        wait_epoch(&view, 1);
        assert_eq!(view.current().shards.len(), 1);
    }
}
