//! TLS for `mojim kv`'s Redis clients (`[kv] tls_listen` and the other `tls_*` settings, as
//! Redis's `tls-*`): real redis-cli (`--tls`) and redis-py (`ssl=True`) clients run commands
//! over it; with `tls_auth_clients = "yes"` a client without a certificate, or with one from
//! another CA, is refused and the server goes on serving; a client that stalls mid-handshake
//! holds no one else up; plaintext sent to the TLS port closes that connection, with a log line;
//! `listen = ""` serves TLS alone; SIGHUP reloads the server's certificate, keeping the old one
//! when the new files are bad. The certificates are made with the project's own CA code
//! (`mojim init --tls`'s).

mod common;

use common::edit_kv;
use common::kv::{python_with_redis, tool, wait_for, Resp};
use common::{exe, Cluster, TempDir, WAIT};
use mojim::config::write_private;
use mojim_kv::resp::Value;
use mojim_transport::tls::pki::{Ca, Validity};
use mojim_transport::Role;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// A CA, a server certificate and a client certificate from it, and a client certificate from
/// another CA, in a folder of their own.
struct Certs {
    dir: TempDir,
    ca: Ca,
}

impl Certs {
    fn new(test: &str) -> Certs {
        let dir = TempDir::new(&format!("{test}-certs"));
        let write =
            |name: &str, text: &str| write_private(&dir.path().join(name), text).expect("write a PEM file");
        let ca = Ca::new("kv test CA").expect("a CA");
        write("ca.pem", ca.cert_pem());
        for (name, role) in [("server", Role::Node), ("client", Role::Application)] {
            let issued = ca.issue(name, role, Validity::Years(1)).expect("a certificate");
            write(&format!("{name}.pem"), &issued.cert_pem);
            write(&format!("{name}.key"), &issued.key_pem);
        }
        let other = Ca::new("another CA").expect("a CA");
        let stranger = other.issue("stranger", Role::Application, Validity::Years(1)).expect("a certificate");
        write("stranger.pem", &stranger.cert_pem);
        write("stranger.key", &stranger.key_pem);
        Certs { dir, ca }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().expect("utf-8").to_string()
    }

    /// Sets the `[kv] tls_*` files.
    fn configure(&self, f: &mut mojim::config::ConfigFile, auth_clients: &str) {
        edit_kv(f, |k| {
            k.tls_listen = "127.0.0.1:0".into();
            k.tls_cert_file = self.path("server.pem");
            k.tls_key_file = self.path("server.key");
            k.tls_ca_cert_file = self.path("ca.pem");
            k.tls_auth_clients = auth_clients.into();
        });
    }
}

/// `mojim kv` with its log (at info) in a file.
struct Kv {
    child: Child,
    /// The plaintext address ("" when off).
    plain: String,
    tls: String,
    log: PathBuf,
}

impl Drop for Kv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Kv {
    fn start(c: &Cluster, extra: &[&str]) -> Kv {
        let log = c.dir.path().join("kv.log");
        let mut child = Command::new(exe())
            .args(["kv", "--config", c.cfg_path.to_str().expect("utf-8"), "--mirror", &c.mirror_addr()])
            .args(extra)
            .env("MOJIM_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create the log"))
            .spawn()
            .expect("start mojim kv");
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let (mut tls, mut line) = (String::new(), String::new());
        let plain = loop {
            line.clear();
            let n = out.read_line(&mut line).expect("read mojim kv's output");
            assert!(n > 0, "mojim kv exited: {}", std::fs::read_to_string(&log).unwrap_or_default());
            if let Some(a) = line.trim().strip_prefix("serving TLS on ") {
                tls = a.to_string();
            } else if let Some(a) = line.trim().strip_prefix("serving on ") {
                break a.to_string();
            }
        };
        // Keep draining stdout so that the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while out.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        if tls.is_empty() {
            // listen = "": the ready line names the TLS address.
            return Kv { child, plain: String::new(), tls: plain, log };
        }
        Kv { child, plain, tls, log }
    }

    fn tls_port(&self) -> &str {
        self.tls.rsplit_once(':').expect("host:port").1
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it still runs.
    fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

/// A cluster (mirror running) whose configuration has the TLS settings, `edit` after them.
fn cluster(
    test: &str,
    certs: &Certs,
    auth_clients: &str,
    edit: impl FnOnce(&mut mojim::config::ConfigFile),
) -> Cluster {
    let mut c = Cluster::new(test, 64 << 20, |f| {
        certs.configure(f, auth_clients);
        edit(f);
    });
    c.start_mirror();
    c
}

/// Runs `cmd` to its end, failing the test if it has not ended within [`WAIT`] (a server that
/// blocked would otherwise hang the test).
fn finish(mut cmd: Command) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run a client");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WAIT) {
        Ok(out) => out.expect("the client's output"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("a client did not finish within {WAIT:?}: the server is stuck");
        }
    }
}

/// `redis-cli --tls` at `kv`'s TLS port, with the client certificate `cert` (`None`: none).
fn redis_cli(certs: &Certs, kv: &Kv, cert: Option<&str>, args: &[&str]) -> Option<Output> {
    let mut cmd = tool("redis-cli")?;
    cmd.args(["--tls", "--cacert", &certs.path("ca.pem"), "-h", "127.0.0.1", "-p", kv.tls_port()]);
    if let Some(name) = cert {
        cmd.args([
            "--cert",
            &certs.path(&format!("{name}.pem")),
            "--key",
            &certs.path(&format!("{name}.key")),
        ]);
    }
    cmd.args(args);
    Some(finish(cmd))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn all(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs a Python program with the certificates' folder as `argv[1]` and the TLS port as
/// `argv[2]`; `None` without a python3 that has redis-py.
fn python(certs: &Certs, kv: &Kv, program: &str) -> Option<Output> {
    let mut cmd = python_with_redis()?;
    cmd.args(["-c", program, certs.dir.path().to_str().expect("utf-8"), kv.tls_port()]);
    Some(finish(cmd))
}

const REDIS_PY: &str = r#"
import sys, redis
d, port = sys.argv[1], int(sys.argv[2])
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=d + "/ca.pem",
                ssl_certfile=d + "/client.pem", ssl_keyfile=d + "/client.key", ssl_cert_reqs="required")
assert r.set("py", "over tls")
assert r.get("py") == b"over tls"
# A value of several records, and a pipeline longer than one read: the session holds plaintext
# that the socket no longer signals.
big = bytes(range(256)) * (12 << 10)
assert r.set("big", big)
assert r.get("big") == big
p = r.pipeline(transaction=False)
for i in range(20000):
    p.incr("n")
assert p.execute()[-1] == 20000
print("redis-py ok", r.connection_pool.get_connection("PING")._sock.version())
"#;

#[test]
fn redis_cli_and_redis_py_run_commands_over_tls() {
    let certs = Certs::new("kv-tls-clients");
    let c = cluster("kv-tls-clients", &certs, "yes", |_| {});
    let kv = Kv::start(&c, &["--listen", "127.0.0.1:0"]);

    let Some(o) = redis_cli(&certs, &kv, Some("client"), &["SET", "k", "v"]) else { return };
    assert_eq!(stdout(&o), "OK", "{}", all(&o));
    let o = redis_cli(&certs, &kv, Some("client"), &["GET", "k"]).expect("redis-cli");
    assert_eq!(stdout(&o), "v", "{}", all(&o));

    // The same keyspace in the clear, and the settings under Redis's names.
    let mut plain = Resp::connect(&kv.plain);
    assert_eq!(plain.cmd(&["GET", "k"]), Value::Bulk(b"v".to_vec()));
    let config = plain.cmd(&["CONFIG", "GET", "tls-*"]);
    let Value::Array(kvs) = &config else { panic!("CONFIG GET: {config:?}") };
    let pairs: Vec<(String, String)> = kvs
        .chunks(2)
        .map(|p| match p {
            [Value::Bulk(k), Value::Bulk(v)] => {
                (String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(v).into_owned())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let get = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(get("tls-port"), Some(kv.tls_port()));
    assert_eq!(get("tls-auth-clients"), Some("yes"));
    assert_eq!(get("tls-protocols"), Some("TLSv1.2 TLSv1.3"));
    assert_eq!(get("tls-cert-file"), Some(certs.path("server.pem").as_str()));
    assert_eq!(get("tls-ca-cert-file"), Some(certs.path("ca.pem").as_str()));
    let refused = plain.cmd(&["CONFIG", "SET", "tls-auth-clients", "no"]);
    assert!(
        matches!(&refused, Value::Error(e) if String::from_utf8_lossy(e).contains("cannot be changed while mojim kv runs")),
        "{refused:?}"
    );

    let Some(o) = python(&certs, &kv, REDIS_PY) else { return };
    assert!(o.status.success(), "{}", all(&o));
    assert!(stdout(&o).starts_with("redis-py ok TLSv1.3"), "{}", all(&o));
    assert_eq!(plain.cmd(&["GET", "n"]), Value::Bulk(b"20000".to_vec()));

    // TLS 1.2 is served too (tls_protocols' default).
    let tls12 = r#"
import sys, ssl, socket
d, port = sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(cafile=d + "/ca.pem")
ctx.check_hostname = False
ctx.load_cert_chain(d + "/client.pem", d + "/client.key")
ctx.maximum_version = ssl.TLSVersion.TLSv1_2
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
s.sendall(b"PING\r\n")
print(s.recv(100).decode().strip(), s.version())
"#;
    let o = python(&certs, &kv, tls12).expect("python3");
    assert_eq!(stdout(&o), "+PONG TLSv1.2", "{}", all(&o));
}

#[test]
fn strangers_are_refused_and_stalled_or_plaintext_clients_hold_no_one_up() {
    let certs = Certs::new("kv-tls-refused");
    let c = cluster("kv-tls-refused", &certs, "yes", |_| {});
    let mut kv = Kv::start(&c, &["--listen", "127.0.0.1:0"]);
    let ping = |kv: &Kv, cert: Option<&str>| redis_cli(&certs, kv, cert, &["PING"]);
    let Some(o) = ping(&kv, Some("client")) else { return };
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));

    // A client stalled mid-handshake (half a ClientHello), and one that connected and said
    // nothing, hold their own connections only.
    let mut stalled = std::net::TcpStream::connect(&kv.tls).expect("connect");
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]).expect("half a hello");
    let _silent = std::net::TcpStream::connect(&kv.tls).expect("connect");
    let o = ping(&kv, Some("client")).expect("redis-cli");
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));

    // Without a certificate, or with another CA's, nothing is answered.
    for cert in [None, Some("stranger")] {
        let o = ping(&kv, cert).expect("redis-cli");
        assert!(!all(&o).contains("PONG"), "{cert:?} was served: {}", all(&o));
    }
    let o = ping(&kv, Some("client")).expect("redis-cli");
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));

    // Plaintext to the TLS port: closed, no reply, a log line; the others go on.
    let mut confused = Resp::connect(&kv.tls);
    confused.send(&[b"SET", b"plain", b"text"]);
    assert!(confused.closed(), "a plaintext client on the TLS port was answered");
    wait_for("the log line of the plaintext client", || kv.log().contains("spoke plaintext").then_some(()));
    assert!(kv.log().contains("closing a TLS client"), "{}", kv.log());
    let mut plain = Resp::connect(&kv.plain);
    assert_eq!(plain.cmd(&["EXISTS", "plain"]), Value::Int(0));
    assert_eq!(plain.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    let o = ping(&kv, Some("client")).expect("redis-cli");
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));
    assert!(kv.alive(), "mojim kv stopped");
    drop(stalled);
}

#[test]
fn tls_alone_with_optional_client_certificates() {
    let certs = Certs::new("kv-tls-alone");
    // Small requests only: a client's query buffer holds 32 KiB, so that a long pipeline
    // leaves plaintext in the TLS session once the socket is drained.
    let c = cluster("kv-tls-alone", &certs, "optional", |f| {
        edit_kv(f, |k| {
            k.max_bulk = "1KiB".into();
            k.max_inline = "1KiB".into();
        });
    });
    // listen = "": the plaintext listener is off (Redis's `port 0`).
    let mut kv = Kv::start(&c, &["--listen", ""]);
    assert!(kv.plain.is_empty());
    // Optional: a client without a certificate is served, one with a valid one too, one with
    // another CA's is refused.
    let Some(o) = redis_cli(&certs, &kv, None, &["SET", "k", "v"]) else { return };
    assert_eq!(stdout(&o), "OK", "{}", all(&o));
    let o = redis_cli(&certs, &kv, Some("client"), &["GET", "k"]).expect("redis-cli");
    assert_eq!(stdout(&o), "v", "{}", all(&o));
    let o = redis_cli(&certs, &kv, Some("stranger"), &["GET", "k"]).expect("redis-cli");
    assert_ne!(stdout(&o), "v", "another CA's client was served: {}", all(&o));
    let pipeline = r#"
import sys, redis
d, port = sys.argv[1], int(sys.argv[2])
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=d + "/ca.pem", ssl_cert_reqs="required")
for round in range(5):
    p = r.pipeline(transaction=False)
    for i in range(20000):
        p.incr("n")
    assert p.execute()[-1] == 20000 * (round + 1)
print("ok")
"#;
    if let Some(o) = python(&certs, &kv, pipeline) {
        assert_eq!(stdout(&o), "ok", "{}", all(&o));
    }
    let o = redis_cli(&certs, &kv, None, &["CONFIG", "GET", "port"]).expect("redis-cli");
    assert_eq!(stdout(&o), "port\n0", "{}", all(&o));
    let o = redis_cli(&certs, &kv, None, &["CONFIG", "GET", "tls-auth-clients"]).expect("redis-cli");
    assert_eq!(stdout(&o), "tls-auth-clients\noptional", "{}", all(&o));
    assert!(kv.alive());
}

#[test]
fn bad_tls_settings_stop_it_before_it_serves_naming_the_value() {
    let certs = Certs::new("kv-tls-bad");
    type Edit = fn(&mut mojim::config::ConfigFile);
    let cases: [(&str, Edit, &str); 4] = [
        ("protocols", |f| edit_kv(f, |k| k.tls_protocols = "TLSv1.1 TLSv1.2".into()), "TLSv1.1"),
        ("auth", |f| edit_kv(f, |k| k.tls_auth_clients = "sometimes".into()), "\"sometimes\""),
        ("ca", |f| edit_kv(f, |k| k.tls_ca_cert_file.clear()), "needs tls_ca_cert_file"),
        ("none", |f| edit_kv(f, |k| k.listen.clear()), "serve no one"),
    ];
    for (name, edit, expect) in cases {
        let c = Cluster::new(&format!("kv-tls-bad-{name}"), 1 << 20, |f| {
            certs.configure(f, "yes");
            edit(f);
            if name == "none" {
                edit_kv(f, |k| k.tls_listen.clear());
            }
        });
        let o = finish({
            let mut cmd = Command::new(exe());
            cmd.args(["kv", "--config", c.cfg_path.to_str().expect("utf-8")]);
            cmd
        });
        assert!(!o.status.success(), "{name}: it started");
        assert!(all(&o).contains(expect), "{name}: {}", all(&o));
    }
}

/// Prints the common name of the certificate the server at `argv[2]` presents, connecting with
/// the client certificate in `argv[1]`.
const SERVER_SUBJECT: &str = r#"
import socket, ssl, sys
d, port = sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(cafile=d + "/ca.pem")
ctx.check_hostname = False
ctx.load_cert_chain(d + "/client.pem", d + "/client.key")
with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
    with ctx.wrap_socket(s) as t:
        print(dict(x[0] for x in t.getpeercert()["subject"])["commonName"])
"#;

/// The subject of the certificate `kv` presents to a new TLS client; `None` without python3.
fn server_subject(certs: &Certs, kv: &Kv) -> Option<String> {
    let mut cmd = tool("python3")?;
    cmd.args(["-c", SERVER_SUBJECT, certs.dir.path().to_str().expect("utf-8"), kv.tls_port()]);
    let o = finish(cmd);
    assert!(o.status.success(), "{}", all(&o));
    Some(stdout(&o))
}

#[test]
fn sighup_reloads_the_client_facing_certificate() {
    let certs = Certs::new("kv-tls-reload");
    let c = cluster("kv-tls-reload", &certs, "yes", |_| {});
    let mut kv = Kv::start(&c, &["--listen", "127.0.0.1:0"]);
    let Some(subject) = server_subject(&certs, &kv) else { return };
    assert_eq!(subject, "server");
    let sighup = |kv: &Kv| {
        let pid = rustix::process::Pid::from_raw(kv.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).expect("send SIGHUP");
    };

    let renewed = certs.ca.issue("server-renewed", Role::Node, Validity::Years(2)).expect("a certificate");
    write_private(&certs.dir.path().join("server.pem"), &renewed.cert_pem).expect("write");
    write_private(&certs.dir.path().join("server.key"), &renewed.key_pem).expect("write");
    sighup(&kv);
    wait_for("the reload's log line", || {
        kv.log()
            .contains("SIGHUP: reloaded the [kv] tls_* TLS files: certificate of \"server-renewed\"")
            .then_some(())
    });
    assert_eq!(server_subject(&certs, &kv).expect("python3"), "server-renewed");
    let o = redis_cli(&certs, &kv, Some("client"), &["PING"]).expect("redis-cli");
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));

    // A key that is not the certificate's: refused and logged; the server keeps the one it has.
    let other = certs.ca.issue("other", Role::Node, Validity::Years(1)).expect("a certificate");
    write_private(&certs.dir.path().join("server.key"), &other.key_pem).expect("write");
    sighup(&kv);
    wait_for("the refused reload's log line", || {
        kv.log().contains("SIGHUP: kept the [kv] tls_* TLS files loaded before").then_some(())
    });
    assert!(kv.log().contains(&format!("[kv] tls_key_file {}", certs.path("server.key"))), "{}", kv.log());
    assert_eq!(server_subject(&certs, &kv).expect("python3"), "server-renewed");
    let o = redis_cli(&certs, &kv, Some("client"), &["PING"]).expect("redis-cli");
    assert_eq!(stdout(&o), "PONG", "{}", all(&o));
    assert!(kv.alive(), "mojim kv stopped");
}
