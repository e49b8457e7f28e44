//! `[kv]`: `mojim kv`'s section of the configuration file: its keys, their defaults, and the
//! text `mojim init` writes for it. The library keeps the section as written; this crate reads
//! it ([`KvSection::from_config`]) and checks its values ([`crate::KvOptions`]).

use crate::error::KvError;
use mojim::config::{OwnedSection, SectionSchema};
use mojim::Config;
use serde::{Deserialize, Serialize};

/// `[kv]`: `mojim kv`, a Redis-protocol server whose data lives in the region. Every field has
/// a default (shown as `key = default`). The library keeps the section as written
/// ([`mojim::config::ConfigFile::kv`]); this is its schema, and [`KvOptions`](crate::KvOptions)
/// checks the values.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KvSection {
    /// `listen = "127.0.0.1:6379"`: the address Redis clients connect to (`--listen`
    /// overrides it; port 0 takes any free port).
    pub listen: String,
    /// `max_clients = 10000`: connections served at once; one more is answered with an error
    /// and closed.
    pub max_clients: u64,
    /// `max_bulk = "8MiB"`: the longest string (a key, a value, a field) in a request; a
    /// longer one closes that client with an error. A SET of that size needs about twice it in
    /// one group, and a group carries at most half of `[mirror] log_capacity`: max_bulk may be
    /// at most log_capacity / 4 − 512 KiB (15.5 MiB with the default 64 MiB log); lower it
    /// with the log.
    pub max_bulk: String,
    /// `max_args = 1048576`: the most arguments in one request.
    pub max_args: u64,
    /// `max_inline = "64KiB"`: the longest inline command (and `*`/`$` header line).
    pub max_inline: String,
    /// `announce = ""`: the address SENTINEL answers give for this server (empty: `listen`);
    /// set it when listening on 0.0.0.0.
    pub announce: String,
    /// `sentinel_name = "mojim"`: the master name Redis clients' Sentinel support asks for.
    pub sentinel_name: String,
    /// `sentinels = []`: the `mojim kv` address of every node that may become primary, for
    /// `SENTINEL sentinels` (clients try them in turn to find the current primary).
    pub sentinels: Vec<String>,
    /// `read_barrier = true`: a turn of reads alone still sends a one-word group and waits
    /// for the mirror before answering, so that a primary replaced by a promotion finds out
    /// before it answers a read (linearizable reads, for a round trip each turn); false answers
    /// reads at once, and a primary cut off from its mirror may then serve stale reads.
    pub read_barrier: bool,
    /// `password = ""`: the password clients give with `AUTH` (or `HELLO ... AUTH`); until a
    /// client has, every command but those is refused with `-NOAUTH`. Empty: no password.
    /// `mojim init` writes a random one. The environment variable `MOJIM_KV_PASSWORD`
    /// overrides it.
    pub password: String,
    /// `protected_mode = true`: without a password, refuse to listen on any address but
    /// loopback (as Redis's protected mode).
    pub protected_mode: bool,
    /// `databases = 16`: the databases clients may select (`SELECT 0` .. `SELECT 15`; 1 to 16).
    pub databases: u64,
    /// `output_limit = "256MiB"`: the most reply bytes a client may have waiting; a command
    /// whose reply would pass it is undone, and the client is sent an error and closed (as
    /// Redis's `client-output-buffer-limit`). It must be at least twice `max_bulk`, and 1 MiB.
    pub output_limit: String,
    /// `tls_listen = ""`: the address Redis clients connect to over TLS (Redis's `tls-port`;
    /// `--tls-listen` overrides it; port 0 takes any free port). Empty: no TLS listener. It
    /// serves beside `listen`, or alone when `listen` is empty.
    pub tls_listen: String,
    /// `tls_cert_file = ""`: the server's certificate (and chain), PEM (Redis's
    /// `tls-cert-file`; relative to this file).
    pub tls_cert_file: String,
    /// `tls_key_file = ""`: its private key, PEM, mode 0600 (`tls-key-file`).
    pub tls_key_file: String,
    /// `tls_ca_cert_file = ""`: the CA certificates clients' certificates must chain to, PEM
    /// (`tls-ca-cert-file`); needed unless `tls_auth_clients = "no"`.
    pub tls_ca_cert_file: String,
    /// `tls_auth_clients = "yes"`: "yes": a client must present a certificate from
    /// `tls_ca_cert_file`; "optional": one it presents must be, but it may present none; "no":
    /// none is asked for (`tls-auth-clients`).
    pub tls_auth_clients: String,
    /// `tls_protocols = "TLSv1.2 TLSv1.3"`: the TLS versions served, separated by spaces
    /// (`tls-protocols`); only TLSv1.2 and TLSv1.3 are offered.
    pub tls_protocols: String,
    /// `metrics_listen = ""`: the `host:port` of `mojim kv`'s metrics listener (`/metrics`,
    /// `/healthz`, `/readyz`; port 0: any free port); empty: none. Its own setting, not
    /// `[metrics] listen`, because one file serves every node: where `mojim serve` and
    /// `mojim kv` run on one host (a promoted node), each needs its own port.
    /// `mojim kv --metrics-listen` overrides it.
    pub metrics_listen: String,
    /// `cluster = false`: true serves one shard of a Redis Cluster (`mojim kv --cluster` turns
    /// it on too): the topology is read from etcd, so `[cluster] coordinator = "etcd"` is
    /// required, and `mojim kv cluster create` must have written it.
    pub cluster: bool,
    /// `cluster_prefix = "/mojim/kv"`: the etcd prefix the cluster's topology lives under
    /// (`<cluster_prefix>/kv-cluster/topology`). The same for every shard of one cluster, and
    /// apart from each shard's own `[cluster] etcd_prefix` (its roles and lease).
    pub cluster_prefix: String,
    /// `standby = false`: true (`mojim kv --standby`), with `cluster`, on a node that is not its
    /// shard's primary: wait until this node's `mojim serve` has taken the region over (the
    /// roles in etcd name this node the primary and its copy is promoted), then serve that copy
    /// (`[region] path` = the mirror's `<dir>/data.mojim`) and take the shard in the topology.
    pub standby: bool,
}

impl Default for KvSection {
    fn default() -> Self {
        KvSection {
            listen: "127.0.0.1:6379".into(),
            max_clients: 10_000,
            max_bulk: "8MiB".into(),
            max_args: 1 << 20,
            max_inline: "64KiB".into(),
            announce: String::new(),
            sentinel_name: "mojim".into(),
            sentinels: Vec::new(),
            read_barrier: true,
            password: String::new(),
            protected_mode: true,
            output_limit: "256MiB".into(),
            databases: 16,
            tls_listen: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_ca_cert_file: String::new(),
            tls_auth_clients: "yes".into(),
            tls_protocols: "TLSv1.2 TLSv1.3".into(),
            metrics_listen: String::new(),
            cluster: false,
            cluster_prefix: "/mojim/kv".into(),
            standby: false,
        }
    }
}

impl SectionSchema for KvSection {
    const SECTION: OwnedSection = OwnedSection::Kv;
}

impl KvSection {
    /// `cfg`'s `[kv]`, checked against the schema: a key it does not know or a value of the
    /// wrong type is refused, naming the file, `[kv]` and the key.
    pub fn from_config(cfg: &Config) -> Result<KvSection, KvError> {
        Ok(cfg.section()?)
    }

    /// `metrics_listen`, checked to be a `host:port` as `[metrics] listen` is; `None` when
    /// empty (no listener).
    pub fn metrics_listen(&self) -> Result<Option<String>, KvError> {
        Ok(mojim::config::check_metrics_listen(&self.metrics_listen, "[kv] metrics_listen")?)
    }
}

/// The `[kv]` section `mojim init` writes (ending in a blank line, for
/// [`mojim::config::template_with`]): every key with its default and what it does, and a random
/// password.
pub fn template() -> String {
    format!(
        r#"[kv]
# mojim kv: a Redis-protocol server whose keys and values live in this region (on the primary's
# node; after a fail-over, start it on the promoted node). The address Redis clients connect to
# (--listen overrides it).
listen = "127.0.0.1:6379"
# Connections served at once; one more is answered with an error and closed.
max_clients = 10000
# Longest string in a request (a key, a value), most arguments in one, longest inline command:
# a request past any of them closes that client with an error. max_bulk may be at most
# [mirror] log_capacity / 4 - 512KiB (a SET of it is one group of about twice its size, and a
# group carries at most half a lane's log): lower it when you lower log_capacity.
max_bulk = "8MiB"
max_args = 1048576
max_inline = "64KiB"
# Sentinel support for Redis clients: the master name they ask for, the address answers give
# for this server (empty: listen; set it when listening on 0.0.0.0), and the mojim kv address
# of every node that may become primary.
sentinel_name = "mojim"
announce = ""
sentinels = []
# Writes are answered only once the mirror has them. With read_barrier = true a turn of reads
# alone waits for one round trip to the mirror too, so that a primary replaced by a promotion
# (and fenced) cannot answer a read from its old state: linearizable reads. false answers reads at
# once (faster; a primary cut off from its mirror may then serve stale reads).
read_barrier = true
# The password clients give with AUTH (redis-cli -a, redis-py password=): every other command is
# refused until they do. The environment variable MOJIM_KV_PASSWORD overrides it. With no password
# (""), protected_mode refuses to listen on any address but loopback; protected_mode = false lets
# anyone who can reach the port read, change and flush the data.
password = "{kv_password}"
protected_mode = true
# Most reply bytes a client may have waiting: a command whose reply would pass it is undone, and
# the client is sent an error and closed. At least twice max_bulk.
output_limit = "256MiB"
# Databases clients may SELECT (1 to 16).
databases = 16
# TLS for Redis clients (redis-cli --tls, redis-py ssl=True), as Redis's tls-* settings: the
# address it listens on (--tls-listen overrides it; empty: no TLS; listen = "" turns the
# plaintext one off), the server's certificate and key (PEM, relative to this file, the key mode
# 0600) and the CA that clients' certificates must chain to. tls_auth_clients: "yes" (a client
# certificate is required), "optional" (checked if given) or "no". tls_protocols: TLSv1.2 and/or
# TLSv1.3. `mojim init --tls` makes a CA and certificates (tls/ca.pem, tls/node.pem for the
# server, tls/application.pem for clients).
tls_listen = ""
tls_cert_file = ""
tls_key_file = ""
tls_ca_cert_file = ""
tls_auth_clients = "yes"
tls_protocols = "TLSv1.2 TLSv1.3"
# mojim kv's HTTP listener for monitoring: Prometheus metrics on /metrics, /healthz and /readyz
# (ready: it takes writes, its mirror online; docs/METRICS.md). A host:port such as
# "127.0.0.1:9421" (--metrics-listen overrides it); "" opens none. Not [metrics] listen, which
# is mojim serve's: on a promoted node both run. It serves anyone who reaches it.
metrics_listen = ""
# Redis Cluster mode (mojim kv --cluster): this server is one shard of a cluster whose topology
# etcd holds at <cluster_prefix>/kv-cluster/topology ([cluster] coordinator = "etcd"; made by
# `mojim kv cluster create`). cluster_prefix is the same on every shard of one cluster.
cluster = false
cluster_prefix = "/mojim/kv"
# With cluster, on a mirror's node (mojim kv --standby): wait until this node's mojim serve has
# taken the region over (the roles in etcd name it the primary), then serve the promoted copy
# ([region] path = the mirror's <dir>/data.mojim) and take the shard in the topology.
standby = false

"#,
        kv_password = mojim::config::random_uuid().iter().map(|b| format!("{b:02x}")).collect::<String>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim::config::{template_with, ConfigFile};
    use std::path::PathBuf;

    fn config(file: ConfigFile) -> Config {
        Config { file, base: PathBuf::new(), path: Some("/etc/mojim/mojim.toml".into()) }
    }

    fn init_file() -> ConfigFile {
        toml::from_str(&template_with(&[0; 16], 4096, "", "a:1", &[&template()]))
            .expect("the template parses")
    }

    #[test]
    fn the_template_writes_every_default_and_a_random_password() {
        let file = init_file();
        let k = KvSection::from_config(&config(file.clone())).unwrap();
        let defaults = KvSection::default();
        assert!(
            k.password.len() == 32 && k.password.bytes().all(|b| b.is_ascii_hexdigit()),
            "{:?}",
            k.password
        );
        assert_eq!(format!("{:?}", KvSection { password: String::new(), ..k }), format!("{defaults:?}"));
        // Every key of the schema is in the template, so that the file documents each.
        let written: Vec<&String> = file.kv.keys().collect();
        let schema = toml::Table::try_from(&defaults).unwrap();
        assert_eq!(written, schema.keys().collect::<Vec<_>>());
        assert_ne!(template(), template(), "a new password each time");
    }

    #[test]
    fn an_unknown_key_or_a_bad_value_is_named_with_the_file() {
        let mut file = init_file();
        file.kv.insert("max_keys".into(), toml::Value::Integer(5));
        let e = KvSection::from_config(&config(file)).unwrap_err().to_string();
        for needle in
            ["/etc/mojim/mojim.toml: [kv] max_keys: unknown field `max_keys`", "mojim kv's settings"]
        {
            assert!(e.contains(needle), "{needle:?} not in {e}");
        }
        let mut file = init_file();
        file.kv.insert("read_barrier".into(), toml::Value::String("yes".into()));
        let e = KvSection::from_config(&config(file)).unwrap_err().to_string();
        assert!(e.contains("[kv] read_barrier: invalid type: string \"yes\", expected a boolean"), "{e}");
    }

    #[test]
    fn metrics_listen_is_its_own_setting_off_by_default() {
        let mut file = init_file();
        assert_eq!(KvSection::from_config(&config(file.clone())).unwrap().metrics_listen().unwrap(), None);
        file.metrics.listen = "127.0.0.1:9420".into();
        file.edit_section(|k: &mut KvSection| k.metrics_listen = "127.0.0.1:9421".into()).unwrap();
        let k = KvSection::from_config(&config(file.clone())).unwrap();
        assert_eq!(k.metrics_listen().unwrap().as_deref(), Some("127.0.0.1:9421"));
        file.edit_section(|k: &mut KvSection| k.metrics_listen = "9421".into()).unwrap();
        let e = KvSection::from_config(&config(file)).unwrap().metrics_listen().unwrap_err().to_string();
        assert!(e.contains("[kv] metrics_listen = \"9421\" is not a host:port"), "{e}");
    }
}
