//! docs/OPERATIONS.md's procedures, run as written: every ` ```sh runbook:NAME ` block is taken
//! from the document and run with `sh -e` (the `mojim` built for this test first on PATH) on a
//! live cluster while an application syncs, with the variables the document lists set for the
//! nodes at hand. Then every acknowledged write must be in the primary's region, and the mirror
//! and the backup must hold the same image. A procedure that stops working, or that the document
//! changes into one that does not, fails here.

mod common;

use common::{assert_same_image, mirror_image, Cluster, Rng, WAIT};
use mojim::config::OnMirrorLoss;
use mojim::{Primary, PrimaryOptions};
use mojim_node::admin_client::AdminClient;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DOC: &str = include_str!("../../../docs/OPERATIONS.md");

/// Every runbook block of the document, by name.
fn blocks() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in DOC.lines() {
        match &mut current {
            None => {
                if let Some(name) = line.strip_prefix("```sh runbook:") {
                    current = Some((name.trim().to_string(), String::new()));
                }
            }
            Some((name, text)) => {
                if line.trim_end() == "```" {
                    let prev = out.insert(name.clone(), std::mem::take(text));
                    assert!(prev.is_none(), "two runbook blocks named {name}");
                    current = None;
                } else {
                    text.push_str(line);
                    text.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "a runbook block is not closed");
    out
}

/// The path with the folder of the `mojim` built for this test first.
fn path_with_mojim() -> String {
    let bin = common::exe().parent().expect("the binary's folder").to_path_buf();
    std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH")
    .into_string()
    .expect("utf-8 PATH")
}

/// A port nothing listens on now.
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("127.0.0.1:{}", l.local_addr().expect("addr").port())
}

/// The cluster's folder, its configuration and the daemons the blocks started (their pid
/// files), killed at the end.
struct Runbook {
    c: Cluster,
    blocks: BTreeMap<String, String>,
    path: String,
}

impl Runbook {
    /// Runs block `name` with `vars`, as `sh -e`, and returns what it printed (also printed here,
    /// shown on a failure).
    fn run(&self, name: &str, vars: &[(&str, &str)]) -> String {
        let script =
            self.blocks.get(name).unwrap_or_else(|| panic!("OPERATIONS.md has no runbook:{name} block"));
        println!("--- runbook:{name} {vars:?}\n{script}");
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-e").arg("-c").arg(script).env("PATH", &self.path).env("CONFIG", &self.c.cfg_path);
        cmd.stdin(std::process::Stdio::null());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run sh");
        // Read both outputs to their end: the daemons a block starts write to their own logs.
        let mut out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let e = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let mut o = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut o);
        let status = child.wait().expect("wait for sh");
        let e = e.join().expect("stderr reader");
        println!("{o}{e}");
        assert!(status.success(), "runbook:{name} failed ({status}):\n{o}{e}");
        format!("{o}{e}")
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.c.dir.path().join(name)
    }

    fn admin(&self, addr: &str) -> AdminClient {
        AdminClient::connect(addr, &self.c.secret(), Duration::from_secs(5)).expect("admin connection")
    }
}

impl Drop for Runbook {
    fn drop(&mut self) {
        // The daemons the blocks started, by the ids they wrote.
        if let Ok(entries) = std::fs::read_dir(self.c.dir.path()) {
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "pid") {
                    if let Some(pid) =
                        std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse::<i32>().ok())
                    {
                        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                        }
                    }
                }
            }
        }
    }
}

/// The application: groups each writing one slot of the region, in turn, counted when
/// acknowledged. A failed sync point (the mirror restarting) is not acknowledged, and the load
/// goes on; the slot then holds either write until one is acknowledged again.
struct Load {
    /// Each slot's last write, if it was acknowledged (`None`: it was not).
    slots: Mutex<BTreeMap<u64, Option<Vec<u8>>>>,
    acked: AtomicU64,
    next: AtomicU64,
    stop: AtomicBool,
}

const SLOT: u64 = 64;

impl Load {
    fn new() -> Load {
        Load {
            slots: Mutex::new(BTreeMap::new()),
            acked: AtomicU64::new(0),
            next: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        }
    }

    fn run(&self, p: &Primary, seed: u64) {
        let mut rng = Rng::new(seed);
        while !self.stop.load(Ordering::SeqCst) {
            let off = self.next.fetch_add(1, Ordering::SeqCst) % (p.size() / SLOT) * SLOT;
            let bytes = rng.bytes(SLOT as usize);
            p.write(off, &bytes).expect("write");
            let ok = p.msync(off, SLOT).is_ok();
            self.slots.lock().expect("lock").insert(off, ok.then_some(bytes));
            if ok {
                self.acked.fetch_add(1, Ordering::SeqCst);
            } else {
                // The mirror is away: no need to spin through the region meanwhile.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::SeqCst)
    }

    /// Runs the load on `p` until `during` returns, and some groups were acknowledged after it.
    fn during(&self, p: &Primary, seed: u64, during: impl FnOnce()) {
        self.stop.store(false, Ordering::SeqCst);
        std::thread::scope(|s| {
            let h = s.spawn(|| self.run(p, seed));
            let before = self.acked();
            wait_until("the load to get going", || self.acked() > before + 20);
            during();
            let after = self.acked();
            let t0 = Instant::now();
            while self.acked() <= after + 20 {
                assert!(t0.elapsed() < WAIT, "the load did not go on after the procedure: {:?}", p.status());
                std::thread::sleep(Duration::from_millis(5));
            }
            self.stop.store(true, Ordering::SeqCst);
            h.join().expect("the load");
        });
    }

    /// Every acknowledged write is in `image`.
    fn check(&self, image: &[u8], what: &str) {
        let slots = self.slots.lock().expect("lock");
        for (off, bytes) in slots.iter().filter_map(|(o, b)| Some((o, b.as_ref()?))) {
            let at = &image[*off as usize..*off as usize + bytes.len()];
            assert!(at == bytes.as_slice(), "{what}: the acknowledged write at {off} was lost");
        }
        assert!(self.acked() > 0);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < WAIT, "waited {WAIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn options(r: &Runbook, region: &Path, mirror: &str) -> PrimaryOptions {
    let mut o = PrimaryOptions::from_config(&r.c.cfg, false).expect("primary options");
    o.region_path = region.to_path_buf();
    o.mirror = mirror.to_string();
    o.failure.on_mirror_loss = OnMirrorLoss::Block;
    o.failure.reconnect = Duration::from_millis(50);
    o
}

fn image_of(p: &Primary) -> Vec<u8> {
    let mut v = vec![0u8; p.size() as usize];
    p.read(0, &mut v).expect("read");
    v
}

#[test]
fn every_procedure_of_the_runbook_works_as_written_under_load() {
    let blocks = blocks();
    // Every runbook block is one a test here runs (cert-rotation: the next test).
    let run = [
        "backup-add",
        "backup-remove",
        "cert-rotation",
        "promote",
        "rejoin",
        "replace-disk",
        "rolling-upgrade",
        "start-mirror",
    ];
    assert_eq!(blocks.keys().map(String::as_str).collect::<Vec<_>>(), run, "the runbook's blocks");
    let c = Cluster::new("runbook", 4 << 20, |f| {
        f.primary.lanes = 2;
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        f.mirror.log_capacity = "4MiB".into();
    });
    let r = Runbook { c, blocks, path: path_with_mojim() };
    let s = |p: PathBuf| p.to_str().expect("utf-8").to_string();
    let (m, m_dir) = (free_addr(), s(r.dir("m")));
    let (b, b_dir) = (free_addr(), s(r.dir("b")));
    let (b2, b2_dir) = (free_addr(), s(r.dir("b2")));
    let (old, old_dir) = (free_addr(), s(r.dir("old")));
    let old_region = r.c.cfg.resolve(&r.c.cfg.file.region.path);
    let seed = common::seed("runbook");
    let load = Load::new();

    r.run("start-mirror", &[("MIRROR", &m), ("MIRROR_DIR", &m_dir)]);
    let p = Primary::open(&options(&r, &old_region, &m)).expect("open the primary");
    load.during(&p, seed, || {
        r.run("backup-add", &[("MIRROR", &m), ("BACKUP", &b), ("BACKUP_DIR", &b_dir)]);
        r.run("backup-add", &[("MIRROR", &m), ("BACKUP", &b2), ("BACKUP_DIR", &b2_dir)]);
        r.run("backup-remove", &[("MIRROR", &m), ("BACKUP", &b2), ("BACKUP_DIR", &b2_dir)]);
        r.run("replace-disk", &[("MIRROR", &m), ("BACKUP", &b), ("BACKUP_DIR", &b_dir)]);
    });
    let st = r.admin(&m).status().expect("status");
    assert_eq!(st.backups.iter().map(|x| x.addr.as_str()).collect::<Vec<_>>(), [b.as_str()], "{st:?}");

    // The primary is lost: the application stops (as if its host died), the mirror is promoted,
    // and the application starts on the promoted node with the backup as its mirror.
    drop(p);
    r.run("promote", &[("MIRROR", &m), ("MIRROR_DIR", &m_dir), ("BACKUP", &b), ("BACKUP_DIR", &b_dir)]);
    let region = r.dir("m").join("data.mojim");
    let p = Primary::open(&options(&r, &region, &b)).expect("open the promoted copy");
    load.check(&image_of(&p), "after the promotion");
    let st = r.admin(&m).status().expect("the promoted node's status");
    assert!(st.backups.is_empty(), "the promoted node still feeds {:?}", st.backups);

    // The old primary's node rejoins as a backup of the new mirror; then a rolling restart.
    load.during(&p, seed ^ 1, || {
        let old_region = s(old_region.clone());
        let said = r.run(
            "rejoin",
            &[("MIRROR", &b), ("OLD_REGION", &old_region), ("REJOIN", &old), ("REJOIN_DIR", &old_dir)],
        );
        // It said each step as it took it.
        for step in [
            "rejoin 1/4: placing",
            "rejoin 2/4: serving",
            "rejoin 3/4: demoting",
            "rejoin 4/4: asking",
            "rejoined:",
        ] {
            assert!(said.contains(step), "mojim rejoin did not say {step:?}: {said}");
        }
        r.run(
            "rolling-upgrade",
            &[("MIRROR", &b), ("MIRROR_DIR", &b_dir), ("BACKUP", &old), ("BACKUP_DIR", &old_dir)],
        );
    });

    // Nothing acknowledged was lost: not on the primary, the new mirror or the rejoined
    // backup, which hold the same image (writes whose sync point failed while the mirror
    // restarted may be on the primary only).
    let image = image_of(&p);
    load.check(&image, "at the end");
    let (mut mirror, mut backup) = (r.admin(&b), r.admin(&old));
    let st = common::wait_status(&mut mirror, "the mirror to apply everything and feed the backup", |st| {
        st.lag_groups == 0
            && st.backups.iter().all(|x| x.connected && x.lag_groups == 0 && x.acked_seq >= st.applied_seq)
    });
    assert_eq!(st.backups.iter().map(|x| x.addr.as_str()).collect::<Vec<_>>(), [old.as_str()], "{st:?}");
    common::wait_status(&mut backup, "the backup to apply everything", |bs| {
        bs.applied_seq >= st.applied_seq && bs.consistent
    });
    let size = p.size();
    let (on_mirror, on_backup) = (mirror_image(&mut mirror, size), mirror_image(&mut backup, size));
    load.check(&on_mirror, "on the mirror");
    load.check(&on_backup, "on the rejoined backup");
    assert_same_image("the rejoined backup against the mirror", &on_mirror, &on_backup);
    drop(p);
}

/// The subject of the certificate the node at `addr` presents to a new connection.
fn presented(addr: &str, tls: &std::sync::Arc<mojim_transport::TlsContext>) -> String {
    use mojim_transport::{Conn, Transport};
    let c = mojim_transport::AnyTransport::new(Some(tls.clone()))
        .connect(addr, Duration::from_secs(5))
        .expect("a handshake");
    c.peer_identity().expect("the node's identity").subject
}

#[test]
fn certificates_are_rotated_as_the_runbook_says_under_load() {
    use mojim::config::write_private;
    use mojim_transport::tls::pki::{Ca, Validity};
    use mojim_transport::Role;
    let c = Cluster::new("runbook-tls", 1 << 20, |f| {
        f.primary.lanes = 2;
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        common::tls::configure(f);
    });
    // A CA of this test's, so that it can issue the new certificate.
    let tls = c.dir.path().join("tls");
    std::fs::create_dir_all(tls.join("new")).expect("mkdir");
    let ca = Ca::new("runbook CA").expect("a CA");
    write_private(&tls.join("ca.pem"), ca.cert_pem()).expect("write");
    let issue = |subject: &str, role: Role, to: &Path| {
        let i = ca.issue(subject, role, Validity::Years(1)).expect("issue");
        write_private(&to.join(format!("{}.pem", role.name())), &i.cert_pem).expect("write");
        write_private(&to.join(format!("{}.key", role.name())), &i.key_pem).expect("write");
    };
    for role in [Role::Node, Role::Operator, Role::Application] {
        issue(role.name(), role, &tls);
    }
    issue("node-renewed", Role::Node, &tls.join("new"));
    let r = Runbook { c, blocks: blocks(), path: path_with_mojim() };
    let s = |p: PathBuf| p.to_str().expect("utf-8").to_string();
    let (m, m_dir) = (free_addr(), s(r.dir("m")));
    let (b, b_dir) = (free_addr(), s(r.dir("b")));
    let tls_dir = s(tls.clone());
    r.run("start-mirror", &[("MIRROR", &m), ("MIRROR_DIR", &m_dir)]);
    r.run("backup-add", &[("MIRROR", &m), ("BACKUP", &b), ("BACKUP_DIR", &b_dir)]);
    let op = common::tls::context(r.c.dir.path(), "ca.pem", "operator");
    assert_eq!((presented(&m, &op), presented(&b, &op)), ("node".to_string(), "node".to_string()));
    let region = r.c.cfg.resolve(&r.c.cfg.file.region.path);
    let p = Primary::open(&options(&r, &region, &m)).expect("a primary over TLS");
    let load = Load::new();
    load.during(&p, common::seed("runbook-tls"), || {
        r.run(
            "cert-rotation",
            &[
                ("TLS_DIR", &tls_dir),
                ("MIRROR", &m),
                ("MIRROR_DIR", &m_dir),
                ("BACKUP", &b),
                ("BACKUP_DIR", &b_dir),
            ],
        );
        // New connections get the new certificate once each node has read it.
        for addr in [&m, &b] {
            wait_until("the node to present its new certificate", || presented(addr, &op) == "node-renewed");
        }
    });
    // Nothing acknowledged was lost, and a new operator's connection works with the new files.
    load.check(&image_of(&p), "on the primary");
    let mut mirror = common::tls::operator(&r.c, &m);
    let st = common::wait_status(&mut mirror, "the mirror to apply everything", |st| st.lag_groups == 0);
    load.check(&mirror_image(&mut mirror, p.size()), "on the mirror");
    let mut backup = common::tls::operator(&r.c, &b);
    common::wait_status(&mut backup, "the backup to catch up", |bs| bs.applied_seq >= st.applied_seq);
    drop(p);
}
