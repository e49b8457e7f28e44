//! The cluster secret at rest and at the door: `mojim init` writes it readable by its owner
//! only, a configuration that holds it readable by others is warned about, and a secret too
//! short to resist guessing is refused wherever it comes from.

mod common;

use common::{exe, TempDir};
use mojim::config::{random_uuid, template, SECRET_ENV};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn mojim(args: &[&str], env_secret: Option<&str>) -> Output {
    let mut c = Command::new(exe());
    c.args(args).env_remove(SECRET_ENV);
    if let Some(s) = env_secret {
        c.env(SECRET_ENV, s);
    }
    c.output().expect("run mojim")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn init_writes_the_configuration_readable_by_its_owner_only() {
    let d = TempDir::new("secrets-init");
    let dir = d.path().join("node");
    let dir_s = dir.to_str().expect("utf-8");
    let o = mojim(&["init", "--dir", dir_s, "--size", "1MiB"], None);
    assert!(o.status.success(), "mojim init failed: {}", stderr(&o));
    let cfg = dir.join("mojim.toml");
    assert_eq!(mode(&cfg), 0o600, "mojim.toml holds the secret");
    // Overwriting a configuration that others could read restricts it too.
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::remove_file(dir.join("region.mojim")).expect("remove the region");
    let o = mojim(&["init", "--dir", dir_s, "--size", "1MiB", "--force"], None);
    assert!(o.status.success(), "mojim init --force failed: {}", stderr(&o));
    assert_eq!(mode(&cfg), 0o600, "mojim.toml rewritten by --force");
}

#[test]
fn a_configuration_with_a_secret_readable_by_others_is_warned_about() {
    let d = TempDir::new("secrets-warn");
    let cfg = d.path().join("mojim.toml");
    std::fs::write(&cfg, template(&random_uuid(), 1 << 20, "a long enough cluster secret", "127.0.0.1:1"))
        .expect("write");
    let cfg_s = cfg.to_str().expect("utf-8");
    // Any command that reads it warns; `status` then fails to connect, which does not matter here.
    let status = || mojim(&["status", "--config", cfg_s, "--addr", "127.0.0.1:1"], None);
    for (m, who) in [(0o644, "its group and by others"), (0o604, "others"), (0o640, "its group")] {
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(m)).expect("chmod");
        let e = stderr(&status());
        assert!(
            e.contains(&format!("{cfg_s} holds the cluster secret and is readable by {who} (mode {m:03o})"))
                && e.contains(&format!("chmod 600 {cfg_s}")),
            "no warning naming the file and the fix at mode {m:o}: {e}"
        );
    }
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let e = stderr(&status());
    assert!(!e.contains("holds the cluster secret"), "a warning at mode 600: {e}");
}

#[test]
fn a_secret_shorter_than_16_bytes_is_refused_from_the_flag_the_environment_and_the_file() {
    let d = TempDir::new("secrets-short");
    // `mojim init --secret`: refused before anything is written.
    let dir = d.path().join("node");
    let o = mojim(
        &["init", "--dir", dir.to_str().expect("utf-8"), "--size", "1MiB", "--secret", "hunter2"],
        None,
    );
    assert!(!o.status.success(), "mojim init accepted a 7-byte secret");
    let e = stderr(&o);
    assert!(e.contains("--secret is 7 bytes") && e.contains("at least 16"), "{e}");
    assert!(e.contains("leave out --secret"), "the error does not name the fix: {e}");
    assert!(!dir.exists(), "mojim init created {} before refusing", dir.display());

    // From the file, and from MOJIM_SECRET (which wins over the file).
    let cfg = d.path().join("mojim.toml");
    std::fs::write(&cfg, template(&random_uuid(), 1 << 20, "fifteen bytes..", "127.0.0.1:1")).expect("write");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let cfg_s = cfg.to_str().expect("utf-8");
    let e = stderr(&mojim(&["status", "--config", cfg_s], None));
    assert!(e.contains("[security] secret is 15 bytes") && e.contains("mojim init"), "{e}");
    let e = stderr(&mojim(&["serve", "--config", cfg_s], Some("short")));
    assert!(e.contains("MOJIM_SECRET is 5 bytes") && e.contains("at least 16"), "{e}");
    // Sixteen bytes are enough: `status` gets as far as connecting.
    let e = stderr(&mojim(&["status", "--config", cfg_s], Some("sixteen bytes!!!")));
    assert!(!e.contains("bytes; it must be at least"), "{e}");
    assert!(e.contains("127.0.0.1:1"), "status did not try to connect: {e}");
}
