//! The topology as one `mojim kv` sees it: replaced whole by whoever watches etcd, read by the
//! event loop before each command without a lock on the path (a generation number says when
//! its cached copy is stale).

use super::slot_table::SlotTable;
use super::topology::{Shard, Topology};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The current topology and this node's name in it.
#[derive(Debug)]
pub struct ClusterView {
    me: String,
    generation: AtomicU64,
    current: Mutex<(Arc<Topology>, Arc<SlotTable>)>,
}

impl ClusterView {
    /// A view for the node named `me`, starting from `topology`.
    pub fn new(me: &str, topology: Topology) -> ClusterView {
        ClusterView {
            me: me.to_owned(),
            generation: AtomicU64::new(1),
            current: Mutex::new(indexed(topology)),
        }
    }

    /// This node's name (`--node`).
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Replaces the topology (a watcher saw a newer one).
    pub fn set(&self, topology: Topology) {
        let new = indexed(topology);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = new;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes whenever [`set`](Self::set) is called: a reader holding a copy from an earlier
    /// generation takes [`current`](Self::current) again.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The topology now.
    pub fn current(&self) -> Arc<Topology> {
        Arc::clone(&self.current.lock().unwrap_or_else(|p| p.into_inner()).0)
    }

    /// The topology now and its slot table.
    fn current_indexed(&self) -> (Arc<Topology>, Arc<SlotTable>) {
        let c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        (Arc::clone(&c.0), Arc::clone(&c.1))
    }

    /// The id of the shard whose nodes list this node (as primary or not), if any.
    pub fn member_of(&self) -> Option<String> {
        let t = self.current();
        t.shards.iter().find(|s| s.nodes.iter().any(|n| n.name == self.me)).map(|s| s.id.clone())
    }

    /// The shard this node serves as primary in `t`, if any.
    pub fn my_shard<'t>(&self, t: &'t Topology) -> Option<&'t Shard> {
        t.shards.iter().find(|s| s.primary == self.me)
    }
}

/// `topology` with its slot table, built once, outside the lock.
fn indexed(topology: Topology) -> (Arc<Topology>, Arc<SlotTable>) {
    let table = SlotTable::new(&topology);
    (Arc::new(topology), Arc::new(table))
}

/// The event loop's copy of a [`ClusterView`]: the topology and its slot table taken once per
/// generation, so that a command reads them without a lock.
#[derive(Debug)]
pub struct CachedView {
    view: Arc<ClusterView>,
    generation: u64,
    topology: Arc<Topology>,
    table: Arc<SlotTable>,
}

impl CachedView {
    /// A copy of `view` now.
    pub fn new(view: Arc<ClusterView>) -> CachedView {
        let generation = view.generation();
        let (topology, table) = view.current_indexed();
        CachedView { view, generation, topology, table }
    }

    /// Takes the topology again if it was replaced since (one atomic load when it was not);
    /// whether it was.
    pub fn refresh(&mut self) -> bool {
        let g = self.view.generation();
        if g == self.generation {
            return false;
        }
        (self.topology, self.table) = self.view.current_indexed();
        self.generation = g;
        true
    }

    /// The topology as last taken.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The topology's slot table.
    pub fn table(&self) -> &SlotTable {
        &self.table
    }

    /// This node's name.
    pub fn me(&self) -> &str {
        self.view.me()
    }

    /// The shard this node serves as primary, if any.
    pub fn my_shard(&self) -> Option<&Shard> {
        self.view.my_shard(&self.topology)
    }
}
