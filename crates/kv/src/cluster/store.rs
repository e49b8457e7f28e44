//! The topology in etcd: one JSON value at `<prefix>/kv-cluster/topology`, read with its
//! modification revision and changed only by compare-and-swap on that revision (an etcd
//! transaction), its `epoch` one more than the value it replaces, checked before every write.

use super::check::TopologyError;
use super::topology::Topology;
use mojim_etcd::{Client, EtcdError};
use std::fmt;

/// Where the topology lives under the cluster's prefix.
pub const TOPOLOGY_KEY: &str = "kv-cluster/topology";

/// How many times a change is tried again after another writer changed the topology between
/// its read and its write.
const MAX_RACES: usize = 64;

/// Why the topology could not be read or changed.
#[derive(Debug)]
pub enum ClusterStoreError {
    /// etcd could not be reached or refused the request.
    Etcd(EtcdError),
    /// No topology is stored yet.
    Absent {
        /// The key.
        key: String,
    },
    /// `create` found a topology already stored (and was not forced).
    Exists {
        /// The key.
        key: String,
        /// The stored topology's epoch.
        epoch: u64,
    },
    /// The stored value is not a topology, or not a valid one.
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        why: String,
    },
    /// The topology a change would write breaks a rule; nothing was written.
    Invalid(TopologyError),
    /// The key a change was made under (a primary's lease key) is no longer the one it held:
    /// its lease expired or another node took over. Nothing was written.
    Fenced {
        /// The held key.
        held: String,
    },
    /// A node that must be in a shard (one taking its shard over) is in none.
    NotInTopology {
        /// The key.
        key: String,
        /// The node's name.
        node: String,
        /// The topology's epoch.
        epoch: u64,
    },
    /// Other writers changed the topology between every read and write of this change.
    Contended {
        /// The key.
        key: String,
        /// How many times it was tried.
        tries: usize,
    },
}

impl fmt::Display for ClusterStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterStoreError::Etcd(e) => write!(f, "the cluster topology in etcd: {e}"),
            ClusterStoreError::Absent { key } => write!(
                f,
                "no cluster topology at {key} in etcd: make one with `mojim kv cluster create` (with the \
                 same [cluster] etcd settings and [kv] cluster_prefix)"
            ),
            ClusterStoreError::Exists { key, epoch } => write!(
                f,
                "a cluster topology (epoch {epoch}) is already at {key}: `mojim kv cluster status` shows it; \
                 pass --force to replace it"
            ),
            ClusterStoreError::Corrupt { key, why } => write!(
                f,
                "the value at {key} in etcd is not a valid cluster topology ({why}); replace it with \
                 `mojim kv cluster create --force`"
            ),
            ClusterStoreError::Invalid(e) => write!(f, "refused, nothing written: {e}"),
            ClusterStoreError::Fenced { held } => write!(
                f,
                "the topology was not changed: {held} in etcd is no longer this primary's (its lease \
                 expired, or another node took over); restart on the node the roles name the primary"
            ),
            ClusterStoreError::NotInTopology { key, node, epoch } => write!(
                f,
                "node {node:?} is in no shard of the cluster topology at {key} (epoch {epoch}): add its \
                 shard with `mojim kv cluster add-shard`, or give this node's name (--node or [cluster] node)"
            ),
            ClusterStoreError::Contended { key, tries } => write!(
                f,
                "{key} changed under each of {tries} tries to change it (other writers are busy); try again"
            ),
        }
    }
}

impl std::error::Error for ClusterStoreError {}

impl From<EtcdError> for ClusterStoreError {
    fn from(e: EtcdError) -> Self {
        ClusterStoreError::Etcd(e)
    }
}

impl From<TopologyError> for ClusterStoreError {
    fn from(e: TopologyError) -> Self {
        ClusterStoreError::Invalid(e)
    }
}

/// The topology's key in one etcd.
#[derive(Debug, Clone)]
pub struct TopologyStore {
    client: Client,
    key: String,
}

impl TopologyStore {
    /// The topology under `prefix` (`[kv] cluster_prefix`, e.g. `/mojim/shop`; a trailing `/`
    /// is dropped).
    pub fn new(client: Client, prefix: &str) -> TopologyStore {
        TopologyStore { client, key: format!("{}/{TOPOLOGY_KEY}", prefix.trim_end_matches('/')) }
    }

    /// The etcd key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The etcd client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads a stored value, checking it.
    pub fn decode(&self, value: &[u8]) -> Result<Topology, ClusterStoreError> {
        let corrupt = |why: String| ClusterStoreError::Corrupt { key: self.key.clone(), why };
        let t: Topology = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
        t.check().map_err(|e| corrupt(e.to_string()))?;
        Ok(t)
    }

    /// The topology and the revision of its last write, or `None` if there is none.
    pub fn read(&self) -> Result<Option<(Topology, i64)>, ClusterStoreError> {
        match self.client.get(&self.key)? {
            None => Ok(None),
            Some(kv) => Ok(Some((self.decode(&kv.value)?, kv.mod_revision))),
        }
    }

    /// As [`read`](Self::read), [`ClusterStoreError::Absent`] if there is none.
    pub fn read_existing(&self) -> Result<(Topology, i64), ClusterStoreError> {
        self.read()?.ok_or_else(|| ClusterStoreError::Absent { key: self.key.clone() })
    }

    /// Stores `topology` as the first one (epoch 1), or with `force` in place of the one there
    /// (its epoch one more). Returns what was written.
    pub fn create(&self, mut topology: Topology, force: bool) -> Result<Topology, ClusterStoreError> {
        for _ in 0..MAX_RACES {
            let current = match self.client.get(&self.key)? {
                None => None,
                Some(kv) => {
                    // A damaged value may be replaced by force; its epoch is then unknown.
                    let epoch = self.decode(&kv.value).map(|t| t.epoch).unwrap_or(0);
                    if !force {
                        return Err(ClusterStoreError::Exists { key: self.key.clone(), epoch });
                    }
                    Some((epoch, kv.mod_revision))
                }
            };
            let (epoch, revision) = current.unwrap_or((0, 0));
            topology.epoch = epoch + 1;
            if self.swap(&topology, revision, None)? {
                return Ok(topology);
            }
        }
        Err(ClusterStoreError::Contended { key: self.key.clone(), tries: MAX_RACES })
    }

    /// Reads the topology, lets `change` edit it, and writes the result with its epoch one more,
    /// if the topology was not changed meanwhile; otherwise reads it again and lets `change` edit
    /// the new one. Returns what was written. `change` may refuse (its error is returned,
    /// nothing written).
    pub fn update<E>(&self, change: impl FnMut(&mut Topology) -> Result<(), E>) -> Result<Topology, E>
    where
        E: From<ClusterStoreError>,
    {
        self.update_guarded(None, change)
    }

    /// As [`update`](Self::update), written only while the key `held` is the one created at
    /// revision `created` (a primary's lease key, read while holding the lease): once it is
    /// gone or made again, [`ClusterStoreError::Fenced`] and nothing is written.
    pub fn update_while<E>(
        &self,
        held: &str,
        created: i64,
        change: impl FnMut(&mut Topology) -> Result<(), E>,
    ) -> Result<Topology, E>
    where
        E: From<ClusterStoreError>,
    {
        self.update_guarded(Some((held, created)), change)
    }

    fn update_guarded<E>(
        &self,
        held: Option<(&str, i64)>,
        mut change: impl FnMut(&mut Topology) -> Result<(), E>,
    ) -> Result<Topology, E>
    where
        E: From<ClusterStoreError>,
    {
        for _ in 0..MAX_RACES {
            let (mut t, revision) = self.read_existing()?;
            change(&mut t)?;
            t.epoch += 1;
            if self.swap(&t, revision, held)? {
                return Ok(t);
            }
            if let Some((key, created)) = held {
                let now = self.client.get(key).map_err(ClusterStoreError::from)?;
                if now.is_none_or(|kv| kv.create_revision != created) {
                    return Err(ClusterStoreError::Fenced { held: key.to_owned() }.into());
                }
            }
        }
        Err(ClusterStoreError::Contended { key: self.key.clone(), tries: MAX_RACES }.into())
    }

    /// Writes `t` (checked first) if the key is still at `revision` (0: absent) and `held`, if
    /// given, is still the key created at that revision; says whether it did. A transaction
    /// whose outcome is unknown (the connection broke after sending it) is settled by reading
    /// the key: it went in if the key now holds exactly this value.
    fn swap(
        &self,
        t: &Topology,
        revision: i64,
        held: Option<(&str, i64)>,
    ) -> Result<bool, ClusterStoreError> {
        t.check()?;
        // Serialising plain structs of strings and numbers cannot fail.
        let value = serde_json::to_vec_pretty(t).expect("a topology serialises");
        let done = match held {
            None => self.client.compare_and_swap(&self.key, revision, &value, None),
            Some((key, created)) => {
                self.client.compare_and_swap_while(&self.key, revision, key, created, &value, None)
            }
        };
        match done {
            Ok(done) => Ok(done),
            Err(EtcdError::OutcomeUnknown { .. }) => {
                let now = self.client.get(&self.key)?;
                Ok(now.is_some_and(|kv| kv.value == value))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::{Shard, ShardNode, SlotRange};
    use super::*;
    use mojim_etcd::testing::EtcdServer;
    use std::time::Duration;

    fn shard(n: u16, slots: Vec<SlotRange>) -> Shard {
        let node = |side: &str, host: u16| ShardNode {
            name: format!("n{n}{side}"),
            kv_addr: format!("127.0.0.{host}:6379"),
            serve_addr: format!("127.0.0.{host}:7070"),
            zone: String::new(),
            kv_tls_addr: None,
        };
        Shard {
            id: format!("{n:040x}"),
            config_epoch: 1,
            slots,
            nodes: vec![node("a", 1), node("b", 2)],
            primary: format!("n{n}a"),
        }
    }

    fn store(server: &EtcdServer) -> TopologyStore {
        TopologyStore::new(server.client(Duration::from_secs(2)), "/test/cluster/")
    }

    #[test]
    fn create_refuses_to_overwrite_unless_forced_and_read_returns_the_revision() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let s = store(&server);
        assert_eq!(s.key(), "/test/cluster/kv-cluster/topology");
        assert!(s.read().unwrap().is_none());
        let e = s.read_existing().unwrap_err().to_string();
        assert!(e.contains("mojim kv cluster create"), "{e}");
        let first = Topology {
            epoch: 0,
            shards: vec![shard(1, vec![SlotRange { start: 0, end: 16383 }])],
            moves: vec![],
        };
        let written = s.create(first.clone(), false).unwrap();
        assert_eq!(written.epoch, 1);
        let (read, revision) = s.read_existing().unwrap();
        assert_eq!(read, written);
        assert_eq!(revision, s.client().get(s.key()).unwrap().unwrap().mod_revision);
        let e = s.create(first.clone(), false).unwrap_err();
        assert!(matches!(e, ClusterStoreError::Exists { epoch: 1, .. }), "{e}");
        assert_eq!(s.create(first, true).unwrap().epoch, 2);
    }

    #[test]
    fn an_invalid_change_is_refused_and_nothing_is_written() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let s = store(&server);
        let t = Topology {
            epoch: 0,
            shards: vec![shard(1, vec![SlotRange { start: 0, end: 100 }])],
            moves: vec![],
        };
        s.create(t, false).unwrap();
        let before = s.client().get(s.key()).unwrap().unwrap();
        let e = s
            .update(|t: &mut Topology| -> Result<(), ClusterStoreError> {
                t.shards.push(shard(2, vec![SlotRange { start: 50, end: 200 }]));
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains("slot 50 is owned by two shards"), "{e}");
        assert_eq!(s.client().get(s.key()).unwrap().unwrap(), before);
        // A damaged value is named, not served.
        s.client().put(s.key(), b"{\"epoch\": 3}", None).unwrap();
        let e = s.read().unwrap_err().to_string();
        assert!(e.contains("not a valid cluster topology") && e.contains("--force"), "{e}");
    }

    #[test]
    fn concurrent_writers_lose_no_change() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let s = store(&server);
        s.create(Topology::default(), false).unwrap();
        const EACH: u16 = 15;
        let writers: Vec<_> = (0..2u16)
            .map(|w| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let n = w * 100 + i + 1;
                        s.update(|t: &mut Topology| -> Result<(), ClusterStoreError> {
                            // Distinct node names and slots per shard: n{n}a, slot n.
                            t.shards.push(shard(n, vec![SlotRange { start: n, end: n }]));
                            Ok(())
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let (t, _) = s.read_existing().unwrap();
        assert_eq!(t.epoch, 1 + 2 * u64::from(EACH), "every change bumped the epoch once");
        let mut ids: Vec<u16> = t.shards.iter().map(|s| s.slots[0].start).collect();
        ids.sort_unstable();
        let want: Vec<u16> = (1..=EACH).chain(101..101 + EACH).collect();
        assert_eq!(ids, want, "both writers' shards are all there");
    }
}
