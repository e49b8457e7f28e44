//! `mojim kv` refuses to start on bad settings or a region it cannot use, saying what is wrong
//! and what to do, and changes nothing.

mod common;

use common::edit_kv;
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
    let c = unreplicated("kv-bad-bulk", 4 << 20, |f| edit_kv(f, |k| k.max_bulk = "lots".into()));
    let e = refused(&c, &[]);
    assert!(e.contains("[kv] max_bulk") && e.contains("lots"), "{e}");

    let c = unreplicated("kv-big-bulk", 4 << 20, |f| edit_kv(f, |k| k.max_bulk = "64MiB".into()));
    let e = refused(&c, &[]);
    assert!(e.contains("max_bulk") && e.contains("log_capacity"), "{e}");

    let c =
        unreplicated("kv-bad-sentinels", 4 << 20, |f| edit_kv(f, |k| k.sentinels = vec!["nowhere".into()]));
    let e = refused(&c, &[]);
    assert!(e.contains("\"nowhere\"") && e.contains("host:port"), "{e}");

    // A key mojim kv does not know, or a value of the wrong type: refused by mojim kv, naming
    // the file, [kv] and the key (the library, which keeps [kv] as written, loads the file).
    for (test, (from, to), named) in [
        ("kv-unknown-key", ("[kv]\n", "[kv]\nmax_keys = 5\n"), "[kv] max_keys: unknown field `max_keys`"),
        (
            "kv-bad-type",
            ("max_clients = 10000\n", "max_clients = \"lots\"\n"),
            "[kv] max_clients: invalid type: string \"lots\"",
        ),
    ] {
        // Every key of [kv] written, so that there is one to change.
        let c = unreplicated(test, 4 << 20, |f| edit_kv(f, |_| {}));
        let text = std::fs::read_to_string(&c.cfg_path).unwrap();
        assert!(text.contains(from), "{text}");
        write_private(&c.cfg_path, &text.replace(from, to)).unwrap();
        mojim::Config::load(&c.cfg_path).expect("the library does not read [kv]");
        let e = refused(&c, &[]);
        let file = c.cfg_path.display().to_string();
        assert!(e.contains(&format!("{file}: {named}")) && e.contains("docs/KV.md"), "{e}");
    }
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
            Box::new(|f: &mut mojim::config::ConfigFile| edit_kv(f, |k| k.password = "pw".into()))
                as Box<dyn FnOnce(&mut mojim::config::ConfigFile)>,
        ),
        (
            "kv-protected-off",
            Box::new(|f: &mut mojim::config::ConfigFile| edit_kv(f, |k| k.protected_mode = false)),
        ),
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
        edit_kv(f, |k| {
            k.max_bulk = "1MiB".into();
            k.output_limit = "1MiB".into();
        });
    });
    let e = refused(&c, &[]);
    assert!(e.contains("[kv] output_limit") && e.contains("\"1MiB\"") && e.contains("max_bulk"), "{e}");
}

/// Lines a child prints on one of its streams, sent as they come.
fn lines(stream: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (up to 60 s) for a line containing `what`; panics naming the lines seen.
fn wait_for(rx: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return l,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no line with {what:?}; saw {seen:#?}"),
        }
    }
}

#[test]
fn kv_started_before_its_mirror_waits_for_it_and_then_serves() {
    let mut c = Cluster::new("kv-waits-for-mirror", 16 << 20, |_| {});
    // An address nothing listens on yet (bound, noted, freed).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let mut kv = Command::new(exe())
        .args(["kv", "--config", c.cfg_path.to_str().unwrap(), "--listen", "127.0.0.1:0", "--mirror", &addr])
        .env("MOJIM_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mojim kv");
    let out = lines(kv.stdout.take().unwrap());
    let err = lines(kv.stderr.take().unwrap());
    let said = wait_for(&err, "waiting for the mirror");
    assert!(said.contains(&addr) && said.contains("mojim serve"), "{said}");
    assert!(kv.try_wait().unwrap().is_none(), "mojim kv exited instead of waiting");
    c.start_mirror_with(&["--listen", &addr]);
    let serving = wait_for(&out, "serving on");
    let kv_addr = serving.rsplit(' ').next().unwrap().to_string();
    let mut s = std::net::TcpStream::connect(&kv_addr).expect("connect to mojim kv");
    use std::io::{Read, Write};
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n").unwrap();
    let mut reply = [0u8; 5];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+OK\r\n");
    let _ = kv.kill();
    let _ = kv.wait();
}

#[test]
fn kv_told_not_to_wait_names_the_unreachable_mirror_at_once() {
    let c = Cluster::new("kv-no-wait", 16 << 20, |_| {});
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let err = refused(&c, &["--mirror", &addr, "--mirror-wait", "0"]);
    assert!(err.contains(&addr), "{err}");
}
