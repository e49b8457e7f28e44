//! The addresses the topology gives for this node against the ones its server listens on.
//! `MOVED`, `ASK` and `CLUSTER SLOTS` send clients to the node's `kv_addr` (and TLS clients to
//! its `kv_tls_addr`); a server that does not listen there would send every client, its own
//! included, to an address nobody answers. So cluster mode refuses to start then, naming both.

use super::topology::ShardNode;
use crate::error::KvError;
use crate::options::split_host_port;
use std::net::{IpAddr, ToSocketAddrs};

/// Whether a server listening on `listen` ("host:port") answers at `addr` ("host:port"): the
/// same port, and the same host, or a wildcard listen (`0.0.0.0`, `::`), or host names that
/// resolve to a common address. A name of `addr` that does not resolve here is taken as
/// answered (this node cannot tell; its clients may resolve it otherwise).
pub fn answers_at(listen: &str, addr: &str) -> bool {
    let (Some((lh, lp)), Some((ah, ap))) = (split_host_port(listen), split_host_port(addr)) else {
        return false;
    };
    if lp != ap || lp == 0 {
        return false;
    }
    if lh == ah {
        return true;
    }
    let Some(listened) = ips(&lh, lp) else { return false };
    if listened.iter().any(IpAddr::is_unspecified) {
        return true;
    }
    match ips(&ah, ap) {
        Some(at) => at.iter().any(|ip| listened.contains(ip)),
        None => true,
    }
}

/// The addresses of `host`: itself if it is one, else what it resolves to; `None` if it does
/// not resolve.
fn ips(host: &str, port: u16) -> Option<Vec<IpAddr>> {
    match host.parse::<IpAddr>() {
        Ok(ip) => Some(vec![ip]),
        Err(_) => (host, port).to_socket_addrs().ok().map(|all| all.map(|a| a.ip()).collect()),
    }
}

/// Refuses a server of `node` that listens in plaintext on `listen` ("": none) and over TLS on
/// `tls_listen` ("": none) where the topology (at `key`) does not send clients to it.
pub fn check_listen(key: &str, node: &ShardNode, listen: &str, tls_listen: &str) -> Result<(), KvError> {
    let refuse = |what: &str, addr: &str, setting: &str, listened: &str| {
        let listens = if listened.is_empty() {
            format!("this server has no {setting} listener")
        } else {
            format!("this server listens on {listened} ({setting})")
        };
        let port = addr.rsplit_once(':').map_or("PORT", |(_, p)| p);
        Err(KvError::Config(format!(
            "the cluster topology at {key} gives node {} the address {addr} ({what}: where MOVED, ASK and \
             CLUSTER SLOTS send clients), but {listens}: listen on {addr} (or 0.0.0.0:{port}), or give the \
             node the address it listens on in the topology (`mojim kv cluster status` shows it)",
            node.name
        )))
    };
    match &node.kv_tls_addr {
        Some(tls_addr) => {
            if !answers_at(tls_listen, tls_addr) {
                return refuse("kv_tls_addr", tls_addr, "--tls-listen or [kv] tls_listen", tls_listen);
            }
            // Without a plaintext listener no client is sent to kv_addr.
            if !listen.is_empty() && !answers_at(listen, &node.kv_addr) {
                return refuse("kv_addr", &node.kv_addr, "--listen or [kv] listen", listen);
            }
        }
        None => {
            // TLS clients are sent to kv_addr too: the plaintext listener, or the TLS one alone.
            let (listened, setting) = if listen.is_empty() {
                (tls_listen, "--tls-listen or [kv] tls_listen")
            } else {
                (listen, "--listen or [kv] listen")
            };
            if !answers_at(listened, &node.kv_addr) {
                return refuse("kv_addr", &node.kv_addr, setting, listened);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kv: &str, tls: Option<&str>) -> ShardNode {
        ShardNode {
            name: "a1".into(),
            kv_addr: kv.into(),
            serve_addr: "127.0.0.1:7070".into(),
            zone: String::new(),
            kv_tls_addr: tls.map(String::from),
        }
    }

    #[test]
    fn an_address_is_answered_by_the_same_one_or_a_wildcard_on_its_port() {
        assert!(answers_at("127.0.0.1:6379", "127.0.0.1:6379"));
        assert!(answers_at("0.0.0.0:6379", "10.1.2.3:6379"));
        assert!(answers_at("[::]:6379", "10.1.2.3:6379"));
        assert!(answers_at("[::1]:6379", "[::1]:6379"));
        assert!(answers_at("127.0.0.1:6379", "localhost:6379"));
        assert!(answers_at("localhost:6379", "127.0.0.1:6379"));
        assert!(!answers_at("127.0.0.1:6380", "127.0.0.1:6379"), "another port");
        assert!(!answers_at("127.0.0.2:6379", "127.0.0.1:6379"), "another host");
        assert!(!answers_at("0.0.0.0:0", "127.0.0.1:6379"), "any free port is no port the topology can name");
        assert!(!answers_at("", "127.0.0.1:6379"), "no listener");
    }

    #[test]
    fn a_server_the_topology_does_not_send_clients_to_is_refused_naming_both() {
        let plain = node("127.0.0.1:6379", None);
        assert!(check_listen("/k", &plain, "127.0.0.1:6379", "").is_ok());
        assert!(check_listen("/k", &plain, "0.0.0.0:6379", "127.0.0.1:6380").is_ok());
        let e = check_listen("/k", &plain, "127.0.0.1:6390", "").unwrap_err().to_string();
        assert!(e.contains("gives node a1 the address 127.0.0.1:6379 (kv_addr"), "{e}");
        assert!(e.contains("listens on 127.0.0.1:6390 (--listen or [kv] listen)"), "{e}");
        assert!(e.contains("listen on 127.0.0.1:6379 (or 0.0.0.0:6379)"), "{e}");
        // TLS alone and no kv_tls_addr: TLS clients are sent to kv_addr.
        assert!(check_listen("/k", &plain, "", "127.0.0.1:6379").is_ok());
        let e = check_listen("/k", &plain, "", "127.0.0.1:6380").unwrap_err().to_string();
        assert!(e.contains("(--tls-listen or [kv] tls_listen)"), "{e}");

        let tls = node("127.0.0.1:6379", Some("127.0.0.1:6380"));
        assert!(check_listen("/k", &tls, "127.0.0.1:6379", "127.0.0.1:6380").is_ok());
        assert!(
            check_listen("/k", &tls, "", "127.0.0.1:6380").is_ok(),
            "no plaintext client is sent anywhere"
        );
        let e = check_listen("/k", &tls, "127.0.0.1:6379", "").unwrap_err().to_string();
        assert!(e.contains("127.0.0.1:6380 (kv_tls_addr") && e.contains("has no --tls-listen"), "{e}");
        let e = check_listen("/k", &tls, "127.0.0.1:6378", "127.0.0.1:6380").unwrap_err().to_string();
        assert!(e.contains("(kv_addr"), "{e}");
    }
}
