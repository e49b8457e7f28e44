//! Programs run under libmojim_preload.so: the interposer of this build, a cluster with a
//! running mirror for it, and the mirror's copy of a listed file as an operator gets it.

use super::{wait_applied, Cluster};
use mojim::config::write_private;
use mojim_format::files::FileTable;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The interposer built with this test (the cli crate dev-depends on mojim-preload, so cargo
/// builds it into the same target folder as the test binary).
pub fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("the test binary's folder");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libmojim_preload.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libmojim_preload.so is not in {} or its parent: build the workspace (cargo test builds it)",
        deps.display()
    );
}

/// A cluster of `size` bytes with a running mirror, its configuration aimed at it (the
/// interposer reads the file), and a folder `db` in it for the program's files.
pub fn cluster(test: &str, size: u64) -> (Cluster, PathBuf) {
    let mut c = Cluster::new(test, size, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    c.start_mirror();
    c.cfg.file.primary.mirror = c.mirror_addr();
    save(&c);
    let db = c.dir.path().join("db");
    std::fs::create_dir_all(&db).expect("create the database folder");
    (c, db)
}

/// Writes the cluster's configuration back to its file.
pub fn save(c: &Cluster) {
    write_private(&c.cfg_path, &toml::to_string(&c.cfg.file).expect("serialise")).expect("write mojim.toml");
}

/// A command run under the interposer, replicating `files` with `config`.
pub fn under_preload(program: &Path, config: &Path, files: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("LD_PRELOAD", preload_lib()).env("MOJIM_CONFIG", config).env("MOJIM_FILES", files);
    cmd
}

/// A program's status and output, for failure messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The mirror's copy of the listed file `name`, as an operator gets it: `mojim export --file`,
/// which cuts it out of one consistent snapshot of the data area with the file table.
pub fn mirror_copy(c: &Cluster, name: &str) -> Vec<u8> {
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let page = admin.read(0, 4096).expect("read the mirror's file table");
    let table = FileTable::decode(&page).expect("the mirror has the file table");
    let entry =
        table.file(name).unwrap_or_else(|| panic!("{name} is not in the mirror's table {:?}", table.names()));
    let out = c.dir.path().join("exported");
    let o = Command::new(super::exe())
        .args(["export", "--config", c.cfg_path.to_str().expect("utf-8"), "--addr", &c.mirror_addr()])
        .arg("--out")
        .arg(&out)
        .args(["--file", name])
        .output()
        .expect("run mojim export");
    assert!(o.status.success(), "mojim export --file: {}", text(&o));
    let copy = std::fs::read(&out).expect("read the export");
    assert_eq!(copy.len() as u64, entry.size);
    std::fs::remove_file(&out).expect("remove the export");
    copy
}

/// Compiles the C program `source` (crates/cli/tests/c) into `dir` with `cc` (GNU C11, warnings
/// are errors; the program uses no library of this project) and returns its path.
pub fn cc(dir: &Path, source: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(source);
    let exe = dir.join(src.file_stem().expect("a file name"));
    super::c::run(
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(&src),
    );
    exe
}
