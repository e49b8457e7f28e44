//! A throw-away single-member etcd, for tests and for the tools that need a real one (the
//! fail-over benchmark, the chaos harness).
//!
//! [`EtcdServer::start`] runs the system's `etcd` on loopback ports with its data in a fresh
//! directory (in `/dev/shm` when there is one), tuned so that leases may be as short as 1 s.
//! Dropping the server kills it and removes the directory. [`EtcdServer::start_tls`] runs it
//! with https client URLs that require a client certificate (etcd's `--client-cert-auth`).
//! [`EtcdServer::launch`] takes the other options: the directory, the host and ports, and a
//! command that runs etcd somewhere else (in a network namespace).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::Client;
use crate::tls::EtcdTls;
use mojim_transport::ports::free_loopback_ports;

/// Where Debian's `etcd-server` puts the binary; `etcd` on `PATH` is the fallback.
pub const DEBIAN_ETCD: &str = "/usr/bin/etcd";
/// How long etcd has to start answering, unless [`EtcdLaunch::start_timeout`] says otherwise.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a start is retried when etcd exits at once (another process took a port).
const START_ATTEMPTS: usize = 3;
/// Raft tick and election timeout in milliseconds: etcd's shortest lease TTL is 1.5 election
/// timeouts rounded up to whole seconds, so 100 ms lets tests use 1 s leases (and a single
/// member elects itself after one election timeout, so it starts quickly).
const HEARTBEAT_MS: u32 = 10;
const ELECTION_MS: u32 = 100;

/// A running etcd, killed and wiped on drop (unless [`EtcdServer::keep_files`]).
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    data_dir: PathBuf,
    host: String,
    client_port: u16,
    peer_port: u16,
    binary: PathBuf,
    tls: Option<ServerTlsFiles>,
    keep: bool,
    /// Started through [`EtcdLaunch::command`]: [`EtcdServer::restart`] cannot repeat it.
    custom_command: bool,
    start_timeout: Duration,
}

/// What an etcd with TLS on its client URLs presents and trusts, PEM.
///
/// The certificate must name 127.0.0.1 (an IP subject alternative name) and allow both server
/// and client authentication: etcd presents it to clients, and the server's own probe presents
/// it to etcd as a client certificate.
pub struct ServerTls<'a> {
    /// The CA that signed `cert_pem` and that etcd trusts for client certificates.
    pub ca_pem: &'a str,
    pub cert_pem: &'a str,
    pub key_pem: &'a str,
}

/// Where the server's TLS files were written (in its data directory).
#[derive(Debug, Clone)]
pub struct ServerTlsFiles {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// What runs etcd: given the binary, a command to which the launcher adds etcd's arguments.
type MakeCommand<'a> = Box<dyn Fn(&Path) -> Command + 'a>;

/// How to start an [`EtcdServer`]: from [`EtcdServer::launch`], then [`EtcdLaunch::start`].
pub struct EtcdLaunch<'a> {
    tls: Option<&'a ServerTls<'a>>,
    dir: Option<PathBuf>,
    host: String,
    ports: Option<[u16; 2]>,
    command: Option<MakeCommand<'a>>,
    start_timeout: Duration,
}

impl<'a> EtcdLaunch<'a> {
    /// TLS on the client URLs, client certificates required.
    pub fn tls(mut self, tls: &'a ServerTls<'a>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Its data and log in `dir` (created; removed on drop) instead of a fresh directory.
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Listen on `host` (an IP address) with these client and peer ports, instead of free
    /// loopback ports.
    pub fn listen(mut self, host: &str, client_port: u16, peer_port: u16) -> Self {
        self.host = host.to_string();
        self.ports = Some([client_port, peer_port]);
        self
    }

    /// Runs etcd with the command `make(binary)` returns (e.g. `ip netns exec NS binary`), to
    /// which the launcher adds etcd's arguments; the process it starts must become etcd.
    pub fn command(mut self, make: impl Fn(&Path) -> Command + 'a) -> Self {
        self.command = Some(Box::new(make));
        self
    }

    /// How long etcd has to start answering (10 s unless set).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Starts etcd and waits until it answers a read; a start is tried three times.
    ///
    /// Fails if no etcd binary is installed (install Debian's `etcd-server`), or if it does not
    /// answer in time; the error then quotes the end of etcd's log.
    pub fn start(&self) -> Result<EtcdServer, String> {
        let binary = etcd_binary().ok_or_else(|| {
            format!("no etcd binary at {DEBIAN_ETCD} or on PATH: install the Debian package etcd-server")
        })?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match self.start_once(&binary) {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_once(&self, binary: &Path) -> Result<EtcdServer, String> {
        let [client_port, peer_port] = match self.ports {
            Some(ports) => ports,
            None => free_loopback_ports().map_err(|e| format!("cannot find two free loopback ports: {e}"))?,
        };
        let data_dir = self.dir.clone().unwrap_or_else(fresh_dir);
        fs::create_dir_all(&data_dir).map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
        let files = self.tls.map(|t| write_tls_files(&data_dir, t)).transpose()?;
        let mut command = match &self.command {
            Some(make) => make(binary),
            None => Command::new(binary),
        };
        let child =
            spawn(&mut command, binary, &data_dir, &self.host, [client_port, peer_port], files.as_ref())?;
        let mut server = EtcdServer {
            child,
            data_dir,
            host: self.host.clone(),
            client_port,
            peer_port,
            binary: binary.to_path_buf(),
            tls: files,
            keep: false,
            custom_command: self.command.is_some(),
            start_timeout: self.start_timeout,
        };
        server.wait_until_ready(self.start_timeout)?;
        Ok(server)
    }
}

impl EtcdServer {
    /// Starts etcd and waits until it answers a read.
    ///
    /// Fails if no etcd binary is installed (install Debian's `etcd-server`), or if it does not
    /// answer within 10 s; the error then quotes the end of etcd's log.
    pub fn start() -> Result<EtcdServer, String> {
        Self::launch().start()
    }

    /// As [`EtcdServer::start`], with TLS on the client URLs and client certificates required.
    pub fn start_tls(tls: &ServerTls<'_>) -> Result<EtcdServer, String> {
        Self::launch().tls(tls).start()
    }

    /// The options of a start: on free loopback ports, in a fresh directory, unless the
    /// [`EtcdLaunch`] methods say otherwise.
    pub fn launch<'a>() -> EtcdLaunch<'a> {
        EtcdLaunch {
            tls: None,
            dir: None,
            host: "127.0.0.1".into(),
            ports: None,
            command: None,
            start_timeout: START_TIMEOUT,
        }
    }

    /// Starts etcd for a test, or returns `None` after printing why if etcd is not installed
    /// (see [`skip_without_etcd`]).
    ///
    /// # Panics
    /// If etcd is installed but does not start, or is missing while [`TEST_STRICT`] is set.
    pub fn start_for_test() -> Option<EtcdServer> {
        if skip_without_etcd() {
            return None;
        }
        match Self::start() {
            Ok(server) => Some(server),
            Err(e) => panic!("{e}"),
        }
    }

    /// As [`EtcdServer::start_for_test`], with TLS ([`EtcdServer::start_tls`]).
    pub fn start_tls_for_test(tls: &ServerTls<'_>) -> Option<EtcdServer> {
        if skip_without_etcd() {
            return None;
        }
        match Self::start_tls(tls) {
            Ok(server) => Some(server),
            Err(e) => panic!("{e}"),
        }
    }

    /// Kills etcd (SIGKILL) and starts it again on the same ports and data directory, as a
    /// machine that restarts etcd: what it had written is still there. Fails if it does not
    /// answer within the start timeout (another process may have taken a port meanwhile), or if
    /// it was started through [`EtcdLaunch::command`] (that command is not kept).
    pub fn restart(&mut self) -> Result<(), String> {
        if self.custom_command {
            return Err("an etcd started through EtcdLaunch::command cannot be restarted".into());
        }
        self.kill();
        let mut command = Command::new(&self.binary);
        self.child = spawn(
            &mut command,
            &self.binary,
            &self.data_dir,
            &self.host,
            [self.client_port, self.peer_port],
            self.tls.as_ref(),
        )?;
        self.wait_until_ready(self.start_timeout)
    }

    /// Polls with reads until etcd answers, it exits, or the start timeout passes.
    fn wait_until_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let client = Client::with_tls(&[self.endpoint()], Duration::from_millis(500), self.client_tls())
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("etcd exited at start ({status}); its log ends:\n{}", self.log_tail()));
            }
            let last = match client.get("mojim-etcd-test-probe") {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if started.elapsed() > timeout {
                return Err(format!(
                    "etcd at {} did not answer within {timeout:?} ({last}); its log ends:\n{}",
                    self.endpoint(),
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client endpoint, `"host:port"`, or `"https://host:port"` with TLS.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https://" } else { "" };
        format!("{scheme}{}:{}", self.host, self.client_port)
    }

    /// The etcd process's id (for a benchmark that charges etcd's CPU time to a run).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// etcd's log (its stdout and stderr).
    pub fn log_path(&self) -> PathBuf {
        self.data_dir.join("etcd.log")
    }

    /// Whether drop leaves the directory (its data and log) in place, e.g. for a failed run's
    /// report.
    pub fn keep_files(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// The TLS files of a server started with [`EtcdServer::start_tls`].
    pub fn tls_files(&self) -> Option<&ServerTlsFiles> {
        self.tls.as_ref()
    }

    /// With TLS, the client side of the server's own files (its certificate as the client's).
    fn client_tls(&self) -> Option<EtcdTls> {
        let f = self.tls.as_ref()?;
        let tls = EtcdTls::load(&f.ca_file, Some((&f.cert_file, &f.key_file)));
        Some(tls.expect("the files etcd was started with load"))
    }

    /// A client of this server with the given request timeout (over TLS, with the server's own
    /// certificate as the client's, if it was started with TLS).
    pub fn client(&self, timeout: Duration) -> Client {
        // The endpoint is host:port and the timeout is checked here, so `new` cannot refuse them.
        assert!(!timeout.is_zero(), "a zero request timeout");
        Client::with_tls(&[self.endpoint()], timeout, self.client_tls())
            .expect("a loopback host:port endpoint is valid")
    }

    /// Kills etcd with SIGKILL and waits for it to die; the data directory stays until drop.
    pub fn kill(&mut self) {
        // Killing a process that already exited is not an error worth reporting here.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freezes etcd with SIGSTOP: it keeps its ports but answers nothing until
    /// [`EtcdServer::resume`] (a stalled or briefly unreachable etcd).
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Lets a frozen etcd run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{name} etcd ({}) failed", self.child.id());
    }

    /// The last lines etcd logged.
    fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        if !self.keep {
            // Best effort: a leftover directory in /dev/shm is only litter.
            let _ = fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// The environment variable that makes a missing component (etcd here; root, or a file system
/// tool, for the storage tests) fail the tests that need it instead of skipping them
/// (`scripts/test` sets it, after installing what the tests need).
pub const TEST_STRICT: &str = "MOJIM_TEST_STRICT";

/// Whether a test that needs etcd should skip: etcd is not installed (it says so on stderr).
///
/// # Panics
/// If etcd is missing while [`TEST_STRICT`] is set to anything but `0` or nothing: a run that
/// promised etcd must not pass by skipping the tests that need it.
pub fn skip_without_etcd() -> bool {
    let required = std::env::var(TEST_STRICT).ok();
    match missing_etcd(etcd_binary().is_some(), required.as_deref()) {
        Ok(skip) => skip,
        Err(e) => panic!("{e}"),
    }
}

/// Whether to skip, given whether etcd is installed and the value of [`TEST_STRICT`]; an error
/// when etcd is missing but required.
fn missing_etcd(installed: bool, required: Option<&str>) -> Result<bool, String> {
    if installed {
        return Ok(false);
    }
    if required.is_some_and(|v| !v.is_empty() && v != "0") {
        return Err(format!(
            "etcd is required ({TEST_STRICT} is set) but there is no etcd binary at {DEBIAN_ETCD} or on \
             PATH: install the Debian package etcd-server (scripts/test does, as root), or unset \
             {TEST_STRICT} to skip the tests that need it"
        ));
    }
    eprintln!("skipping: etcd is not installed (install the Debian package etcd-server)");
    Ok(true)
}

/// Adds etcd's arguments to `command` (which runs `binary`, perhaps through another program)
/// and runs it on `host` with its data in `data_dir` (TLS on the client URL if `files`), its log
/// appended to `data_dir`/etcd.log.
fn spawn(
    command: &mut Command,
    binary: &Path,
    data_dir: &Path,
    host: &str,
    [client_port, peer_port]: [u16; 2],
    files: Option<&ServerTlsFiles>,
) -> Result<Child, String> {
    let log_path = data_dir.join("etcd.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| format!("cannot duplicate the log file handle: {e}"))?;
    let scheme = if files.is_some() { "https" } else { "http" };
    let client_url = format!("{scheme}://{host}:{client_port}");
    let peer_url = format!("http://{host}:{peer_port}");
    if let Some(f) = files {
        command
            .arg(format!("--cert-file={}", f.cert_file.display()))
            .arg(format!("--key-file={}", f.key_file.display()))
            .arg(format!("--trusted-ca-file={}", f.ca_file.display()))
            .arg("--client-cert-auth");
    }
    // etcd refuses ETCD_* variables that shadow the flags given here.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ETCD_") {
            command.env_remove(name);
        }
    }
    command
        .arg("--name=mojim")
        .arg(format!("--data-dir={}", data_dir.join("data").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=mojim={peer_url}"))
        .arg("--initial-cluster-state=new")
        .arg(format!("--heartbeat-interval={HEARTBEAT_MS}"))
        .arg(format!("--election-timeout={ELECTION_MS}"))
        .arg("--logger=zap")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    command.spawn().map_err(|e| format!("cannot run {}: {e}", binary.display()))
}

/// Writes the server's TLS files into `dir`, its key readable by its owner only.
fn write_tls_files(dir: &Path, tls: &ServerTls<'_>) -> Result<ServerTlsFiles, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let files = ServerTlsFiles {
        ca_file: dir.join("ca.pem"),
        cert_file: dir.join("etcd.pem"),
        key_file: dir.join("etcd.key"),
    };
    for (path, pem) in
        [(&files.ca_file, tls.ca_pem), (&files.cert_file, tls.cert_pem), (&files.key_file, tls.key_pem)]
    {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(pem.as_bytes()))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(files)
}

/// The etcd binary: Debian's, else the first `etcd` on `PATH`.
pub fn etcd_binary() -> Option<PathBuf> {
    let debian = PathBuf::from(DEBIAN_ETCD);
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("etcd")).find(|p| p.is_file())
}

/// A directory name no other server of this or another process uses.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    base.join(format!("mojim-etcd-{}-{n}-{nanos}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_etcd_skips_unless_it_is_required() {
        assert_eq!(missing_etcd(true, Some("1")), Ok(false));
        assert_eq!(missing_etcd(true, None), Ok(false));
        assert_eq!(missing_etcd(false, None), Ok(true));
        assert_eq!(missing_etcd(false, Some("")), Ok(true));
        assert_eq!(missing_etcd(false, Some("0")), Ok(true));
        let e = missing_etcd(false, Some("1")).expect_err("a required etcd is missing");
        assert!(e.contains(TEST_STRICT) && e.contains("etcd-server"), "{e}");
    }

    #[test]
    fn server_answers_then_dies_when_killed_and_cleans_up_on_drop() {
        let Some(mut server) = EtcdServer::start_for_test() else { return };
        let dir = server.data_dir.clone();
        let client = server.client(Duration::from_millis(300));
        client.put("k", b"v", None).unwrap();
        server.kill();
        assert!(matches!(client.get("k"), Err(crate::EtcdError::Unreachable { .. })));
        drop(server);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    #[test]
    fn launch_options_place_the_directory_ports_and_command_and_keep_the_files() {
        if skip_without_etcd() {
            return;
        }
        let dir = fresh_dir();
        let [client_port, peer_port] = free_loopback_ports().unwrap();
        // `env` executes etcd in its own process, as `ip netns exec` does.
        let mut server = EtcdServer::launch()
            .dir(&dir)
            .listen("127.0.0.1", client_port, peer_port)
            .command(|binary| {
                let mut c = Command::new("env");
                c.arg(binary);
                c
            })
            .start()
            .unwrap();
        assert_eq!(server.endpoint(), format!("127.0.0.1:{client_port}"));
        assert_eq!(server.log_path(), dir.join("etcd.log"));
        server.client(Duration::from_millis(300)).put("k", b"v", None).unwrap();
        server.keep_files(true);
        drop(server);
        assert!(dir.join("data").is_dir(), "{} was removed", dir.display());
        fs::remove_dir_all(&dir).unwrap();
    }
}
