//! Mutual TLS for a test cluster: a CA and certificates made by the project's own code (what
//! `mojim init --tls` runs), the configuration that uses them, and the TLS settings of a
//! connecting side with one of them.

use super::Cluster;
use mojim::config::ConfigFile;
use mojim_node::admin_client::AdminClient;
use mojim_transport::tls::TlsFiles;
use mojim_transport::TlsContext;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Turns `[security] tls` on in `f`, with the files [`make_certs`] writes beside the
/// configuration: the node's certificate under `[security]`, the application's under
/// `[primary]` (as `mojim init --tls` writes them).
pub fn configure(f: &mut ConfigFile) {
    f.security.tls = true;
    f.security.ca_file = "tls/ca.pem".into();
    f.security.cert_file = "tls/node.pem".into();
    f.security.key_file = "tls/node.key".into();
    f.primary.cert_file = "tls/application.pem".into();
    f.primary.key_file = "tls/application.key".into();
}

/// Writes a cluster CA and a certificate (and key) for a node, an operator and an application
/// to `<c's folder>/tls`, with `mojim_tools::certs::make_cluster_certs`.
pub fn make_certs(c: &Cluster) {
    mojim_tools::certs::make_cluster_certs(c.dir.path(), "").expect("make the cluster's certificates");
}

/// The TLS settings of a connecting side with `d`/tls's CA file `ca` and the certificate
/// `cert` (`cert`.pem, its key `cert`.key).
pub fn context(d: &Path, ca: &str, cert: &str) -> Arc<TlsContext> {
    let read = |f: &str| std::fs::read(d.join("tls").join(f)).unwrap();
    let (ca_pem, cert_pem, key_pem) = (read(ca), read(&format!("{cert}.pem")), read(&format!("{cert}.key")));
    let (cp, ep, kp) = (PathBuf::from(ca), PathBuf::from(cert), PathBuf::from(cert));
    let files = TlsFiles { ca: (&cp, &ca_pem), cert: (&ep, &cert_pem), key: (&kp, &key_pem), crl: None };
    Arc::new(TlsContext::from_pem(&files).unwrap_or_else(|e| panic!("{cert}: {e}")))
}

/// An operator's connection to `addr`, with the operator's certificate of `c` (made by
/// [`make_certs`]).
pub fn operator(c: &Cluster, addr: &str) -> AdminClient {
    let tls = context(c.dir.path(), "ca.pem", "operator");
    AdminClient::connect_tls(addr, &c.secret(), Some(tls), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("an operator's connection to {addr} over TLS: {e}"))
}
