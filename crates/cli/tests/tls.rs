//! Mutual TLS between real processes: a cluster made by `mojim init --tls` replicates over
//! TLS and fails over through a backup; an application's certificate reads status but cannot
//! promote; a plaintext peer and a TLS one are each refused naming `[security] tls`; an expired
//! certificate and another CA's are refused on lanes and operator connections, by the node and
//! by the connecting side, the refusing side naming the subject and the reason; a node reloads
//! its certificate on SIGHUP while its primary keeps syncing, and keeps the old one when the
//! new files are bad; an operator whose certificate a reloaded revocation list names is
//! refused, naming it.

mod common;

use common::tls::context;
use mojim::config::{write_private, Config};
use mojim::{Primary, PrimaryOptions};
use mojim_node::admin_client::AdminClient;
use mojim_transport::tls::pki::{Ca, Issued, Validity};
use mojim_transport::{AnyTransport, Conn, Role, TlsContext, Transport};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

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
    serve_logged(&d.join("mojim.toml"), &d.join("node"), None)
}

/// `mojim serve` with `cfg`, its files in `dir`, its log (stderr) in `log` when given.
fn serve_logged(cfg: &Path, dir: &Path, log: Option<&Path>) -> Node {
    let stderr = match log {
        Some(l) => Stdio::from(std::fs::File::create(l).expect("create the node's log")),
        None => Stdio::null(),
    };
    let mut child = Command::new(common::exe())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(cfg)
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(stderr)
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
    // Nor add or remove a backup; an operator's may.
    for op in ["add", "remove"] {
        let out = cli(&d, &["backup", op, "--addr", addr, "127.0.0.1:9"], Some("application"));
        assert!(!out.status.success(), "backup {op}: {}", text(&out));
        let t = text(&out);
        assert!(t.contains("\"application\" (role application) may not run operator commands"), "{t}");
        let out = cli(&d, &["backup", op, "--addr", addr, "127.0.0.1:9"], Some("operator"));
        assert!(out.status.success(), "backup {op}: {}", text(&out));
    }
    // An operator's may promote.
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

/// Replaces the certificates `mojim init --tls` made with ones from a CA of this test's (so
/// that it can issue more): `ca.pem`, and `node`, `operator` and `application` certificates.
fn reissue(d: &Path) -> Ca {
    let ca = Ca::new("test cluster CA").unwrap();
    write_private(&d.join("tls/ca.pem"), ca.cert_pem()).unwrap();
    for role in [Role::Node, Role::Operator, Role::Application] {
        issue(d, &ca, role.name(), role, Validity::Years(1));
    }
    ca
}

/// Writes a certificate for `subject` with `role` to `d`/tls/`subject`.pem and its key beside.
fn issue(d: &Path, ca: &Ca, subject: &str, role: Role, validity: Validity) -> Issued {
    let c = ca.issue(subject, role, validity).unwrap();
    write_private(&d.join(format!("tls/{subject}.pem")), &c.cert_pem).unwrap();
    write_private(&d.join(format!("tls/{subject}.key")), &c.key_pem).unwrap();
    c
}

/// A configuration beside `d`/mojim.toml, named `name`, trusting both the cluster's CA and
/// `other` (`tls/bundle.pem`, as during a change of CA), with `cert` as its certificate.
fn config_trusting_both(d: &Path, other: &Ca, name: &str, cert: &str) -> PathBuf {
    let bundle = format!("{}{}", std::fs::read_to_string(d.join("tls/ca.pem")).unwrap(), other.cert_pem());
    write_private(&d.join("tls/bundle.pem"), &bundle).unwrap();
    let text = std::fs::read_to_string(d.join("mojim.toml"))
        .unwrap()
        .replacen("ca_file = \"tls/ca.pem\"", "ca_file = \"tls/bundle.pem\"", 1)
        .replacen("tls/node.pem", &format!("tls/{cert}.pem"), 1)
        .replacen("tls/node.key", &format!("tls/{cert}.key"), 1);
    let p = d.join(name);
    write_private(&p, &text).unwrap();
    p
}

/// Waits until `t` is past by more than a second (certificates count whole seconds).
fn wait_until_past(t: SystemTime) {
    while SystemTime::now() < t + Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the log at `path` holds every one of `needles`; its text.
fn wait_log(path: &Path, needles: &[&str]) -> String {
    let t0 = Instant::now();
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if needles.iter().all(|n| t.contains(n)) {
            return t;
        }
        assert!(t0.elapsed() < common::WAIT, "the node's log lacks {needles:?}:\n{t}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens a primary on `d`'s region against `addr` with `tls`; the error.
fn open_refused(d: &Path, addr: &str, tls: Arc<TlsContext>) -> String {
    let cfg = Config::load(&d.join("mojim.toml")).unwrap();
    let mut opts = PrimaryOptions::from_config(&cfg, false).unwrap();
    opts.mirror = addr.to_string();
    opts.tls = Some(tls);
    opts.connect_timeout = Duration::from_secs(5);
    match Primary::open(&opts) {
        Ok(_) => panic!("a primary with a refused certificate opened"),
        Err(e) => e.to_string(),
    }
}

/// Connects as an operator to `addr` with `tls`; the error.
fn admin_refused(d: &Path, addr: &str, tls: Arc<TlsContext>) -> String {
    let secret = Config::load(&d.join("mojim.toml")).unwrap().secret(false).unwrap();
    match AdminClient::connect_tls(addr, &secret, Some(tls), Duration::from_secs(5))
        .and_then(|mut a| a.status())
    {
        Ok(_) => panic!("an operator with a refused certificate was answered"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_node_refuses_expired_and_foreign_certificates_naming_them() {
    let d = dir("refuses");
    init(&d);
    let ca = reissue(&d);
    let other = Ca::new("another CA").unwrap();
    for (subject, role) in
        [("stranger-application", Role::Application), ("stranger-operator", Role::Operator)]
    {
        issue(&d, &other, subject, role, Validity::Years(1));
    }
    // Certificates valid now, expired once the node checks them.
    let end = SystemTime::now() + Duration::from_secs(4);
    issue(&d, &ca, "brief-application", Role::Application, Validity::Until(end));
    issue(&d, &ca, "brief-operator", Role::Operator, Validity::Until(end));
    let (brief_app, brief_op) =
        (context(&d, "ca.pem", "brief-application"), context(&d, "ca.pem", "brief-operator"));
    let log = d.join("node.log");
    let node = serve_logged(&d.join("mojim.toml"), &d.join("node"), Some(&log));
    let addr = node.addr.as_str();
    let not_ours = "is not signed by this side's cluster CA";

    // Another CA's certificate, from a side that trusts both CAs: on a lane ...
    config_trusting_both(&d, &other, "both.toml", "node");
    let e = open_refused(&d, addr, context(&d, "bundle.pem", "stranger-application"));
    assert!(e.contains("refused this side's certificate"), "{e}");
    wait_log(&log, &["stranger-application", not_ours]);
    // ... and on an operator's connection (the command-line tool).
    let mut c = Command::new(common::exe());
    c.args(["status", "--addr", addr, "--config"]).arg(d.join("both.toml"));
    c.env("MOJIM_CERT_FILE", d.join("tls/stranger-operator.pem"));
    c.env("MOJIM_KEY_FILE", d.join("tls/stranger-operator.key"));
    let out = c.output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("refused this side's certificate"), "{}", text(&out));
    wait_log(&log, &["stranger-operator", not_ours]);

    // Expired certificates, on a lane and on an operator's connection.
    wait_until_past(end);
    let e = open_refused(&d, addr, brief_app);
    assert!(e.contains("refused this side's certificate"), "{e}");
    wait_log(&log, &["brief-application", "it has expired"]);
    let e = admin_refused(&d, addr, brief_op);
    assert!(e.contains("refused this side's certificate"), "{e}");
    wait_log(&log, &["brief-operator", "it has expired"]);
    drop(node);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_connecting_side_refuses_a_node_with_an_expired_or_foreign_certificate() {
    let d = dir("refused");
    init(&d);
    let ca = reissue(&d);
    let other = Ca::new("another CA").unwrap();
    issue(&d, &other, "stranger-node", Role::Node, Validity::Years(1));
    let end = SystemTime::now() + Duration::from_secs(4);
    issue(&d, &ca, "brief-node", Role::Node, Validity::Until(end));
    // A node with another CA's certificate (it trusts both CAs itself) ...
    let foreign = config_trusting_both(&d, &other, "foreign.toml", "stranger-node");
    let foreign = serve_logged(&foreign, &d.join("foreign"), None);
    // ... and one whose certificate expires while it runs.
    let brief = config_trusting_both(&d, &other, "brief.toml", "brief-node");
    let brief = serve_logged(&brief, &d.join("brief"), None);
    let app = context(&d, "ca.pem", "application");

    let check = |e: &str, subject: &str, reason: &str| {
        assert!(e.contains(&format!("subject {subject:?}")) && e.contains(reason), "{e}");
    };
    let not_ours = "is not signed by this side's cluster CA";
    check(&open_refused(&d, &foreign.addr, app.clone()), "stranger-node", not_ours);
    let out = cli(&d, &["status", "--addr", &foreign.addr], Some("operator"));
    assert!(!out.status.success());
    check(&text(&out), "stranger-node", not_ours);

    wait_until_past(end);
    check(&open_refused(&d, &brief.addr, app), "brief-node", "it has expired");
    let out = cli(&d, &["status", "--addr", &brief.addr], Some("operator"));
    assert!(!out.status.success());
    check(&text(&out), "brief-node", "it has expired");
    drop((foreign, brief));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_tls_cluster_fails_over_through_its_backup() {
    let d = dir("failover");
    init(&d);
    let cfg_path = d.join("mojim.toml");
    let backup = serve_logged(&cfg_path, &d.join("b"), None);
    let mut child = Command::new(common::exe())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg_path)
        .arg("--dir")
        .arg(d.join("m"))
        .args(["--backup", &backup.addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let mirror = Node { child, addr: line.trim().trim_start_matches("serving on ").to_string() };

    let cfg = Config::load(&cfg_path).unwrap();
    let mut o = PrimaryOptions::from_config(&cfg, false).unwrap();
    assert!(o.tls.is_some(), "the application's options carry its certificate");
    o.mirror = mirror.addr.clone();
    let old = Primary::open(&o).expect("a primary over TLS");
    let page: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    old.write(0, &page).unwrap();
    old.msync(0, page.len() as u64).unwrap();

    // The operator promotes the mirror; its backup is drained first, over TLS.
    let out = cli(&d, &["promote", "--addr", &mirror.addr, "--peer", &backup.addr], Some("operator"));
    assert!(out.status.success(), "{}", text(&out));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(reply["backups_drained"], true, "{reply}");
    drop(old);

    // The application restarts on the promoted copy, the backup its mirror, over TLS.
    let mut o2 = o.clone();
    o2.region_path = d.join("m").join("data.mojim");
    o2.mirror = backup.addr.clone();
    let p = Primary::open(&o2).expect("open the promoted copy over TLS");
    let mut got = vec![0u8; page.len()];
    p.read(0, &mut got).unwrap();
    assert_eq!(got, page, "what was acknowledged survived the fail-over");
    // The backup was drained before the promotion: it may hold every group already (no copy
    // runs), or be brought up to date by one.
    if let Some(st) = p.wait_resync(common::WAIT) {
        assert!(st.done, "the copy to the backup failed: {st:?}");
    }
    p.write(8192, b"after").unwrap();
    p.msync(8192, 5).unwrap();
    drop(p);
    // The backup, now the mirror, holds it once applied and consistent (read over TLS).
    let secret = cfg.secret(false).unwrap();
    let op = context(&d, "ca.pem", "operator");
    let mut a = AdminClient::connect_tls(&backup.addr, &secret, Some(op), Duration::from_secs(5)).unwrap();
    common::wait_applied(&mut a);
    common::wait_status(&mut a, "the copy to be consistent", |st| st.consistent);
    let image = common::mirror_image(&mut a, 16384);
    assert_eq!(&image[..8192], &page[..]);
    assert_eq!(&image[8192..8197], b"after");
    drop((mirror, backup));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Sends SIGHUP to `node`.
fn sighup(node: &Node) {
    let pid = rustix::process::Pid::from_raw(node.child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).expect("send SIGHUP");
}

/// How many times `needle` is in the log at `path`.
fn count(path: &Path, needle: &str) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().matches(needle).count()
}

/// Waits until the log at `path` holds `needle` `n` times; its text.
fn wait_count(path: &Path, needle: &str, n: usize) -> String {
    let t0 = Instant::now();
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if t.matches(needle).count() >= n {
            return t;
        }
        assert!(t0.elapsed() < common::WAIT, "the log lacks {needle:?} ({n} times):\n{t}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The subject of the certificate the node at `addr` presents to a new connection.
fn presented(addr: &str, tls: &Arc<TlsContext>) -> String {
    let c = AnyTransport::new(Some(tls.clone())).connect(addr, Duration::from_secs(5)).expect("a handshake");
    c.peer_identity().expect("the node's identity").subject
}

#[test]
fn a_node_reloads_its_certificate_on_sighup_and_keeps_a_bad_one_out() {
    let d = dir("reload");
    init(&d);
    let ca = reissue(&d);
    let log = d.join("node.log");
    let node = serve_logged(&d.join("mojim.toml"), &d.join("node"), Some(&log));
    let op = context(&d, "ca.pem", "operator");
    assert_eq!(presented(&node.addr, &op), "node");

    // A primary's session, running across the reloads.
    let cfg = Config::load(&d.join("mojim.toml")).unwrap();
    let mut opts = PrimaryOptions::from_config(&cfg, false).unwrap();
    opts.mirror = node.addr.clone();
    let p = Primary::open(&opts).expect("a primary over TLS");
    p.write(0, b"before").unwrap();
    p.msync(0, 6).unwrap();

    // New files in place of the old, then SIGHUP: new connections see the new certificate.
    let renewed = ca.issue("node-renewed", Role::Node, Validity::Years(2)).unwrap();
    write_private(&d.join("tls/node.pem"), &renewed.cert_pem).unwrap();
    write_private(&d.join("tls/node.key"), &renewed.key_pem).unwrap();
    sighup(&node);
    let t = wait_log(&log, &["SIGHUP: reloaded the [security] TLS files"]);
    assert!(t.contains("certificate of \"node-renewed\" (role node), valid until 20"), "{t}");
    assert_eq!(presented(&node.addr, &op), "node-renewed");
    p.write(6, b" during").unwrap();
    p.msync(6, 7).unwrap();

    // A broken key: refused, logged naming the setting and the file; the node goes on with the
    // certificate it has.
    write_private(&d.join("tls/node.key"), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        .unwrap();
    sighup(&node);
    let key = d.join("tls/node.key");
    let t = wait_log(&log, &["SIGHUP: kept the [security] TLS files loaded before"]);
    assert!(t.contains(&format!("[security] key_file {}", key.display())), "{t}");
    assert_eq!(presented(&node.addr, &op), "node-renewed");
    p.write(13, b" after").unwrap();
    p.msync(13, 6).unwrap();
    drop(p);
    let out = cli(&d, &["cat", "--addr", &node.addr, "--offset", "0", "--len", "19"], Some("operator"));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(&out.stdout[..19], b"before during after");
    drop(node);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_operator_a_reloaded_revocation_list_names_is_refused() {
    let d = dir("revoked");
    init(&d);
    let ca = reissue(&d);
    let leaving = issue(&d, &ca, "operator-leaving", Role::Operator, Validity::Years(1));
    // The node's configuration names a revocation list (the operators' does not).
    write_private(&d.join("tls/crl.pem"), &ca.revocation_list(1, &[]).unwrap()).unwrap();
    let text_cfg = std::fs::read_to_string(d.join("mojim.toml")).unwrap().replacen(
        "key_file = \"tls/node.key\"",
        "key_file = \"tls/node.key\"\ncrl_file = \"tls/crl.pem\"",
        1,
    );
    assert!(text_cfg.contains("crl_file"), "{text_cfg}");
    write_private(&d.join("node.toml"), &text_cfg).unwrap();
    let log = d.join("node.log");
    let node = serve_logged(&d.join("node.toml"), &d.join("node"), Some(&log));
    let addr = node.addr.as_str();
    let out = cli(&d, &["status", "--addr", addr], Some("operator-leaving"));
    assert!(out.status.success(), "{}", text(&out));

    write_private(&d.join("tls/crl.pem"), &ca.revocation_list(2, &[&leaving]).unwrap()).unwrap();
    let reloads = count(&log, "SIGHUP: reloaded");
    sighup(&node);
    wait_count(&log, "SIGHUP: reloaded the [security] TLS files", reloads + 1);
    let out = cli(&d, &["status", "--addr", addr], Some("operator-leaving"));
    assert!(!out.status.success());
    assert!(text(&out).contains("refused this side's certificate"), "{}", text(&out));
    wait_log(&log, &["\"operator-leaving\"", "it has been revoked"]);
    // Another operator still works.
    let out = cli(&d, &["status", "--addr", addr], Some("operator"));
    assert!(out.status.success(), "{}", text(&out));
    drop(node);
    std::fs::remove_dir_all(&d).unwrap();
}
