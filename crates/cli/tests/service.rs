//! `mojim serve` and `mojim kv` as systemd services run them (deploy/systemd): readiness told
//! through `$NOTIFY_SOCKET` (a datagram socket this test binds, as systemd does for a
//! `Type=notify` unit) only once the node serves, and a clean stop on SIGTERM under load that
//! keeps every acknowledged write and exits 0. The units themselves pass `systemd-analyze
//! verify`.

mod common;

use common::kv::{bulk, node, promote, start_kv, start_kv_on_promoted, Resp};
use common::{exe, mirror_image, skip, wait_applied, Cluster, TempDir, WAIT};
use mojim::Primary;
use mojim_kv::resp::Value;
use mojim_node::admin_client::AdminClient;
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A service manager's notification socket: a datagram socket bound in the test's folder.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notification socket");
        socket.set_read_timeout(Some(WAIT)).expect("set a read timeout");
        NotifySocket { socket, path }
    }

    /// Reads notifications until one has the line `line`; returns that notification.
    fn until(&self, line: &str) -> String {
        let mut seen = Vec::new();
        loop {
            let mut buf = [0u8; 4096];
            let n = self.socket.recv(&mut buf).unwrap_or_else(|e| {
                panic!("no notification with {line} within {WAIT:?} (had {seen:?}): {e}")
            });
            let msg = String::from_utf8(buf[..n].to_vec()).expect("a notification is UTF-8");
            if msg.lines().any(|l| l == line) {
                return msg;
            }
            seen.push(msg);
        }
    }
}

/// The value of `KEY=` in a notification.
fn field<'a>(msg: &'a str, key: &str) -> &'a str {
    msg.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {msg:?}"))
}

/// `mojim ARGS` with `$NOTIFY_SOCKET` set, its standard output discarded (readiness comes
/// only through the socket) and its log written to `log`.
fn spawn_notified(args: &[&str], notify: &NotifySocket, log: &Path) -> Child {
    Command::new(exe())
        .args(args)
        .env("NOTIFY_SOCKET", &notify.path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("create the log"))
        .spawn()
        .expect("start mojim")
}

fn sigterm(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("send SIGTERM");
}

/// Waits for `child` to exit by itself; its status.
fn exit_status(child: &mut Child, log: &Path) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait for mojim") {
            return s;
        }
        if t0.elapsed() > WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mojim did not exit within {WAIT:?} of SIGTERM; its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_clean_exit(status: ExitStatus, what: &str, log: &Path) {
    assert!(
        status.success(),
        "{what} ended with {status} on SIGTERM instead of exiting 0; its log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[test]
fn serve_is_ready_once_it_listens_and_exits_0_on_sigterm() {
    let c = Cluster::new("svc-serve-ready", 1 << 20, |_| {});
    let notify = NotifySocket::bind(c.dir.path());
    let log = c.dir.path().join("serve.log");
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut child = spawn_notified(&["serve", "--config", cfg, "--listen", "127.0.0.1:0"], &notify, &log);
    let ready = notify.until("READY=1");
    let status = field(&ready, "STATUS");
    let addr = status
        .strip_prefix("serving on ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("STATUS does not say where it serves: {status:?}"));
    // Ready means ready: the listener takes connections and the node answers an operator.
    TcpStream::connect(addr).unwrap_or_else(|e| panic!("READY=1 was sent but {addr} refuses: {e}"));
    let st = AdminClient::connect(addr, &c.secret(), Duration::from_secs(5))
        .and_then(|mut a| a.status())
        .expect("the node answers a status request once ready");
    assert!(status.contains(&format!("epoch {}", st.epoch)), "{status:?} against {st:?}");
    sigterm(child.id());
    let stopping = notify.until("STOPPING=1");
    assert_eq!(field(&stopping, "STATUS"), "stopping on SIGTERM");
    assert_clean_exit(exit_status(&mut child, &log), "mojim serve", &log);
}

#[test]
fn kv_is_ready_once_it_serves_clients_and_exits_0_on_sigterm() {
    let mut c = Cluster::new("svc-kv-ready", 8 << 20, |_| {});
    c.start_mirror();
    let notify = NotifySocket::bind(c.dir.path());
    let log = c.dir.path().join("kv.log");
    let (cfg, mirror) = (c.cfg_path.to_str().expect("utf-8").to_string(), c.mirror_addr());
    let args = ["kv", "--config", &cfg, "--listen", "127.0.0.1:0", "--mirror", &mirror];
    let mut child = spawn_notified(&args, &notify, &log);
    let ready = notify.until("READY=1");
    let status = field(&ready, "STATUS");
    let addr = status
        .strip_prefix("serving Redis clients on ")
        .unwrap_or_else(|| panic!("STATUS does not say where it serves: {status:?}"));
    let mut client = Resp::connect(addr);
    assert_eq!(client.cmd(&["SET", "k", "v"]), Value::Simple(b"OK".to_vec()));
    sigterm(child.id());
    notify.until("STOPPING=1");
    assert!(client.closed(), "a stopping server closes its clients");
    assert_clean_exit(exit_status(&mut child, &log), "mojim kv", &log);
}

/// Slots of 8 bytes the writer fills in turn with an increasing count.
const SLOTS: u64 = 4096;

#[test]
fn serve_stopped_by_sigterm_under_load_keeps_every_acknowledged_write() {
    let mut c = Cluster::new("svc-serve-load", 1 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    c.start_mirror();
    let region = Primary::open(&c.primary_options()).expect("open the primary");
    // acked[slot]: the last count the mirror acknowledged in that slot.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..SLOTS).map(|_| AtomicU64::new(0)).collect());
    let total = Arc::new(AtomicU64::new(0));
    let writer = {
        let (acked, total) = (acked.clone(), total.clone());
        std::thread::spawn(move || {
            for n in 1u64.. {
                let slot = n % SLOTS;
                region.write(slot * 8, &n.to_le_bytes()).expect("write the region");
                if region.msync(slot * 8, 8).is_err() {
                    // The mirror stopped: this one and later ones are not acknowledged.
                    return region;
                }
                acked[slot as usize].store(n, Ordering::Relaxed);
                total.fetch_add(1, Ordering::Relaxed);
            }
            unreachable!()
        })
    };
    let t0 = Instant::now();
    while total.load(Ordering::Relaxed) < 3000 {
        assert!(t0.elapsed() < WAIT, "only {} syncs acknowledged", total.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut mirror = c.mirror.take().expect("the mirror runs");
    sigterm(mirror.pid());
    let status = mirror.wait_exit(WAIT).expect("the mirror exits within the wait");
    assert!(status.success(), "mojim serve ended with {status} on SIGTERM instead of exiting 0");
    let region = writer.join().expect("the writer");
    drop(region);
    // Restarted from the same folder: every acknowledged count is there (or a later one that
    // was in flight).
    c.start_mirror();
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let image = mirror_image(&mut admin, c.size());
    let mut checked = 0;
    for slot in 0..SLOTS {
        let want = acked[slot as usize].load(Ordering::Relaxed);
        let at = (slot * 8) as usize;
        let got = u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"));
        assert!(
            got >= want && (got == 0 || got % SLOTS == slot),
            "slot {slot}: the mirror holds {got}, the last acknowledged write was {want}"
        );
        checked += u64::from(want > 0);
    }
    println!("{} syncs acknowledged before SIGTERM; {checked} slots checked", total.load(Ordering::Relaxed));
}

const WRITERS: usize = 4;

/// Pipelines SETs until the server closes the connection; every reply must be +OK. Returns
/// the keys and values acknowledged.
fn kv_writer(
    addr: String,
    w: usize,
    total: Arc<AtomicU64>,
    stopped: Arc<AtomicBool>,
) -> Vec<(String, String)> {
    let mut c = Resp::connect(&addr);
    let mut acked = Vec::new();
    let mut i = 0u64;
    loop {
        let batch: Vec<(String, String)> =
            (0..8).map(|j| (format!("w{w}:{}", i + j), format!("writer {w} value {}", i + j))).collect();
        i += 8;
        for (k, v) in &batch {
            if c.try_send(&[b"SET", k.as_bytes(), v.as_bytes()]).is_err() {
                return acked;
            }
        }
        for kv in batch {
            match c.read() {
                Some(Value::Simple(s)) if s == b"OK" => {
                    acked.push(kv);
                    total.fetch_add(1, Ordering::Relaxed);
                }
                // Closed: after the stop, the requests it had not read get no reply.
                None => {
                    assert!(stopped.load(Ordering::SeqCst), "writer {w}: the server closed the connection");
                    return acked;
                }
                Some(other) => panic!("writer {w}: SET {} answered {other:?}", kv.0),
            }
        }
    }
}

#[test]
fn kv_stopped_by_sigterm_under_load_answers_and_the_mirror_has_every_acknowledged_write() {
    let c = Cluster::new("svc-kv-load", 64 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);
    let addr = kv.addr().to_string();
    let total = Arc::new(AtomicU64::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, total, stopped) = (addr.clone(), total.clone(), stopped.clone());
            std::thread::spawn(move || kv_writer(addr, w, total, stopped))
        })
        .collect();
    let t0 = Instant::now();
    while total.load(Ordering::Relaxed) < 2000 {
        assert!(t0.elapsed() < WAIT, "only {} SETs acknowledged", total.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(5));
    }
    stopped.store(true, Ordering::SeqCst);
    sigterm(kv.pid());
    let acked: Vec<Vec<(String, String)>> =
        writers.into_iter().map(|t| t.join().expect("a writer panicked")).collect();
    let status = kv.wait_exit(WAIT).expect("mojim kv exits within the wait");
    assert!(status.success(), "mojim kv ended with {status} on SIGTERM instead of exiting 0");
    // The primary's machine goes away: the mirror, promoted, serves every acknowledged SET.
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    let mut client = Resp::connect(promoted.addr());
    let mut n = 0;
    for (w, sets) in acked.iter().enumerate() {
        for chunk in sets.chunks(500) {
            for (k, _) in chunk {
                client.send(&[b"GET", k.as_bytes()]);
            }
            for (k, v) in chunk {
                let got = client.read().expect("a reply");
                assert_eq!(bulk(&got), Some(v.as_bytes()), "writer {w}'s acknowledged {k} on the mirror");
                n += 1;
            }
        }
    }
    println!("{n} acknowledged SETs found on the promoted mirror");
}

/// The units as shipped (deploy/systemd), with ExecStart aimed at this build's binary, pass
/// `systemd-analyze verify`.
#[test]
fn the_units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        skip("systemd-analyze is not installed (Debian package systemd)");
        return;
    }
    let dir = TempDir::new("svc-units");
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    for name in ["mojim-serve.service", "mojim-kv.service"] {
        let text = std::fs::read_to_string(units.join(name)).expect("read the unit");
        for line in ["Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "User=mojim"]
        {
            assert!(text.lines().any(|l| l == line), "{name} lacks {line}");
        }
        let role = if name.contains("kv") { "kv" } else { "serve" };
        let exec = format!("ExecStart=/usr/bin/mojim {role} --config /etc/mojim/mojim.toml");
        assert!(text.lines().any(|l| l == exec), "{name} lacks {exec}");
        let here = text.replace("/usr/bin/mojim", exe().to_str().expect("utf-8"));
        std::fs::write(dir.path().join(name), here).expect("write the unit");
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("mojim-serve.service"))
        .arg(dir.path().join("mojim-kv.service"))
        .output()
        .expect("run systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
