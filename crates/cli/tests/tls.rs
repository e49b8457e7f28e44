//! Mutual TLS between real processes: a cluster made by `mojim init --tls` replicates over
//! TLS; an application's certificate reads status but cannot promote; a plaintext peer and a
//! TLS one are each refused naming `[security] tls`.

mod common;

use mojim::config::Config;
use mojim::{Primary, PrimaryOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

struct Node {
    child: Child,
    addr: String,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mojim-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn init(d: &Path) {
    let out = Command::new(common::exe())
        .args(["init", "--tls", "--size", "1MiB", "--listen", "127.0.0.1:0", "--dir"])
        .arg(d)
        .output()
        .expect("run mojim init");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn serve(d: &Path) -> Node {
    let mut child = Command::new(common::exe())
        .args(["serve", "--config"])
        .arg(d.join("mojim.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run mojim serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("serving on ").unwrap_or_else(|| panic!("{line:?}")).to_string();
    Node { child, addr }
}

fn cli(d: &Path, args: &[&str], cert: Option<&str>) -> Output {
    let mut c = Command::new(common::exe());
    c.args(args).arg("--config").arg(d.join("mojim.toml"));
    if let Some(role) = cert {
        c.env("MOJIM_CERT_FILE", d.join(format!("tls/{role}.pem")));
        c.env("MOJIM_KEY_FILE", d.join(format!("tls/{role}.key")));
    }
    c.output().expect("run mojim")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_tls_cluster_replicates_and_roles_hold() {
    let d = dir("roles");
    init(&d);
    use std::os::unix::fs::PermissionsExt;
    for f in ["ca.key", "node.key", "operator.key", "application.key"] {
        let mode = std::fs::metadata(d.join("tls").join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f}");
    }
    let node = serve(&d);
    // An application writes and syncs over TLS.
    let cfg = Config::load(&d.join("mojim.toml")).unwrap();
    let mut opts = PrimaryOptions::from_config(&cfg, false).unwrap();
    opts.mirror = node.addr.clone();
    let p = Primary::open(&opts).expect("a primary over TLS");
    p.write(0, b"over tls").unwrap();
    p.msync(0, 8).unwrap();
    drop(p);
    let addr = node.addr.as_str();
    let out = cli(&d, &["cat", "--addr", addr, "--offset", "0", "--len", "8"], Some("operator"));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(&out.stdout[..8], b"over tls");
    // An application's certificate reads status, and may not promote.
    let out = cli(&d, &["status", "--addr", addr], Some("application"));
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(&d, &["promote", "--addr", addr], Some("application"));
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("\"application\" (role application) may not run operator commands"), "{t}");
    // An operator's may.
    let out = cli(&d, &["promote", "--addr", addr], Some("operator"));
    assert!(out.status.success(), "{}", text(&out));
    drop(node);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn plaintext_and_tls_peers_are_refused_naming_the_setting() {
    let d = dir("mixed");
    init(&d);
    let node = serve(&d);
    // The same cluster's configuration with TLS off: its secret still matches.
    let plain = dir("mixed-plain");
    std::fs::create_dir_all(&plain).unwrap();
    let cfg = std::fs::read_to_string(d.join("mojim.toml")).unwrap().replacen("tls = true", "tls = false", 1);
    mojim::config::write_private(&plain.join("mojim.toml"), &cfg).unwrap();
    let out = cli(&plain, &["status", "--addr", &node.addr], None);
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("this node speaks TLS ([security] tls = true)"), "{t}");
    drop(node);
    // A plaintext node, and a TLS operator.
    let mut child = Command::new(common::exe())
        .args(["serve", "--config"])
        .arg(plain.join("mojim.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let node = Node { child, addr: line.trim().trim_start_matches("serving on ").to_string() };
    let out = cli(&d, &["status", "--addr", &node.addr], Some("operator"));
    assert!(!out.status.success());
    let t = text(&out);
    assert!(t.contains("[security] tls"), "{t}");
    drop(node);
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&plain).unwrap();
}
