//! Shared pieces of the multi-process tests: a temporary cluster folder with a configuration
//! and a region file, a mirror in a child process, a seeded random generator, waiting for the
//! mirror to catch up, and comparing images without printing megabytes.
#![allow(dead_code)] // Each test binary uses a different part of this module.

pub mod bench;
pub mod c;
pub mod kv;
pub mod kv_cluster;
pub mod kv_ops;
pub mod kv_workload;
pub mod onpath;
pub mod placed;
pub mod porcupine;
pub mod preload;
pub mod raw;
pub mod scrape;
pub mod storage;
pub mod tls;

use mojim::config::{random_uuid, template, write_private, ConfigFile};
use mojim::{Config, PrimaryOptions, Secret};
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use mojim_tools::child::ChildNode;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cluster secret of every test configuration.
pub const SECRET: &str = "multiprocess-test-secret";
/// How long any single wait in these tests may take before it is a failure.
pub const WAIT: Duration = Duration::from_secs(30);

/// The `mojim` binary built for this test run.
pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mojim"))
}

/// Where test folders go: `MOJIM_TEST_DIR` if set, else `/dev/shm` (memory: no disk flush per
/// acknowledgement, so the tests measure the protocol and not the disk), else the system's
/// temporary folder.
pub fn test_root() -> PathBuf {
    if let Some(d) = std::env::var_os("MOJIM_TEST_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && std::fs::metadata(shm).is_ok_and(|m| !m.permissions().readonly()) {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A folder removed when dropped; named after the process and the test so parallel tests and
/// parallel runs never share one.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(test: &str) -> TempDir {
        let d = test_root().join(format!("mojim-mp-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create the test folder");
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A test that cannot run here (`why`: a missing tool, no root) passes saying so, unless
/// `MOJIM_TEST_STRICT` is set, as `./scripts/test` sets it (it installs what the tests need):
/// then it fails. Returns only when skipping is allowed.
pub fn skip(why: &str) {
    if std::env::var_os("MOJIM_TEST_STRICT").is_some_and(|v| v != "0") {
        panic!("this test cannot run: {why} (MOJIM_TEST_STRICT is set: ./scripts/test installs what the tests need and runs as root)");
    }
    println!("skipped: {why}");
}

/// The seed of a randomised test: `MOJIM_TEST_SEED` if set, else fresh. Printed, so that a
/// failure can be replayed (libtest shows a failing test's output).
pub fn seed(test: &str) -> u64 {
    let s = match std::env::var("MOJIM_TEST_SEED") {
        Ok(v) => v.parse().expect("MOJIM_TEST_SEED is a u64"),
        Err(_) => {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.as_nanos() as u64 ^ (std::process::id() as u64) << 32
        }
    };
    println!("{test}: seed {s} (replay with MOJIM_TEST_SEED={s})");
    s
}

/// SplitMix64: small, seedable, good enough to choose offsets and fill buffers.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi);
        lo + self.next_u64() % (hi - lo + 1)
    }

    pub fn chance(&mut self, one_in: u64) -> bool {
        self.next_u64().is_multiple_of(one_in)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

/// Where a node a test starts listens: TCP on loopback; with `MOJIM_TEST_TRANSPORT=shm` a
/// socket in the test's folder, so that every link goes through shared memory; with
/// `MOJIM_TEST_TRANSPORT=ucx` a UCX listener on loopback, so that every link goes through UCX
/// (`./scripts/test` runs the multi-process suites all three ways).
pub fn listen_addr(dir: &Path) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let transport = std::env::var("MOJIM_TEST_TRANSPORT").unwrap_or_default();
    mojim_tools::cluster::listen_addr(dir, &format!("n{n}"), &transport)
}

/// A test cluster: a folder with `mojim.toml` and the primary's region file, and at most one
/// mirror child process serving from `<folder>/mirror`.
pub struct Cluster {
    /// Dropped (killed) before the folder is removed.
    pub mirror: Option<ChildNode>,
    pub cfg_path: PathBuf,
    pub cfg: Config,
    pub dir: TempDir,
}

/// Sets `f` to coordinate through the etcd at `endpoint`, with leases short enough for a test
/// (1.5 s, renewed every 0.3 s) and heartbeats every 50 ms.
pub fn use_etcd(f: &mut ConfigFile, endpoint: &str) {
    f.cluster.coordinator = "etcd".into();
    f.cluster.etcd_endpoints = vec![endpoint.to_owned()];
    f.cluster.lease_ttl_ms = 1500;
    f.cluster.lease_renew_ms = 300;
    f.cluster.lease_margin_ms = 300;
    f.cluster.heartbeat_interval_ms = 50;
    f.cluster.heartbeat_timeout_ms = 1500;
}

/// Changes `[kv]` of `f` in mojim kv's terms (the library keeps the section as written).
pub fn edit_kv(f: &mut ConfigFile, change: impl FnOnce(&mut mojim_kv::KvSection)) {
    f.edit_section(change).expect("[kv] of a test configuration reads");
}

/// Changes `[rvm]` of `f` in recoverable memory's terms.
pub fn edit_rvm(f: &mut ConfigFile, change: impl FnOnce(&mut mojim_rvm::RvmSection)) {
    f.edit_section(change).expect("[rvm] of a test configuration reads");
}

impl Cluster {
    /// Writes a configuration for a region of `size` bytes (from `mojim init`'s template of the
    /// library's sections, then `edit`), and creates the primary's region file. `[kv]` and
    /// `[rvm]` take their defaults unless `edit` sets them: Redis clients in the tests connect
    /// without AUTH, on loopback (which protected mode allows); kv_auth.rs tests the password
    /// `mojim init` writes.
    pub fn new(test: &str, size: u64, edit: impl FnOnce(&mut ConfigFile)) -> Cluster {
        let dir = TempDir::new(test);
        let cfg_path = dir.path().join("mojim.toml");
        let uuid = random_uuid();
        let mut file: ConfigFile =
            toml::from_str(&template(&uuid, size, SECRET, "127.0.0.1:0")).expect("the template parses");
        edit(&mut file);
        // Mode 0600, as `mojim init` writes it: the file holds the secret.
        write_private(&cfg_path, &toml::to_string(&file).expect("a configuration serialises"))
            .expect("write mojim.toml");
        let cfg = Config::load(&cfg_path).expect("load the test configuration");
        let region_id = cfg.region_id().expect("region id");
        mojim::create_region(&cfg.resolve(&cfg.file.region.path), region_id).expect("create the region");
        Cluster { mirror: None, cfg_path, cfg, dir }
    }

    pub fn size(&self) -> u64 {
        self.cfg.region_id().expect("region id").size
    }

    pub fn secret(&self) -> Secret {
        self.cfg.secret(false).expect("the test configuration has a secret")
    }

    /// Starts (or restarts, from the same folder) the mirror; recovery runs before it serves.
    pub fn start_mirror(&mut self) -> &ChildNode {
        self.start_mirror_with(&[])
    }

    pub fn start_mirror_with(&mut self, extra: &[&str]) -> &ChildNode {
        assert!(self.mirror.is_none(), "a mirror is already running");
        let cfg = self.cfg_path.to_str().expect("utf-8 path");
        let mut args = vec!["serve", "--config", cfg];
        let listen = listen_addr(self.dir.path());
        if !extra.contains(&"--listen") {
            args.extend(["--listen", &listen]);
        }
        args.extend_from_slice(extra);
        let child = ChildNode::spawn(exe(), &args).expect("start the mirror");
        self.mirror.insert(child)
    }

    /// SIGKILLs the mirror.
    pub fn kill_mirror(&mut self) {
        if let Some(mut m) = self.mirror.take() {
            m.kill();
        }
    }

    /// Starts a backup: `mojim serve` with the cluster's configuration in a folder of its own.
    pub fn start_backup(&self, name: &str) -> ChildNode {
        let dir = self.dir.path().join(name);
        let cfg = self.cfg_path.to_str().expect("utf-8");
        let listen = listen_addr(self.dir.path());
        let args = ["serve", "--config", cfg, "--listen", &listen, "--dir", dir.to_str().expect("utf-8")];
        ChildNode::spawn(exe(), &args).expect("start a backup")
    }

    /// Points the mirror's configuration at `backups`, then `edit`s it (the mirror reads it
    /// when it starts).
    pub fn feed(&mut self, backups: &[&ChildNode], edit: impl FnOnce(&mut ConfigFile)) {
        self.cfg.file.mirror.backups = backups.iter().map(|b| b.addr().to_string()).collect();
        edit(&mut self.cfg.file);
        write_private(&self.cfg_path, &toml::to_string(&self.cfg.file).expect("serialise"))
            .expect("write mojim.toml");
    }

    pub fn mirror_addr(&self) -> String {
        self.mirror.as_ref().expect("the mirror runs").addr().to_string()
    }

    /// Primary options from the configuration, aimed at the running mirror.
    pub fn primary_options(&self) -> PrimaryOptions {
        let mut o = PrimaryOptions::from_config(&self.cfg, false).expect("primary options");
        o.mirror = self.mirror_addr();
        o
    }

    pub fn admin(&self) -> AdminClient {
        AdminClient::connect(&self.mirror_addr(), &self.secret(), Duration::from_secs(5))
            .expect("admin connection to the mirror")
    }
}

/// Polls until the mirror has applied every group it received, and returns that status.
pub fn wait_applied(admin: &mut AdminClient) -> MirrorStatus {
    let t0 = Instant::now();
    loop {
        let st = admin.status().expect("mirror status");
        if st.lag_groups == 0 && st.applied_seq >= st.last_received_seq {
            return st;
        }
        assert!(t0.elapsed() < WAIT, "the mirror did not catch up within {WAIT:?}: {st:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `status` until `done` holds for it.
pub fn wait_status(
    admin: &mut AdminClient,
    what: &str,
    done: impl Fn(&MirrorStatus) -> bool,
) -> MirrorStatus {
    let t0 = Instant::now();
    loop {
        let st = admin.status().expect("mirror status");
        if done(&st) {
            return st;
        }
        assert!(t0.elapsed() < WAIT, "waited {WAIT:?} for {what}: {st:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The mirror's whole data area, read consistently in pieces.
pub fn mirror_image(admin: &mut AdminClient, size: u64) -> Vec<u8> {
    const PIECE: u64 = 4 << 20;
    let mut out = Vec::with_capacity(size as usize);
    let mut at = 0;
    while at < size {
        let n = PIECE.min(size - at);
        out.extend_from_slice(&admin.read(at, n).expect("read the mirror's data area"));
        at += n;
    }
    out
}

/// The first offset where `a` and `b` differ (or where the shorter ends).
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let n = a.len().min(b.len());
    // Compare in blocks first: fast even in debug builds.
    let mut at = 0;
    while at < n {
        let end = (at + 4096).min(n);
        if a[at..end] != b[at..end] {
            return (at..end).find(|&i| a[i] != b[i]);
        }
        at = end;
    }
    (a.len() != b.len()).then_some(n)
}

/// Panics naming the first differing offset and a few bytes around it, never the whole images.
pub fn assert_same_image(what: &str, expected: &[u8], actual: &[u8]) {
    if let Some(at) = first_difference(expected, actual) {
        let from = at.saturating_sub(8);
        let window = |v: &[u8]| format!("{:02x?}", &v[from.min(v.len())..(at + 24).min(v.len())]);
        let differing = expected.iter().zip(actual).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: images differ first at offset {at} ({differing} bytes differ; sizes {} and {});\n\
             expected from {from}: {}\n  actual from {from}: {}",
            expected.len(),
            actual.len(),
            window(expected),
            window(actual)
        );
    }
}
