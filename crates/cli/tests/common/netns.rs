//! Network namespaces for partition tests (root only): each site in a namespace of its own,
//! joined by a veth pair to a bridge in the test's namespace, which reaches every site. A
//! partition between two sites is a blackhole route on each side; the test's own namespace
//! (the clients, the operator) still reaches both.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

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
    tag: String,
    subnet: String,
    sites: usize,
    cut: Vec<(usize, usize)>,
}

impl Netns {
    /// `sites` namespaces on a fresh bridge; an error when that cannot be done (not root).
    pub fn create(sites: usize) -> Result<Netns, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        if !rustix::process::geteuid().is_root() {
            return Err("network namespaces need root".into());
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let used = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .map_err(|e| format!("run ip: {e}"))?;
        let base = std::process::id() + n;
        let subnet = (0..256u32)
            .map(|i| format!("10.214.{}", (base + i) % 256))
            .find(|s| !used.contains(&format!("{s}.")))
            .ok_or("no free 10.214.x.0/24 subnet")?;
        let mut ns = Netns { tag, subnet, sites: 0, cut: Vec::new() };
        let br = ns.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}.254/24", ns.subnet), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for i in 0..sites {
            let name = ns.name(i);
            let (host, inner) = (format!("mkh{}x{i}", ns.tag), format!("mkn{}x{i}", ns.tag));
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

    fn bridge(&self) -> String {
        format!("mkb{}", self.tag)
    }

    /// The namespace of site `i`.
    pub fn name(&self, i: usize) -> String {
        format!("mojim-kvt-{}-{i}", self.tag)
    }

    /// Site `i`'s address.
    pub fn ip_of(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// Cuts sites `a` and `b` off from each other.
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
