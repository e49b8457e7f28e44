//! Reaching the cluster's topology from a node's configuration: `[cluster]`'s etcd endpoints
//! and TLS files, and `[kv] cluster_prefix`.

use super::store::TopologyStore;
use crate::error::KvError;
use mojim::Config;
use mojim_etcd::{Client, EtcdTls};
use std::time::Duration;

/// How long one etcd request of the topology's may take on one endpoint.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// The topology's store in the etcd that `cfg`'s `[cluster]` names, under `[kv]
/// cluster_prefix`. `why` says what needs it, for the error when the coordinator is not etcd
/// (e.g. "[kv] cluster = true (or mojim kv --cluster)").
pub fn topology_store(cfg: &Config, why: &str) -> Result<TopologyStore, KvError> {
    let client = etcd_client(cfg, why)?;
    let kv = crate::KvSection::from_config(cfg)?;
    let prefix = kv.cluster_prefix.trim_end_matches('/');
    if !prefix.starts_with('/') {
        return Err(KvError::Config(format!(
            "[kv] cluster_prefix = {:?} must start with '/' (e.g. \"/mojim/kv\")",
            kv.cluster_prefix
        )));
    }
    Ok(TopologyStore::new(client, prefix))
}

/// A client of the etcd that `cfg`'s `[cluster]` names (endpoints and TLS files). `why` says
/// what needs it, for the error when the coordinator is not etcd.
pub fn etcd_client(cfg: &Config, why: &str) -> Result<Client, KvError> {
    let Some(etcd) = cfg.etcd()? else {
        return Err(KvError::Config(format!(
            "{why} needs the etcd coordinator, where the cluster's topology lives: set [cluster] \
             coordinator = \"etcd\" and etcd_endpoints (it is {:?})",
            cfg.file.cluster.coordinator
        )));
    };
    let tls = match &etcd.tls {
        None => None,
        Some(f) => {
            let identity = f.identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            Some(EtcdTls::load(&f.ca_file, identity).map_err(|e| KvError::Config(format!("[cluster] {e}")))?)
        }
    };
    Client::with_tls(&etcd.endpoints, ETCD_TIMEOUT, tls)
        .map_err(|e| KvError::Config(format!("[cluster] etcd_endpoints: {e}")))
}
