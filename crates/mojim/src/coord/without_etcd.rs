//! A build without the cargo feature `etcd`: the coordinator cannot be reached, and a
//! configuration that asks for it is refused with an error that says how to get it.

use super::{Leader, Roles};
use crate::config::EtcdSettings;
use crate::error::{Error, Result};
use std::convert::Infallible;
use std::time::Instant;

/// Never made: [`Coordinator::new`] fails in this build.
#[derive(Clone)]
pub struct Coordinator {
    never: Infallible,
}

/// Never made: no lease can be taken in this build.
pub struct Lease {
    never: Infallible,
}

impl Coordinator {
    /// Always an error: this build has no etcd client.
    pub fn new(settings: &EtcdSettings) -> Result<Coordinator> {
        Err(Error::Config(format!(
            "[cluster] coordinator = \"etcd\" (endpoints {}) needs the cargo feature `etcd` of the \
             mojim crate, which this build was made without: rebuild with `--features etcd` (it is \
             on by default), or use coordinator = \"static\"",
            settings.endpoints.join(",")
        )))
    }

    /// Never called: no coordinator exists in this build.
    pub fn settings(&self) -> &EtcdSettings {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn roles(&self) -> Result<Option<(Roles, i64)>> {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn swap_roles(&self, _roles: &Roles, _revision: i64) -> Result<bool> {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn swap_roles_leaderless(&self, _roles: &Roles, _revision: i64) -> Result<bool> {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn leader(&self) -> Result<Option<Leader>> {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn campaign(&self, _node: &str, _epoch: u64) -> Result<Lease> {
        match self.never {}
    }

    /// Never called: no coordinator exists in this build.
    pub fn register(&self, _node: &str, _addr: &str) -> Result<()> {
        match self.never {}
    }
}

impl Lease {
    /// Never called: no lease exists in this build.
    pub fn valid_until(&self) -> Instant {
        match self.never {}
    }

    /// Never called: no lease exists in this build.
    pub fn lost(&self) -> Option<String> {
        match self.never {}
    }

    /// Never called: no lease exists in this build.
    pub fn renewals(&self) -> u64 {
        match self.never {}
    }

    /// Never called: no lease exists in this build.
    pub fn lease(&self) -> i64 {
        match self.never {}
    }

    /// Never called: no lease exists in this build.
    pub fn resign(self) -> Result<()> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn asking_for_etcd_names_the_feature() {
        let settings = EtcdSettings {
            endpoints: vec!["127.0.0.1:2379".into()],
            tls: None,
            prefix: "/mojim/test".into(),
            lease_ttl: Duration::from_secs(3),
            lease_renew: Duration::from_secs(1),
            lease_margin: Duration::from_millis(500),
        };
        let Err(e) = Coordinator::new(&settings);
        let m = e.to_string();
        assert!(
            m.contains("feature `etcd`") && m.contains("--features etcd") && m.contains("127.0.0.1:2379"),
            "{m}"
        );
    }
}
