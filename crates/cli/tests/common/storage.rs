//! Small file systems made by a test (as root) to make storage fail under a node.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs a command; its failure, with what it printed, as an error.
pub fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("run {cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A tmpfs of a fixed size on a fresh folder, unmounted (and the folder removed) on drop.
pub struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it) on a fresh folder, or says why not.
    pub fn mount(test: &str, size: &str) -> Result<Tmpfs, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not running as root".into());
        }
        let dir = super::test_root().join(format!("mojim-mp-{}-{test}-tmpfs", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let path = dir.to_str().ok_or("a non-UTF-8 path")?;
        if let Err(e) = run("mount", &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", path]) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(Tmpfs { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Fills the file system with one file (so that no page is left to allocate); returns it.
    pub fn fill(&self) -> PathBuf {
        let p = self.dir.join("filler");
        let mut f = std::fs::File::create(&p).expect("create the filler");
        let chunk = vec![0xffu8; 64 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) => break,
                Err(e) => panic!("fill {}: {e}", p.display()),
            }
        }
        p
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let path = self.dir.to_str().unwrap_or_default();
        if run("umount", &[path]).is_err() {
            // Busy (a process still holds a file there): detach it now, it goes when released.
            let _ = run("umount", &["-l", path]);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
