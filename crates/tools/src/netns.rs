//! Network namespaces for partitions (root only), for the chaos harness and the tests: each
//! site in a namespace of its own, joined by a veth pair to a bridge in the caller's namespace,
//! which reaches every site. A partition between two sites is a blackhole route on each side;
//! the caller's own namespace (the harness, the clients, the operator) still reaches both.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every namespace's name: `mojim-net-PID-N-SITE`.
const PREFIX: &str = "mojim-net-";

/// Runs `ip ARGS` and returns its error output on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out =
        Command::new("ip").args(args).output().map_err(|e| format!("run ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Namespaces and a bridge, removed on drop.
pub struct Netns {
    /// This process's id and the number of this set among the process's (`PID-N`).
    id: String,
    /// Short enough for interface names (15 bytes): the pid's last five digits and `N`.
    tag: String,
    subnet: String,
    /// Namespaces created so far.
    sites: usize,
    /// Pairs currently cut off from each other.
    cut: Vec<(usize, usize)>,
}

impl Netns {
    /// `sites` namespaces on a fresh bridge; an error when that cannot be done (not root).
    /// Namespaces and bridges that processes no longer running left behind are removed first.
    pub fn create(sites: usize) -> Result<Netns, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        if !rustix::process::geteuid().is_root() {
            return Err("network namespaces need root".into());
        }
        remove_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let used = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .map_err(|e| format!("run ip: {e}"))?;
        let subnet = (0..256u32)
            .map(|i| format!("10.213.{}", (pid + n + i) % 256))
            .find(|s| !used.contains(&format!("{s}.")))
            .ok_or("no free 10.213.x.0/24 subnet")?;
        let mut ns = Netns { id: format!("{pid}-{n}"), tag: tag(pid, n), subnet, sites: 0, cut: Vec::new() };
        let br = ns.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}.254/24", ns.subnet), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..sites {
            let name = ns.name(i);
            let (host, inner) = (format!("mjh{}x{i}", ns.tag), format!("mjn{}x{i}", ns.tag));
            ip(&["netns", "add", &name])?;
            ns.sites = i + 1;
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &name])?;
            ip(&["link", "set", &host, "master", &br, "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
            ip(&["-n", &name, "addr", "add", &format!("{}/24", ns.ip_of(i)), "dev", &inner])?;
            ip(&["-n", &name, "link", "set", &inner, "up"])?;
        }
        Ok(ns)
    }

    /// The bridge in the caller's namespace.
    pub fn bridge(&self) -> String {
        format!("mjb{}", self.tag)
    }

    /// The sites' subnet, `10.213.x` (a /24).
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// The namespace of site `i`.
    pub fn name(&self, i: usize) -> String {
        format!("{PREFIX}{}-{i}", self.id)
    }

    /// Site `i`'s address.
    pub fn ip_of(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// A command that runs `exe` in site `i`'s namespace (`ip netns exec`, which becomes `exe`).
    pub fn command(&self, i: usize, exe: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name(i)]).arg(exe);
        c
    }

    /// Cuts sites `a` and `b` off from each other (both directions).
    pub fn partition(&mut self, a: usize, b: usize) -> Result<(), String> {
        ip(&["-n", &self.name(a), "route", "add", "blackhole", &format!("{}/32", self.ip_of(b))])?;
        ip(&["-n", &self.name(b), "route", "add", "blackhole", &format!("{}/32", self.ip_of(a))])?;
        self.cut.push((a, b));
        Ok(())
    }

    /// Ends every partition.
    pub fn heal(&mut self) -> Result<(), String> {
        for (a, b) in std::mem::take(&mut self.cut) {
            ip(&["-n", &self.name(a), "route", "del", "blackhole", &format!("{}/32", self.ip_of(b))])?;
            ip(&["-n", &self.name(b), "route", "del", "blackhole", &format!("{}/32", self.ip_of(a))])?;
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for i in 0..self.sites {
            let _ = ip(&["netns", "del", &self.name(i)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// The short tag of set `n` of process `pid`, in its interface names.
fn tag(pid: u32, n: u32) -> String {
    format!("{}{n}", pid % 100_000)
}

/// Removes namespaces and bridges left behind by processes that no longer run.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let mut parts = rest.split('-');
        let (Some(Ok(pid)), Some(Ok(n))) =
            (parts.next().map(str::parse::<u32>), parts.next().map(str::parse::<u32>))
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
            let _ = ip(&["link", "del", &format!("mjb{}", tag(pid, n))]);
        }
    }
}
