//! The etcd coordinator (`[cluster] coordinator = "etcd"`), in the manner of Patroni.
//!
//! Keys under the prefix (default `/mojim/<region uuid>`):
//!
//! | key | value | written by |
//! |---|---|---|
//! | `roles` | JSON [`Roles`]: the epoch, the primary's node name, the mirror's node name, the address the primary connects to | the first primary (create-if-absent), the mirror (its name, see below), each take-over (compare-and-swap) |
//! | `leader` | JSON [`Leader`], held with the primary's lease | the primary, while it may acknowledge |
//! | `members/<node>` | the node's listen address | each named daemon at start |
//!
//! Nodes are told apart by their names (`[cluster] node`, `--node`), never by how an address is
//! spelled: a mirror may listen on `0.0.0.0:7420` while the primary connects to
//! `mirror.example:7420`. The first primary writes the roles with the address it replicates to
//! (its `[primary] mirror`) and no mirror name; the daemon that then serves that primary's
//! session (in the roles' epoch) writes its own name into the roles. A take-over names no mirror
//! either, only the first backup's address: that node names itself once the new primary's
//! application connects to it.
//!
//! The primary acknowledges only while its lease is certainly alive and not known to be lost
//! (see `mojim_etcd::Leadership::is_valid`), and demotes itself when it cannot renew it. The
//! mirror named in `roles` watches `leader`: once a primary held it in the current epoch and
//! the key is gone (the lease expired or was revoked), the mirror claims `roles` for epoch + 1
//! with itself as primary and its first backup as mirror, then promotes its copy. The
//! application then starts on the new primary's node (its region is the mirror's
//! `<dir>/data.mojim`), takes the lease, and resynchronises with the new mirror. A node that
//! cannot tell whether it is the mirror (it has no name), or sees the lease expire while the
//! roles name no mirror, says so at start-up and when the lease expires.

use crate::config::EtcdSettings;
use crate::error::{Error, Result};
use mojim_etcd::{Client, Leadership};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who is who in an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roles {
    /// The epoch these roles hold for; each take-over raises it by one.
    pub epoch: u64,
    /// The primary's node name.
    pub primary: String,
    /// The mirror's node name, written by the mirror itself once it serves the primary's
    /// session in this epoch; empty until then. (Roles written by older versions may hold an
    /// address here: the mirror overwrites it with its name in the same way.)
    pub mirror: String,
    /// The address the primary connects to, as the primary (or the take-over) was given it.
    pub mirror_addr: String,
    /// Written by a mirror's take-over (which then promotes itself): a take-over cut short by a
    /// restart is finished when the node comes back.
    #[serde(default)]
    pub by_takeover: bool,
}

/// The value of the leader key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// The primary's node name.
    pub node: String,
    /// The epoch it leads in.
    pub epoch: u64,
}

/// A connection to the coordinator.
#[derive(Clone)]
pub struct Coordinator {
    client: Client,
    settings: EtcdSettings,
}

fn etcd_err(what: &str) -> impl Fn(mojim_etcd::EtcdError) -> Error + '_ {
    move |e| Error::Coordinator(format!("{what}: {e}"))
}

impl Coordinator {
    /// A client of the etcd endpoints in `settings` (from `[cluster]`); each request waits at
    /// most the lease's renewal interval, kept within 200 ms to 2 s.
    pub fn new(settings: &EtcdSettings) -> Result<Coordinator> {
        let timeout = settings.lease_renew.min(Duration::from_secs(2)).max(Duration::from_millis(200));
        let client = Client::new(&settings.endpoints, timeout).map_err(etcd_err("etcd endpoints"))?;
        Ok(Coordinator { client, settings: settings.clone() })
    }

    /// The settings this coordinator was made with.
    pub fn settings(&self) -> &EtcdSettings {
        &self.settings
    }

    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.settings.prefix)
    }

    /// The current roles and their revision (for a compare-and-swap), if any were written.
    pub fn roles(&self) -> Result<Option<(Roles, i64)>> {
        let Some(kv) = self.client.get(&self.key("roles")).map_err(etcd_err("read the roles"))? else {
            return Ok(None);
        };
        let roles = serde_json::from_slice(&kv.value)
            .map_err(|e| Error::Coordinator(format!("the roles key in etcd is not valid: {e}")))?;
        Ok(Some((roles, kv.mod_revision)))
    }

    /// Writes `roles` if the key is still at `revision` (0: absent). Returns whether it did.
    pub fn swap_roles(&self, roles: &Roles, revision: i64) -> Result<bool> {
        let v = serde_json::to_vec(roles).expect("roles serialise");
        self.client
            .compare_and_swap(&self.key("roles"), revision, &v, None)
            .map_err(etcd_err("write the roles"))
    }

    /// As [`Coordinator::swap_roles`], and only while no primary holds the leader key, in one
    /// transaction (a take-over: a primary that took the lease again keeps its roles).
    pub fn swap_roles_leaderless(&self, roles: &Roles, revision: i64) -> Result<bool> {
        let v = serde_json::to_vec(roles).expect("roles serialise");
        self.client
            .compare_and_swap_unless(&self.key("roles"), revision, &self.key("leader"), &v, None)
            .map_err(etcd_err("write the roles"))
    }

    /// The current leader, if a primary holds the lease.
    pub fn leader(&self) -> Result<Option<Leader>> {
        let Some(kv) = self.client.get(&self.key("leader")).map_err(etcd_err("read the leader"))? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(&kv.value).ok())
    }

    /// Takes the leader key for `node` at `epoch`, or says who holds it.
    pub fn campaign(&self, node: &str, epoch: u64) -> Result<Leadership> {
        let v = serde_json::to_vec(&Leader { node: node.to_string(), epoch }).expect("leader serialises");
        let s = &self.settings;
        let held = Leadership::campaign(
            self.client.clone(),
            &self.key("leader"),
            &v,
            s.lease_ttl,
            s.lease_renew,
            s.lease_margin,
        )
        .map_err(etcd_err("take the leadership"))?;
        match held {
            Some(l) => Ok(l),
            None => {
                let who = self.leader()?.map_or_else(
                    || "another node".to_string(),
                    |l| format!("node {} (epoch {})", l.node, l.epoch),
                );
                Err(Error::Coordinator(format!(
                    "{who} holds the primary's lease; this node becomes primary only after that lease expires"
                )))
            }
        }
    }

    /// Records a node's address.
    pub fn register(&self, node: &str, addr: &str) -> Result<()> {
        self.client
            .put(&self.key(&format!("members/{node}")), addr.as_bytes(), None)
            .map(|_| ())
            .map_err(etcd_err("register the node"))
    }
}
