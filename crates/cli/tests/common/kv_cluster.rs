//! Redis Cluster mode in tests: `mojim` commands run to their end against a cluster's
//! configuration, free addresses on a loopback host, and named `mojim serve` nodes.

use super::{exe, Cluster};
use mojim_tools::child::ChildNode;
use std::process::{Command, Output};

/// `mojim <args>` with the cluster's configuration, run to its end.
pub fn mojim(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe());
    cmd.args(args).args(["--config", c.cfg_path.to_str().expect("utf-8")]);
    cmd.env("MOJIM_LOG", "warn");
    cmd.output().expect("run mojim")
}

/// What a command printed, stdout then stderr.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `mojim <args>` and requires it to succeed; returns its output.
pub fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = mojim(c, args);
    assert!(o.status.success(), "mojim {args:?} failed: {}", text(&o));
    text(&o)
}

/// Runs `mojim <args>` and requires it to fail saying each of `says`.
pub fn refused(c: &Cluster, args: &[&str], says: &[&str]) -> String {
    let o = mojim(c, args);
    let t = text(&o);
    assert!(!o.status.success(), "mojim {args:?} should have failed: {t}");
    for s in says {
        assert!(t.contains(s), "mojim {args:?} does not say {s:?}: {t}");
    }
    t
}

/// A loopback address nothing listens on now.
pub fn free_addr() -> String {
    free_addr_on("127.0.0.1")
}

/// An address on `host` (a loopback address such as 127.0.0.2) nothing listens on now.
pub fn free_addr_on(host: &str) -> String {
    let l = std::net::TcpListener::bind(format!("{host}:0")).expect("bind");
    l.local_addr().expect("address").to_string()
}

/// `mojim serve --node NAME` of the cluster's configuration in folder `name`, listening on
/// `listen`, feeding `backups`.
pub fn named_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut args = vec!["serve", "--config", cfg, "--listen", listen, "--node", name];
    args.extend(["--dir", dir.to_str().expect("utf-8")]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(exe(), &args).expect("start a named node")
}
