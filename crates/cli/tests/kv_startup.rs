//! `mojim kv` refuses to start on bad settings or a region it cannot use, saying what is wrong
//! and what to do, and changes nothing.

mod common;

use common::{exe, Cluster};
use mojim::config::write_private;
use std::process::Command;

/// Runs `mojim kv` on `c` (which must fail); returns its stderr.
fn refused(c: &Cluster, extra: &[&str]) -> String {
    let listen: &[&str] = if extra.contains(&"--listen") { &[] } else { &["--listen", "127.0.0.1:0"] };
    let out = Command::new(exe())
        .args(["kv", "--config", c.cfg_path.to_str().unwrap()])
        .args(listen)
        .args(extra)
        .env("MOJIM_LOG", "error")
        .output()
        .expect("run mojim kv");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "mojim kv started: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("serving on"));
    err
}

fn unreplicated(test: &str, size: u64, edit: impl FnOnce(&mut mojim::config::ConfigFile)) -> Cluster {
    Cluster::new(test, size, |f| {
        f.primary.mode = "unreplicated".into();
        edit(f);
    })
}

/// The region's data area (opening the primary may change the file's header, its own business).
fn region_bytes(c: &Cluster) -> Vec<u8> {
    let r = mojim_region::RegionFile::open(&c.cfg.resolve(&c.cfg.file.region.path)).expect("open the region");
    let mut v = vec![0u8; r.size() as usize];
    r.read(0, &mut v);
    v
}

#[test]
fn bad_kv_settings_are_named() {
    let c = unreplicated("kv-bad-bulk", 4 << 20, |f| f.kv.max_bulk = "lots".into());
    let e = refused(&c, &[]);
    assert!(e.contains("[kv] max_bulk") && e.contains("lots"), "{e}");

    let c = unreplicated("kv-big-bulk", 4 << 20, |f| f.kv.max_bulk = "64MiB".into());
    let e = refused(&c, &[]);
    assert!(e.contains("max_bulk") && e.contains("log_capacity"), "{e}");

    let c = unreplicated("kv-bad-sentinels", 4 << 20, |f| f.kv.sentinels = vec!["nowhere".into()]);
    let e = refused(&c, &[]);
    assert!(e.contains("\"nowhere\"") && e.contains("host:port"), "{e}");

    let c = unreplicated("kv-unknown-key", 4 << 20, |_| {});
    let text = std::fs::read_to_string(&c.cfg_path).unwrap().replace("[kv]\n", "[kv]\nmax_keys = 5\n");
    write_private(&c.cfg_path, &text).unwrap();
    let e = refused(&c, &[]);
    assert!(e.contains("max_keys"), "{e}");
}

#[test]
fn a_region_holding_other_data_is_refused_untouched() {
    let c = unreplicated("kv-other-data", 4 << 20, |_| {});
    let region = mojim_region::RegionFile::open(&c.cfg.resolve(&c.cfg.file.region.path)).unwrap();
    region.write(100, b"someone else's data");
    drop(region);
    let before = region_bytes(&c);
    let e = refused(&c, &[]);
    assert!(e.contains("MOJIM-KV") && e.contains("a region of its own"), "{e}");
    assert!(region_bytes(&c) == before, "the region changed");
}

#[test]
fn a_region_too_small_is_refused() {
    let c = unreplicated("kv-small", 512 << 10, |_| {});
    let before = region_bytes(&c);
    let e = refused(&c, &[]);
    assert!(e.contains("524288") && e.contains("too small") && e.contains("--size"), "{e}");
    assert!(region_bytes(&c) == before, "the region changed");
}

#[test]
fn an_address_in_use_is_named() {
    let c = unreplicated("kv-in-use", 4 << 20, |_| {});
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = refused(&c, &["--listen", &addr]);
    assert!(e.contains(&addr) && e.contains("free address"), "{e}");
}

#[test]
fn protected_mode_refuses_an_open_address_without_a_password() {
    let c = unreplicated("kv-protected", 4 << 20, |_| {});
    let e = refused(&c, &["--listen", "0.0.0.0:0"]);
    assert!(
        e.contains("protected mode")
            && e.contains("0.0.0.0:0")
            && e.contains("[kv] password")
            && e.contains("protected_mode = false"),
        "{e}"
    );
    // With a password, or with protected mode turned off, it serves there.
    for (test, edit) in [
        (
            "kv-protected-password",
            Box::new(|f: &mut mojim::config::ConfigFile| f.kv.password = "pw".into())
                as Box<dyn FnOnce(&mut mojim::config::ConfigFile)>,
        ),
        ("kv-protected-off", Box::new(|f: &mut mojim::config::ConfigFile| f.kv.protected_mode = false)),
    ] {
        let c = unreplicated(test, 4 << 20, edit);
        let cfg = c.cfg_path.to_str().unwrap();
        let kv =
            mojim_tools::child::ChildNode::spawn(exe(), &["kv", "--config", cfg, "--listen", "0.0.0.0:0"]);
        assert!(kv.is_ok_and(|k| k.addr().starts_with("0.0.0.0:")), "{test}");
    }
}

#[test]
fn an_output_limit_below_twice_max_bulk_is_refused() {
    let c = unreplicated("kv-output-limit", 4 << 20, |f| {
        f.kv.max_bulk = "1MiB".into();
        f.kv.output_limit = "1MiB".into();
    });
    let e = refused(&c, &[]);
    assert!(e.contains("[kv] output_limit") && e.contains("\"1MiB\"") && e.contains("max_bulk"), "{e}");
}
