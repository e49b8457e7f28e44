//! One slot-moving tool at a time. `mojim kv cluster move-slots` and `rebalance` hold
//! `<prefix>/kv-cluster/move-lock` in etcd for as long as they run: the key is made only if it
//! is absent, with a lease the tool keeps alive ([`Leadership`]), and its value says who holds
//! it (host, process id, since when, which command). A second tool finds it held and is refused,
//! naming the holder. A tool that ends gives the key up at once; one killed stops renewing, so
//! its lease, and the key with it, goes by itself after [`LOCK_TTL`]; running the tool again
//! then resumes the recorded moves.

use super::store::{TopologyStore, TOPOLOGY_KEY};
use mojim_etcd::{EtcdError, Leadership};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the lock lives under the cluster's prefix.
pub const MOVE_LOCK_KEY: &str = "kv-cluster/move-lock";

/// How long a killed tool's lock outlives it, at most.
pub const LOCK_TTL: Duration = Duration::from_secs(10);
/// How often the tool renews its lease.
const RENEW_EVERY: Duration = Duration::from_secs(2);
/// The holder stops this long before its lease could expire.
const MARGIN: Duration = Duration::from_secs(2);

/// Who holds the lock: the key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it took the lock, seconds since the Unix epoch.
    pub since_unix_s: u64,
    /// The command it runs (`move-slots`, `rebalance`).
    pub command: String,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        write!(
            f,
            "`mojim kv cluster {}` on host {} pid {}, since unix time {} ({} s ago)",
            self.command,
            self.host,
            self.pid,
            self.since_unix_s,
            now.saturating_sub(self.since_unix_s)
        )
    }
}

/// Why the lock was not taken, or was lost.
#[derive(Debug)]
pub enum MoveLockError {
    /// Another tool holds it.
    Held {
        /// The key.
        key: String,
        /// Its holder, as its value says (`None`: the value is not a holder, or the key went
        /// meanwhile).
        holder: Option<Holder>,
    },
    /// etcd could not be reached or refused the request.
    Etcd {
        /// The key.
        key: String,
        /// What etcd said.
        source: EtcdError,
    },
    /// The lease could not be kept alive (etcd unreachable for too long, or the key deleted):
    /// another tool may take the lock, so this one stops.
    Lost {
        /// The key.
        key: String,
        /// Why.
        why: String,
    },
}

impl fmt::Display for MoveLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ttl = LOCK_TTL.as_secs();
        match self {
            MoveLockError::Held { key, holder } => {
                let who = holder.as_ref().map_or_else(|| "another tool".to_owned(), Holder::to_string);
                write!(
                    f,
                    "{who} holds the slot-move lock {key} in etcd: one tool moves slots at a time. Wait for \
                     it to end; if that process is dead, its lock goes by itself within {ttl} s (its etcd \
                     lease is no longer kept alive): then run this again, which resumes the recorded moves"
                )
            }
            MoveLockError::Etcd { key, source } => {
                write!(
                    f,
                    "the slot-move lock {key} in etcd: {source}; check that etcd is reachable and try again"
                )
            }
            MoveLockError::Lost { key, why } => write!(
                f,
                "lost the slot-move lock {key} in etcd ({why}): stopped, so that no two tools move slots at \
                 once; the recorded moves stay in etcd: run `mojim kv cluster move-slots` again to resume"
            ),
        }
    }
}

impl std::error::Error for MoveLockError {}

/// The lock, held until dropped (which gives it up at once).
#[derive(Debug)]
pub struct MoveLock {
    held: Option<Leadership>,
    fence: u64,
}

impl MoveLock {
    /// The lock's key for the topology in `store`.
    pub fn key(store: &TopologyStore) -> String {
        let prefix = store.key().strip_suffix(TOPOLOGY_KEY).expect("the topology key ends in TOPOLOGY_KEY");
        format!("{prefix}{MOVE_LOCK_KEY}")
    }

    /// Takes the lock for `command` run by this process, or says who holds it.
    pub fn take(store: &TopologyStore, command: &str) -> Result<MoveLock, MoveLockError> {
        let key = Self::key(store);
        let holder = Holder {
            host: host_name(),
            pid: std::process::id(),
            since_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            command: command.to_owned(),
        };
        // Serialising a struct of strings and numbers cannot fail.
        let value = serde_json::to_vec(&holder).expect("a holder serialises");
        let etcd = |source| MoveLockError::Etcd { key: key.clone(), source };
        match Leadership::campaign(store.client().clone(), &key, &value, LOCK_TTL, RENEW_EVERY, MARGIN) {
            Ok(Some(held)) => {
                // The key's creation revision: etcd's revisions only grow, so a later run's is
                // higher.
                let fence = match store.client().get(&key).map_err(etcd)? {
                    Some(kv) if kv.value == value && kv.create_revision > 0 => kv.create_revision as u64,
                    _ => {
                        let why = "its key changed right after it was taken".to_owned();
                        return Err(MoveLockError::Lost { key, why });
                    }
                };
                Ok(MoveLock { held: Some(held), fence })
            }
            Ok(None) => {
                let holder = store
                    .client()
                    .get(&key)
                    .map_err(etcd)?
                    .and_then(|kv| serde_json::from_slice::<Holder>(&kv.value).ok());
                Err(MoveLockError::Held { key, holder })
            }
            Err(e) => Err(etcd(e)),
        }
    }

    /// This run's slot-move fence: the lock key's etcd creation revision, higher for every
    /// later run. The shards refuse a fence below the highest they have seen
    /// (`CLUSTER STAGEKEYS`, `UNSTAGEKEYS`, `MOVEFENCE`).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// `Ok` while the lock is held; once its lease could not be kept alive, why not.
    pub fn check(&self) -> Result<(), MoveLockError> {
        let held = self.held.as_ref().expect("held until dropped");
        match held.lost() {
            None => Ok(()),
            Some(why) => Err(MoveLockError::Lost { key: held.key().to_owned(), why }),
        }
    }
}

impl Drop for MoveLock {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            let key = held.key().to_owned();
            if let Err(e) = held.resign() {
                tracing::warn!(key = %key, "could not give up the slot-move lock ({e}); it goes by itself within {} s", LOCK_TTL.as_secs());
            }
        }
    }
}

/// This machine's host name (the kernel's), or "?" where it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "?".to_owned(), |h| h.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_etcd::testing::EtcdServer;

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_when_dropped() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let store = TopologyStore::new(server.client(Duration::from_secs(2)), "/lock-test/");
        assert_eq!(MoveLock::key(&store), "/lock-test/kv-cluster/move-lock");
        let first = MoveLock::take(&store, "move-slots").unwrap();
        first.check().unwrap();
        let e = MoveLock::take(&store, "rebalance").unwrap_err();
        let MoveLockError::Held { holder: Some(h), .. } = &e else { panic!("{e}") };
        assert_eq!((h.pid, h.command.as_str()), (std::process::id(), "move-slots"));
        let said = e.to_string();
        assert!(
            said.contains(&format!("pid {}", std::process::id())) && said.contains("within 10 s"),
            "{said}"
        );
        drop(first);
        MoveLock::take(&store, "rebalance").unwrap();
    }
}
