//! `mojim kv`'s password: `mojim init` writes a random one; until a client gives it (`AUTH`,
//! `HELLO ... AUTH`) every other command is refused with `-NOAUTH` and changes nothing; failed
//! attempts are counted in INFO and logged with the client's address; `MOJIM_KV_PASSWORD`
//! overrides the file; and without a password, protected mode refuses any address but
//! loopback. Real redis-cli and redis-py clients against a mirror and `mojim kv` in child
//! processes.

mod common;

use common::edit_kv;
use common::kv::{python_with_redis, tool, KvCluster, Resp};
use common::{exe, Cluster, TempDir};
use mojim_kv::resp::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const PASSWORD: &str = "correct horse battery staple";

fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

/// `mojim kv` on `c`'s region aimed at its mirror, stderr into `log`, `env` set; returns the
/// child and the address it serves on.
#[allow(clippy::zombie_processes)] // the child is returned; the caller kills and waits for it
fn kv_logging(c: &Cluster, log: &std::path::Path, env: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(exe());
    cmd.args(["kv", "--config", c.cfg_path.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--mirror", &c.mirror_addr()])
        .env("MOJIM_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("create the log"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start mojim kv");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).expect("read stdout") > 0, "mojim kv exited: see {}", log.display());
        if let Some(a) = line.trim().strip_prefix("serving on ") {
            return (child, a.to_string());
        }
    }
}

#[test]
fn a_client_without_the_password_can_do_nothing_but_authenticate() {
    let mut c = Cluster::new("kv-auth", 16 << 20, |f| edit_kv(f, |k| k.password = PASSWORD.into()));
    c.start_mirror();
    let log = c.dir.path().join("kv.log");
    let (mut child, addr) = kv_logging(&c, &log, &[]);

    let mut owner = Resp::connect(&addr);
    assert_eq!(owner.cmd(&["AUTH", PASSWORD]), Value::Simple(b"OK".to_vec()));
    assert_eq!(owner.cmd(&["SET", "k", "v"]), Value::Simple(b"OK".to_vec()));

    let mut stranger = Resp::connect(&addr);
    for cmd in [
        &["GET", "k"][..],
        &["KEYS", "*"],
        &["FLUSHALL"],
        &["SET", "k", "stolen"],
        &["INFO"],
        &["CONFIG", "GET", "*"],
        &["MULTI"],
        &["DBSIZE"],
    ] {
        assert_eq!(err(&stranger.cmd(cmd)), "NOAUTH Authentication required.", "{cmd:?}");
    }
    assert!(err(&stranger.cmd(&["HELLO", "3"])).starts_with("NOAUTH"));
    assert!(err(&stranger.cmd(&["AUTH", "guess"])).starts_with("WRONGPASS"));
    assert!(err(&stranger.cmd(&["AUTH", "default", "guess"])).starts_with("WRONGPASS"));
    assert!(err(&stranger.cmd(&["HELLO", "3", "AUTH", "default", "guess"])).starts_with("WRONGPASS"));
    // Nothing the stranger sent changed anything.
    assert_eq!(owner.cmd(&["GET", "k"]), Value::bulk("v"));
    assert_eq!(owner.cmd(&["DBSIZE"]), Value::Int(1));
    let Value::Bulk(info) = owner.cmd(&["INFO", "stats"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(info.contains("acl_access_denied_auth:3\r\n"), "{info}");
    // HELLO with the password authenticates and switches the protocol in one step.
    let Value::Map(m) = stranger.cmd(&["HELLO", "3", "AUTH", "default", PASSWORD]) else { panic!("HELLO") };
    assert!(m.iter().any(|(k, v)| *k == Value::bulk("proto") && *v == Value::Int(3)));
    assert_eq!(stranger.cmd(&["GET", "k"]), Value::bulk("v"));

    // The failures are in the log, with the client's address.
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read_to_string(&log).expect("read the log");
    let me = stranger.stream.local_addr().expect("local address").to_string();
    assert!(logged.contains("AUTH failed") && logged.contains(&me), "{logged}");
    assert!(!logged.contains(PASSWORD) && !logged.contains("guess"), "passwords are never logged: {logged}");
}

#[test]
fn redis_cli_and_redis_py_authenticate() {
    let Some(mut cli) = tool("redis-cli") else { return };
    let Some(mut py) = python_with_redis() else { return };
    let k = KvCluster::with("kv-auth-clients", 16 << 20, |f| edit_kv(f, |k| k.password = PASSWORD.into()));
    let out =
        cli.args(["-p", &k.port(), "--no-auth-warning", "-a", PASSWORD, "SET", "greeting", "hi"]).output();
    assert_eq!(String::from_utf8_lossy(&out.expect("redis-cli").stdout), "OK\n");
    let out = tool("redis-cli").expect("checked").args(["-p", &k.port(), "GET", "greeting"]).output();
    let out = String::from_utf8_lossy(&out.expect("redis-cli").stdout).into_owned();
    assert!(out.starts_with("NOAUTH"), "{out}");
    let script = format!(
        "import redis\n\
         r = redis.Redis(port={port}, password={PASSWORD:?})\n\
         assert r.get('greeting') == b'hi'\n\
         r.set('py', 'yes')\n\
         bad = redis.Redis(port={port}, password='wrong')\n\
         try:\n    bad.get('greeting')\n    raise SystemExit('a wrong password was accepted')\n\
         except redis.exceptions.ResponseError as e:\n    assert str(e).startswith('WRONGPASS'), e\n\
         print('done')\n",
        port = k.port()
    );
    let out = py.args(["-c", &script]).output().expect("run python");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "redis-py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut r = k.client();
    r.cmd(&["AUTH", PASSWORD]);
    assert_eq!(r.cmd(&["GET", "py"]), Value::bulk("yes"));
}

#[test]
fn the_environment_overrides_the_files_password() {
    let mut c = Cluster::new("kv-auth-env", 16 << 20, |f| edit_kv(f, |k| k.password = PASSWORD.into()));
    c.start_mirror();
    let log = c.dir.path().join("kv.log");
    let (mut child, addr) = kv_logging(&c, &log, &[("MOJIM_KV_PASSWORD", "from the environment")]);
    let mut r = Resp::connect(&addr);
    assert!(err(&r.cmd(&["AUTH", PASSWORD])).starts_with("WRONGPASS"));
    assert_eq!(r.cmd(&["AUTH", "from the environment"]), Value::Simple(b"OK".to_vec()));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn init_writes_a_random_password_to_a_private_file() {
    let dir = TempDir::new("kv-auth-init");
    let mut passwords = Vec::new();
    for n in 0..2 {
        let d = dir.path().join(format!("node{n}"));
        let out = Command::new(exe())
            .args(["init", "--dir", d.to_str().unwrap(), "--size", "4MiB"])
            .output()
            .expect("run mojim init");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let cfg = mojim::Config::load(&d.join("mojim.toml")).expect("load");
        let kv = cfg.section::<mojim_kv::KvSection>().expect("[kv] as init wrote it");
        let p = kv.password.clone();
        assert!(p.len() >= 32 && p.bytes().all(|b| b.is_ascii_hexdigit()), "{p:?}");
        assert!(kv.protected_mode && kv.read_barrier, "the safe defaults");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("mojim.toml")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        passwords.push(p);
    }
    assert_ne!(passwords[0], passwords[1]);
}

/// `mojim init` writes `[rvm]` and `[kv]`, whose text their crates own, where they always stood
/// (after `[security]`, before `[metrics]`), each read by its owner with every default.
#[test]
fn init_writes_the_owned_sections_in_place_each_read_by_its_owner() {
    let dir = TempDir::new("kv-auth-init-sections");
    let d = dir.path().join("node");
    let out = Command::new(exe())
        .args(["init", "--dir", d.to_str().unwrap(), "--size", "4MiB"])
        .output()
        .expect("run mojim init");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(d.join("mojim.toml")).expect("read mojim.toml");
    let at = |header: &str| text.find(&format!("\n[{header}]\n")).unwrap_or_else(|| panic!("no [{header}]"));
    assert!(at("security") < at("rvm") && at("rvm") < at("kv") && at("kv") < at("metrics"), "{text}");
    let cfg = mojim::Config::load(&d.join("mojim.toml")).expect("load");
    let rvm = cfg.section::<mojim_rvm::RvmSection>().expect("[rvm] as init wrote it");
    assert_eq!(format!("{rvm:?}"), format!("{:?}", mojim_rvm::RvmSection::default()));
    let kv = cfg.section::<mojim_kv::KvSection>().expect("[kv] as init wrote it");
    let defaults = mojim_kv::KvSection { password: kv.password.clone(), ..Default::default() };
    assert_eq!(format!("{kv:?}"), format!("{defaults:?}"));
}
