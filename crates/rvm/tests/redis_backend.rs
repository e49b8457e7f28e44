//! Recoverable memory on the Redis backend, against a real `redis-server` each test starts on
//! a port of its own: the suite every backend passes (tests/suite), then what is the Redis
//! backend's own: a crash between the shadow writes and EXEC, servers that answer garbage or
//! errors, a server gone during a commit and back, a server back without the memory.

mod suite;

use mojim_rvm::redis::resp::{Conn, Reply};
use mojim_rvm::{
    Backend, RedisOptions, RedisPassword, RedisRmem, RedisTls, Rmem, Rvm, RvmError, RvmOptions, WriteTracking,
};
use mojim_transport::ports::free_loopback_port;
use mojim_transport::tls::pki::{Ca, Validity};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use suite::{base, Dir, Store};

const PAGE: u64 = 4096;
const PREFIX: &str = "rvm-test";

/// A `redis-server` of the test's: its own port, its files in the test's folder; killed and
/// the folder removed when dropped.
struct Server {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    dir: Dir,
    /// For a server that speaks TLS only: how the test's own connections speak it.
    tls: Option<RedisTls>,
}

impl Server {
    /// A server without persistence (`--save "" --appendonly no`), with `extra` settings after.
    fn start(name: &str, extra: &[&str]) -> Server {
        Server::start_with(name, extra, None)
    }

    /// A server that speaks TLS only, on its port, with `pki`'s certificate, requiring client
    /// certificates from `pki`'s CA (Redis's default `tls-auth-clients yes`).
    fn start_tls(name: &str, pki: &Pki) -> Server {
        let f = |n: &str| pki.dir.0.join(n).to_str().unwrap().to_string();
        let (ca, cert, key) = (f("ca.pem"), f("redis.pem"), f("redis.key"));
        let extra = ["--tls-cert-file", &cert, "--tls-key-file", &key, "--tls-ca-cert-file", &ca];
        Server::start_with(name, &extra, Some(pki.client(true)))
    }

    fn start_with(name: &str, extra: &[&str], tls: Option<RedisTls>) -> Server {
        let mut s = Server {
            child: None,
            port: 0,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: Dir::new(&format!("redis-{name}")),
            tls,
        };
        // Another process may take the port between choosing and binding it: choose again.
        for _ in 0..5 {
            s.port = free_loopback_port().expect("a free port");
            if s.spawn() {
                return s;
            }
        }
        panic!("redis-server did not start on any of 5 ports: {}", s.log());
    }

    /// Starts the server on its port; false if the port was taken.
    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let (data, log) = (self.dir.0.join("data"), self.dir.0.join("redis.log"));
        let (data, log) = (data.to_str().unwrap(), log.to_str().unwrap());
        // A TLS server listens with TLS on its port and on no plain one.
        let (plain, tls) = match self.tls {
            None => (port.as_str(), vec![]),
            Some(_) => ("0", vec!["--tls-port", port.as_str()]),
        };
        let mut args = vec![
            "--port",
            plain,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            data,
            "--logfile",
            log,
            "--loglevel",
            "notice",
            "--daemonize",
            "no",
        ];
        args.extend(tls);
        args.extend(self.extra.iter().map(String::as_str));
        std::fs::create_dir_all(self.dir.0.join("data")).unwrap();
        let child = Command::new("redis-server")
            .args(&args)
            .current_dir(&self.dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed, and the Redis backend's tests need a real one: install the \
                 Debian package redis-server (scripts/test does)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        // Wait until it answers PING, with PONG or an error such as NOAUTH (a start-up wait, not
        // a timed test).
        for _ in 0..1000 {
            if let Some(status) = child.try_wait().unwrap() {
                if self.log().contains("Address already in use") {
                    return false;
                }
                panic!("redis-server exited ({status}): {}", self.log());
            }
            if let Ok(mut c) = Conn::connect_tls(&self.addr(), Duration::from_secs(1), self.tls.as_ref()) {
                if matches!(c.call(&[b"PING"]), Ok(Reply::Status(_) | Reply::Error(_))) {
                    self.child = Some(child);
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server did not answer PING on port {port}: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("redis.log")).unwrap_or_default()
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `kill -9`.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Starts it again on the same port, from the same folder.
    fn restart(&mut self) {
        assert!(self.spawn(), "port {} was taken while the server was down", self.port);
    }

    fn conn(&self) -> Conn {
        Conn::connect_tls(&self.addr(), Duration::from_secs(10), self.tls.as_ref()).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn redis_options(addr: &str, capacity: u64) -> RedisOptions {
    RedisOptions {
        addr: addr.into(),
        key: PREFIX.into(),
        capacity,
        timeout: Duration::from_secs(10),
        password: None,
        tls: None,
    }
}

fn options(addr: &str, capacity: u64, base: usize) -> RvmOptions {
    RvmOptions {
        backend: Backend::Redis(redis_options(addr, capacity)),
        base,
        tracking: Some(WriteTracking::UffdAsync),
    }
}

fn call(c: &mut Conn, args: &[&[u8]]) -> Reply {
    c.call(args).unwrap()
}

fn key(page: u64, version: u64) -> Vec<u8> {
    format!("{PREFIX}:p:{page}:{version}").into_bytes()
}

fn master_key() -> Vec<u8> {
    format!("{PREFIX}:master").into_bytes()
}

/// The master entry: (seq, page → version).
fn master(c: &mut Conn) -> (u64, Vec<(u64, u64)>) {
    let Reply::Array(v) = call(c, &[b"HGETALL", &master_key()]) else { panic!("HGETALL") };
    let text = |r: &Reply| match r {
        Reply::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("{other:?}"),
    };
    let (mut seq, mut pages) = (0, Vec::new());
    for pair in v.chunks(2) {
        let (f, val) = (text(&pair[0]), text(&pair[1]).parse::<u64>().unwrap());
        match f.as_str() {
            "seq" => seq = val,
            "capacity" | "checked" => {}
            p => pages.push((p.parse().unwrap(), val)),
        }
    }
    pages.sort_unstable();
    (seq, pages)
}

/// Every key on the server, sorted.
fn keys(c: &mut Conn) -> Vec<String> {
    let Reply::Array(v) = call(c, &[b"KEYS", b"*"]) else { panic!("KEYS") };
    let mut k: Vec<String> = v
        .into_iter()
        .map(|r| match r {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    k.sort();
    k
}

/// A Redis server and the memory's size on it; `resized` shares the server.
struct RedisStore {
    server: Arc<Server>,
    capacity: u64,
}

impl Store for RedisStore {
    fn create(name: &str, size: u64) -> RedisStore {
        RedisStore { server: Arc::new(Server::start(name, &[])), capacity: size }
    }

    fn options(&self, base: usize, tracking: WriteTracking) -> RvmOptions {
        RvmOptions { tracking: Some(tracking), ..options(&self.server.addr(), self.capacity, base) }
    }

    /// Read with plain commands: the master's version of each page, then that key.
    fn stored(&self, len: usize) -> Vec<u8> {
        let mut c = self.server.conn();
        let (_, pages) = master(&mut c);
        let mut out = vec![0u8; len];
        for (p, v) in pages {
            if p * PAGE >= len as u64 {
                continue;
            }
            let Reply::Bulk(b) = call(&mut c, &[b"GET", &key(p, v)]) else { panic!("page {p} missing") };
            assert_eq!(b.len() as u64, PAGE + 4, "the page and its check");
            let at = (p * PAGE) as usize;
            let n = (len - at).min(PAGE as usize);
            out[at..at + n].copy_from_slice(&b[..n]);
        }
        out
    }

    /// The same keys, opened with another capacity.
    fn resized(&self, _name: &str, size: u64, _len: usize) -> RedisStore {
        RedisStore { server: Arc::clone(&self.server), capacity: size }
    }
}

#[test]
fn pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker() {
    suite::pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker::<RedisStore>()
}

#[test]
fn a_commit_sends_exactly_the_written_pages_with_the_header() {
    suite::a_commit_sends_exactly_the_written_pages_with_the_header::<RedisStore>()
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    suite::bad_input_is_refused_and_changes_nothing::<RedisStore>()
}

#[test]
fn recovery_refuses_a_capacity_other_than_the_memorys() {
    suite::recovery_refuses_a_store_of_another_size::<RedisStore>()
}

#[test]
fn pages_live_under_the_master_and_superseded_versions_are_deleted() {
    let server = Server::start("keys", &[]);
    let rvm = Rvm::open(&options(&server.addr(), 1 << 20, base(5))).unwrap();
    let a = rvm.alloc(2 * 4096).unwrap();
    rvm.set_usr_data(a).unwrap();
    rvm.txn_commit().unwrap();
    let first = (a as u64 - base(5) as u64) / PAGE;
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *a.add(4096) = 9 };
    rvm.txn_commit().unwrap();
    let mut c = server.conn();
    let (seq, pages) = master(&mut c);
    assert_eq!(seq, 3, "the empty table, the block, the write");
    assert_eq!(pages.len(), 16 + 2, "the meta block and the block");
    assert!(
        pages.contains(&(0, 3)) && pages.contains(&(first, 2)) && pages.contains(&(first + 1, 3)),
        "{pages:?}"
    );
    // Exactly the master's keys are left once the deletions are answered (close reads them):
    // the versions commits 2 and 3 superseded are gone.
    rvm.close().unwrap();
    let mut want: Vec<String> = pages
        .iter()
        .map(|&(p, v)| String::from_utf8(key(p, v)).unwrap())
        .chain([format!("{PREFIX}:master")])
        .collect();
    want.sort();
    assert_eq!(keys(&mut c), want);
    // A block freed leaves the master with the next commit, and its keys are deleted.
    let rvm = Rvm::open(&options(&server.addr(), 1 << 20, base(5))).unwrap();
    rvm.free(rvm.usr_data()).unwrap();
    rvm.set_usr_data(std::ptr::null_mut()).unwrap();
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let (_, pages) = master(&mut c);
    assert!(pages.iter().all(|&(p, _)| p < 16), "only the meta block is left: {pages:?}");
    assert_eq!(keys(&mut c).len(), 16 + 1);
}

#[test]
fn a_crash_between_the_shadow_writes_and_exec_recovers_the_previous_commit_and_removes_the_orphans() {
    let server = Server::start("crash", &[]);
    let opts = options(&server.addr(), 1 << 20, base(6));
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 1 };
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let mut c = server.conn();
    let (seq, pages) = master(&mut c);
    let page = (p as u64 - base(6) as u64) / PAGE;
    // Commit seq + 1, as a process would have made it before dying: shadow pages for the
    // meta block's first page, p's page and a page never used, the switch queued, no EXEC.
    let next = seq + 1;
    for q in [0, page, 200] {
        assert_eq!(call(&mut c, &[b"SET", &key(q, next), &[0xff; 4096]]), Reply::Status("OK".into()));
    }
    assert_eq!(call(&mut c, &[b"MULTI"]), Reply::Status("OK".into()));
    let (n, pg) = (next.to_string(), page.to_string());
    assert_eq!(
        call(
            &mut c,
            &[b"HSET", &master_key(), b"0", n.as_bytes(), pg.as_bytes(), n.as_bytes(), b"seq", n.as_bytes()]
        ),
        Reply::Status("QUEUED".into())
    );
    // Keys under the prefix that are not page keys, and another prefix's: not garbage.
    for k in [format!("{PREFIX}:p:notes"), format!("{PREFIX}:p:007:1"), format!("{PREFIX}-other:p:1:1")] {
        let mut w = server.conn();
        assert_eq!(call(&mut w, &[b"SET", k.as_bytes(), b"x"]), Reply::Status("OK".into()));
    }
    drop(c); // the process dies: Redis discards the queued transaction
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(rvm.usr_data(), p as *mut u8);
    // SAFETY: `p` is the root block again (asserted just above), mapped while the reopened `rvm`
    // lives.
    assert_eq!(unsafe { *p }, 1, "the previous commit, whole");
    assert_eq!(rvm.status().recovery.expect("recovered").seq, 1 + 1, "the RVM header's commit count");
    let mut c = server.conn();
    assert_eq!(master(&mut c), (seq, pages.clone()), "the master is the previous one");
    for q in [0, page, 200] {
        assert_eq!(call(&mut c, &[b"EXISTS", &key(q, next)]), Reply::Int(0), "orphan of page {q}");
    }
    for k in [format!("{PREFIX}:p:notes"), format!("{PREFIX}:p:007:1"), format!("{PREFIX}-other:p:1:1")] {
        assert_eq!(call(&mut c, &[b"EXISTS", k.as_bytes()]), Reply::Int(1), "{k} is not ours");
    }
    // And the memory goes on: the next commit takes the number the crashed one had.
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 2 };
    rvm.txn_commit().unwrap();
    assert_eq!(master(&mut c).0, next);
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 2);
    rvm.close().unwrap();
}

/// A server on a port of its own that reads a command and answers `answer`, once.
fn fake_server(answer: &'static [u8]) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 256];
        let _ = s.read(&mut b);
        let _ = s.write_all(answer);
    });
    (addr, t)
}

fn redis_error(r: Result<Rvm, RvmError>) -> String {
    match r {
        Err(RvmError::Redis(m)) => m,
        Err(e) => panic!("not a Redis error: {e:?}"),
        Ok(_) => panic!("opened"),
    }
}

#[test]
fn a_server_that_answers_garbage_an_error_or_nothing_is_named() {
    // Not Redis at all.
    let (addr, t) = fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    let m = redis_error(Rvm::open(&options(&addr, 1 << 20, base(7))));
    assert!(
        m.contains(&addr) && m.contains("protocol violation") && m.contains("is it a Redis server"),
        "{m}"
    );
    t.join().unwrap();
    // An array longer than this client takes (the answer to its first command, PING): named,
    // and no allocation of that size.
    let (addr, t) = fake_server(b"*100000000000\r\n$3\r\nseq\r\n");
    let m = redis_error(Rvm::open(&options(&addr, 1 << 20, base(7))));
    assert!(m.contains(&addr) && m.contains("an array of 100000000000 elements"), "{m}");
    t.join().unwrap();
    // Nothing listening.
    let addr = format!("127.0.0.1:{}", free_loopback_port().expect("a free port"));
    let m = redis_error(Rvm::open(&options(&addr, 1 << 20, base(7))));
    assert!(m.contains(&addr) && m.contains("cannot connect"), "{m}");
    // A real server's error replies: a master key of another type, a master hash of something
    // else. (One that wants a password: a_server_with_requirepass_…)
    let server = Server::start("wrongtype", &[]);
    let mut c = server.conn();
    call(&mut c, &[b"SET", &master_key(), b"a string"]);
    let m = redis_error(Rvm::open(&options(&server.addr(), 1 << 20, base(7))));
    assert!(m.contains(&server.addr()) && m.contains("WRONGTYPE") && m.contains("[rvm] redis_key"), "{m}");
    call(&mut c, &[b"DEL", &master_key()]);
    call(&mut c, &[b"HSET", &master_key(), b"owner", b"someone else"]);
    match Rvm::open(&options(&server.addr(), 1 << 20, base(7))) {
        Err(RvmError::Layout(m)) => assert!(m.contains("\"owner\"") && m.contains("[rvm] redis_key"), "{m}"),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("opened"),
    }
    assert_eq!(keys(&mut c), vec![format!("{PREFIX}:master")], "nothing was written");
}

#[test]
fn an_error_reply_during_a_commit_fails_it_and_the_next_commit_sends_its_pages() {
    let server = Server::start("oom", &[]);
    let opts = options(&server.addr(), 1 << 20, base(8));
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    let mut c = server.conn();
    let before = master(&mut c);
    call(&mut c, &[b"CONFIG", b"SET", b"maxmemory", b"1"]);
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 41 };
    match rvm.txn_commit() {
        Err(RvmError::Redis(m)) => assert!(m.contains(&server.addr()) && m.contains("OOM"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(master(&mut c), before, "a refused commit switches nothing");
    call(&mut c, &[b"CONFIG", b"SET", b"maxmemory", b"0"]);
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 41, "the failed commit's page came with the next");
    rvm.close().unwrap();
}

#[test]
fn the_server_gone_during_a_commit_fails_it_and_a_commit_once_it_is_back_sends_its_pages() {
    // Persistent, so that a restart finds the memory: every EXEC is on disk when it returns.
    let mut server = Server::start("gone", &["--appendonly", "yes", "--appendfsync", "always"]);
    let opts = options(&server.addr(), 1 << 20, base(9));
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 1 };
    rvm.txn_commit().unwrap();
    server.kill();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 42 };
    // The connection is dead: the shadow writes go out to no one, or fail to.
    match rvm.txn_commit() {
        Err(RvmError::Redis(m)) => assert!(m.contains(&server.addr()), "{m}"),
        other => panic!("{other:?}"),
    }
    match rvm.txn_commit() {
        Err(RvmError::Redis(m)) => assert!(m.contains(&server.addr()) && m.contains("cannot connect"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(rvm.status().store.contains("disconnected"), "{}", rvm.status().store);
    server.restart();
    rvm.txn_commit().unwrap();
    assert!(rvm.status().store.contains("connected"), "{}", rvm.status().store);
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(
        // SAFETY: the root block recovered from the last commit, allocated as large as this read,
        // mapped while `rvm` lives.
        unsafe { *(rvm.usr_data() as *mut u64) },
        42,
        "the failed commits' page came with the later one"
    );
    rvm.close().unwrap();
}

/// A relay to the server at `to`, for two connections one after the other: it passes every
/// byte both ways, except that once `armed`, when the client sends `EXEC`, it lets the server
/// run it and hangs up on the client before the answer reaches it (an answer lost in transit).
fn cutting_relay(to: String, armed: Arc<AtomicBool>) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let t = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut client, _) = l.accept().unwrap();
            let mut server = TcpStream::connect(&to).unwrap();
            let withhold = Arc::new(AtomicBool::new(false));
            let (mut s, mut c, w) =
                (server.try_clone().unwrap(), client.try_clone().unwrap(), withhold.clone());
            let down = std::thread::spawn(move || {
                let mut b = [0u8; 64 << 10];
                while let Ok(n @ 1..) = s.read(&mut b) {
                    if !w.load(Ordering::SeqCst) && c.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
                let _ = c.shutdown(Shutdown::Write);
            });
            let mut b = vec![0u8; 64 << 10];
            let mut tail = Vec::new();
            while let Ok(n @ 1..) = client.read(&mut b) {
                tail.extend_from_slice(&b[..n]);
                let exec = tail.windows(10).any(|w| w == b"$4\r\nEXEC\r\n");
                // Keep less than a whole EXEC: the next chunk may complete one, never repeat it.
                tail.drain(..tail.len().saturating_sub(9));
                if exec && armed.swap(false, Ordering::SeqCst) {
                    let mut probe = Conn::connect(&to, Duration::from_secs(10)).unwrap();
                    let before = master(&mut probe).0;
                    withhold.store(true, Ordering::SeqCst);
                    server.write_all(&b[..n]).unwrap();
                    // Wait for the server to have run it (a wait for an event, not a timed test).
                    let mut ran = false;
                    for _ in 0..2000 {
                        if master(&mut probe).0 != before {
                            ran = true;
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    assert!(ran, "the server did not run the EXEC it was sent");
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    break;
                }
                if server.write_all(&b[..n]).is_err() {
                    break;
                }
            }
            let _ = server.shutdown(Shutdown::Write);
            down.join().unwrap();
        }
    });
    (addr, t)
}

#[test]
fn a_commit_whose_exec_answer_is_lost_is_found_landed_by_the_next_connection() {
    let server = Server::start("lost-answer", &[]);
    let armed = Arc::new(AtomicBool::new(false));
    let (relay, t) = cutting_relay(server.addr(), armed.clone());
    let rvm = Rvm::open(&options(&relay, 1 << 20, base(12))).unwrap();
    let p = rvm.alloc(16).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    armed.store(true, Ordering::SeqCst);
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 7 };
    match rvm.txn_commit() {
        Err(RvmError::Redis(m)) => assert!(m.contains(&relay) && m.contains("closed the connection"), "{m}"),
        other => panic!("{other:?}"),
    }
    // It landed (the server ran the EXEC): the next connection finds the master one commit on,
    // takes it as this process's, and goes on from there.
    assert_eq!(master(&mut server.conn()).0, 3);
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p.add(1) = 8 };
    rvm.txn_commit().unwrap();
    assert_eq!(master(&mut server.conn()).0, 4);
    rvm.close().unwrap();
    t.join().unwrap();
    let rvm = Rvm::open(&options(&server.addr(), 1 << 20, base(12))).unwrap();
    let p = rvm.usr_data() as *mut u64;
    // SAFETY: `p` is the recovered root block, the 16 bytes allocated above, mapped while `rvm`
    // lives.
    assert_eq!(unsafe { (*p, *p.add(1)) }, (7, 8));
    rvm.close().unwrap();
}

#[test]
fn a_server_back_without_the_memory_is_found_out_and_nothing_more_is_written() {
    let mut server = Server::start("amnesia", &[]);
    let rvm = Rvm::open(&options(&server.addr(), 1 << 20, base(10))).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    server.kill();
    // No persistence: it is back empty.
    server.restart();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 5 };
    let mut refused = Vec::new();
    for _ in 0..3 {
        match rvm.txn_commit() {
            Err(RvmError::Redis(m)) => refused.push(m),
            other => panic!("{other:?}"),
        }
    }
    // The first may fail on the dead connection; then the new one finds the master gone.
    let last = refused.last().unwrap();
    assert!(last.contains("lost committed state") && last.contains("at commit 0"), "{last}");
    assert!(rvm.status().store.contains("refusing"), "{}", rvm.status().store);
    assert!(keys(&mut server.conn()).is_empty(), "nothing was written on top of the hole");
    rvm.close().unwrap();
}

#[test]
fn a_commit_larger_than_the_memory_is_refused_by_size() {
    let server = Server::start("large", &[]);
    let mut store = RedisRmem::connect(&redis_options(&server.addr(), 1 << 20)).unwrap();
    assert_eq!((store.name(), store.capacity()), ("redis", 1 << 20));
    match store.check(&[(0, (1 << 20) + PAGE)]) {
        Err(RvmError::TooLarge(m)) => {
            assert!(m.contains("257 pages") && m.contains("1048576") && m.contains("redis_capacity"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    store.check(&[(0, 1 << 20)]).unwrap();
    Box::new(store).close().unwrap();
    assert!(keys(&mut server.conn()).is_empty());
}

#[test]
fn unaligned_reads_and_pages_never_written_read_as_stored() {
    let server = Server::start("read", &[]);
    let rvm = Rvm::open(&options(&server.addr(), 1 << 20, base(11))).unwrap();
    let a = rvm.alloc(3 * 4096).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe {
        for i in 0..3 * 4096 {
            *a.add(i) = (i % 251) as u8;
        }
    }
    rvm.txn_commit().unwrap();
    let off = a as u64 - base(11) as u64;
    rvm.close().unwrap();
    let mut store = RedisRmem::connect(&redis_options(&server.addr(), 1 << 20)).unwrap();
    // Across page boundaries, from the middle of a page to the middle of another.
    let mut out = vec![0u8; 2 * 4096 + 100];
    store.read(off + 2000, &mut out).unwrap();
    assert!(out.iter().enumerate().all(|(i, &b)| b == ((i + 2000) % 251) as u8));
    // Past the block: never written, zeros.
    let mut out = vec![1u8; 4096 + 10];
    store.read(off + 3 * 4096 - 5, &mut out).unwrap();
    let want: Vec<u8> = (0..5).map(|i| ((3 * 4096 - 5 + i) % 251) as u8).collect();
    assert_eq!(&out[..5], &want[..]);
    assert!(out[5..].iter().all(|&b| b == 0));
    // A page the master names but the server lost (evicted, deleted by hand): named.
    let mut c = server.conn();
    let (_, pages) = master(&mut c);
    let &(p, v) = pages.iter().find(|&&(p, _)| p == off / PAGE).unwrap();
    call(&mut c, &[b"DEL", &key(p, v)]);
    match store.read(off, &mut [0u8; 4096]) {
        Err(RvmError::Redis(m)) => {
            assert!(
                m.contains(&server.addr())
                    && m.contains("does not hold")
                    && m.contains(&String::from_utf8(key(p, v)).unwrap()),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    Box::new(store).close().unwrap();
}

const PASSWORD: &str = "rvm-test-password";

fn with_password(addr: &str, capacity: u64, base: usize, password: Option<&str>) -> RvmOptions {
    let mut o = redis_options(addr, capacity);
    o.password = password.map(|p| RedisPassword { value: p.into(), from: "[rvm] redis_password" });
    RvmOptions { backend: Backend::Redis(o), base, tracking: Some(WriteTracking::UffdAsync) }
}

/// A connection to `server` that has proven `PASSWORD`.
fn authed(server: &Server) -> Conn {
    let mut c = server.conn();
    assert_eq!(call(&mut c, &[b"AUTH", PASSWORD.as_bytes()]), Reply::Status("OK".into()));
    c
}

/// A server with `requirepass`: without the password the memory is refused, naming the setting
/// and the environment variable; with a wrong one, naming where it came from; with the right one
/// it works, from the `[rvm]` section as from the options. Then a page changed in the server
/// behind the backend's back (its bytes, or another page's value put in its place) makes
/// recovery refuse the memory, naming the page and its key, with nothing of it used.
#[test]
fn a_server_with_requirepass_takes_the_password_and_a_page_changed_behind_the_backend_is_refused() {
    let server = Server::start("auth", &["--requirepass", PASSWORD]);
    let addr = server.addr();
    match Rvm::open(&with_password(&addr, 1 << 20, base(13), None)) {
        Err(RvmError::Config(m)) => assert!(
            m.contains(&addr)
                && m.contains("NOAUTH")
                && m.contains("[rvm] redis_password")
                && m.contains(mojim_rvm::REDIS_PASSWORD_ENV),
            "{m}"
        ),
        Err(e) => panic!("without the password: {e:?}"),
        Ok(_) => panic!("opened without the password"),
    }
    match Rvm::open(&with_password(&addr, 1 << 20, base(13), Some("not-the-password"))) {
        Err(RvmError::Config(m)) => {
            assert!(
                m.contains("refused the password from [rvm] redis_password") && !m.contains("not-the"),
                "{m}"
            )
        }
        Err(e) => panic!("with a wrong password: {e:?}"),
        Ok(_) => panic!("opened with a wrong password"),
    }
    // The right one, as `[rvm] redis_password` in a configuration.
    let mut cfg = mojim::Config { file: Default::default(), base: Default::default(), path: None };
    cfg.file.set_section(&mojim_rvm::RvmSection {
        backend: "redis".into(),
        redis: addr.clone(),
        redis_key: PREFIX.into(),
        redis_capacity: "1MiB".into(),
        redis_password: PASSWORD.into(),
        ..Default::default()
    });
    let mut opts = RvmOptions::from_config(&cfg, false).unwrap();
    opts.base = base(13);
    let Backend::Redis(r) = &opts.backend else { panic!("the redis backend") };
    assert!(!format!("{r:?}").contains(PASSWORD), "the password is never printed: {r:?}");
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(2 * 4096).unwrap();
    rvm.set_usr_data(p).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p.add(4096) = 42 };
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *rvm.usr_data().add(4096) }, 42);
    rvm.close().unwrap();

    // A byte of the block's second page, changed in the server.
    let page = (p as u64 - base(13) as u64) / PAGE + 1;
    let mut c = authed(&server);
    let (_, pages) = master(&mut c);
    let v = pages.iter().find(|&&(q, _)| q == page).expect("the page is in the master").1;
    let Reply::Bulk(good) = call(&mut c, &[b"GET", &key(page, v)]) else { panic!("the page") };
    let mut bad = good.clone();
    bad[0] ^= 0xff;
    call(&mut c, &[b"SET", &key(page, v), &bad]);
    let refused = |what: &str| match Rvm::open(&opts) {
        Err(RvmError::Layout(m)) => {
            let k = String::from_utf8(key(page, v)).unwrap();
            assert!(
                m.contains(&format!("page {page} ({k}) fails its check"))
                    && m.contains("nothing of it is used"),
                "{what}: {m}"
            );
        }
        Err(e) => panic!("{what}: {e:?}"),
        Ok(_) => panic!("{what}: recovery used a page changed behind the backend's back"),
    };
    refused("a changed byte");
    // Another page's value (checked, but for another page), in its place.
    let (other, ov) = *pages.iter().find(|&&(q, _)| q == page - 1).expect("the block's first page");
    let Reply::Bulk(moved) = call(&mut c, &[b"GET", &key(other, ov)]) else { panic!("the page") };
    call(&mut c, &[b"SET", &key(page, v), &moved]);
    refused("another page's value");
    // Put back as it was, the memory opens again.
    call(&mut c, &[b"SET", &key(page, v), &good]);
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *rvm.usr_data().add(4096) }, 42);
    rvm.close().unwrap();
}

/// A memory an older build wrote (values of 4096 bytes, no `checked` in the master) is read,
/// and its first connection writes every page again with its check, in one commit.
#[test]
fn a_memory_written_before_page_checks_is_read_and_given_them() {
    let server = Server::start("upgrade", &[]);
    let opts = options(&server.addr(), 1 << 20, base(14));
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 77 };
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    // As an older build leaves it.
    let mut c = server.conn();
    let (seq, pages) = master(&mut c);
    for &(q, v) in &pages {
        let Reply::Bulk(b) = call(&mut c, &[b"GET", &key(q, v)]) else { panic!("page {q}") };
        call(&mut c, &[b"SET", &key(q, v), &b[..PAGE as usize]]);
    }
    call(&mut c, &[b"HDEL", &master_key(), b"checked"]);
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 77);
    rvm.close().unwrap();
    let (after, now) = master(&mut c);
    assert_eq!(after, seq + 1, "one commit gave every page its check");
    assert_eq!(now.iter().map(|p| p.0).collect::<Vec<_>>(), pages.iter().map(|p| p.0).collect::<Vec<_>>());
    assert!(now.iter().all(|&(_, v)| v == after), "{now:?}");
    let Reply::Bulk(checked) = call(&mut c, &[b"HGET", &master_key(), b"checked"]) else { panic!("checked") };
    assert_eq!(checked, b"1");
    let mut want: Vec<String> = now
        .iter()
        .map(|&(q, v)| String::from_utf8(key(q, v)).unwrap())
        .chain([format!("{PREFIX}:master")])
        .collect();
    want.sort();
    assert_eq!(keys(&mut c), want, "the old versions are gone");
}

/// A CA, the Redis server's certificate for 127.0.0.1 and a client's, as PEM files in a folder
/// of the test's (the keys private to their owner).
struct Pki {
    dir: Dir,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = Dir::new(&format!("pki-{name}"));
        let ca = Ca::new(&format!("Redis CA {name}")).unwrap();
        let server = ca.issue_for_hosts("redis", &[], &["127.0.0.1"], Validity::Years(1)).unwrap();
        let client = ca.issue_for_hosts("rvm", &[], &[], Validity::Years(1)).unwrap();
        for (file, pem) in [
            ("ca.pem", ca.cert_pem()),
            ("redis.pem", &server.cert_pem),
            ("redis.key", &server.key_pem),
            ("client.pem", &client.cert_pem),
            ("client.key", &client.key_pem),
        ] {
            let path = dir.0.join(file);
            std::fs::write(&path, pem).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        }
        Pki { dir }
    }

    /// The client side: this CA, and the client's certificate if `certificate`.
    fn client(&self, certificate: bool) -> RedisTls {
        let f = |n: &str| self.dir.0.join(n);
        let (cert, key) = (f("client.pem"), f("client.key"));
        RedisTls::load(&f("ca.pem"), certificate.then_some((cert.as_path(), key.as_path()))).unwrap()
    }
}

/// A Redis server that speaks TLS only, with its certificate authority's folder.
struct TlsRedisStore {
    server: Arc<Server>,
    _pki: Arc<Pki>,
    capacity: u64,
}

impl Store for TlsRedisStore {
    fn create(name: &str, size: u64) -> TlsRedisStore {
        let pki = Pki::new(name);
        let server = Server::start_tls(&format!("tls-{name}"), &pki);
        TlsRedisStore { server: Arc::new(server), _pki: Arc::new(pki), capacity: size }
    }

    /// As the plain store's, at addresses of its own (base(16) up) so that the two run at once.
    fn options(&self, base: usize, tracking: WriteTracking) -> RvmOptions {
        let mut o = options(&self.server.addr(), self.capacity, base + (16 << 36));
        let Backend::Redis(r) = &mut o.backend else { unreachable!() };
        r.tls = self.server.tls.clone();
        RvmOptions { tracking: Some(tracking), ..o }
    }

    fn stored(&self, len: usize) -> Vec<u8> {
        RedisStore { server: Arc::clone(&self.server), capacity: self.capacity }.stored(len)
    }

    fn resized(&self, _name: &str, size: u64, _len: usize) -> TlsRedisStore {
        TlsRedisStore { server: Arc::clone(&self.server), _pki: Arc::clone(&self._pki), capacity: size }
    }
}

/// Commits and recovery over TLS, with a client certificate, to a server that speaks nothing
/// else: the suite's structures come back at their addresses.
#[test]
fn pointer_rich_structures_come_back_over_tls_to_redis() {
    suite::pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker::<TlsRedisStore>()
}

/// Without a client certificate, or trusting another CA than the server's, the memory is not
/// opened, and the error says why; plain TCP to the TLS port is not mistaken for a server.
#[test]
fn a_tls_server_refuses_a_client_without_its_certificate_and_another_cas_server_is_refused() {
    let pki = Pki::new("refusals");
    let server = Server::start_tls("tls-refusals", &pki);
    let open = |tls: Option<RedisTls>| {
        let mut o = options(&server.addr(), 1 << 20, base(15));
        let Backend::Redis(r) = &mut o.backend else { unreachable!() };
        r.tls = tls;
        Rvm::open(&o).err().map(|e| e.to_string()).expect("the memory opened")
    };
    let e = open(Some(pki.client(false)));
    assert!(e.contains(&server.addr()) && e.contains("set [rvm] redis_cert_file"), "{e}");
    let other = Pki::new("refusals-other");
    let e = open(Some(other.client(true)));
    assert!(e.contains("invalid peer certificate") && e.contains("UnknownIssuer"), "{e}");
    let e = open(None);
    assert!(e.contains(&server.addr()), "{e}");
    // The server still serves a client with its certificate.
    assert_eq!(call(&mut server.conn(), &[b"PING"]), Reply::Status("PONG".into()));
}
