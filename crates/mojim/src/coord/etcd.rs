//! The coordinator over etcd (feature `etcd`).

use super::{Leader, Roles};
use crate::config::EtcdSettings;
use crate::error::{Error, Result};
use mojim_etcd::{Client, EtcdTls, Leadership};
use std::time::Duration;

/// The primary's lease on the leader key.
pub type Lease = Leadership;

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
        let tls = match &settings.tls {
            None => None,
            Some(f) => {
                let identity = f.identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
                let tls = EtcdTls::load(&f.ca_file, identity)
                    .map_err(|e| Error::Config(format!("[cluster] {e}")))?;
                Some(tls)
            }
        };
        let client =
            Client::with_tls(&settings.endpoints, timeout, tls).map_err(etcd_err("etcd endpoints"))?;
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
    pub fn campaign(&self, node: &str, epoch: u64) -> Result<Lease> {
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
