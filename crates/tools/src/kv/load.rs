//! The measured load of one run: one thread drives every client's connection through
//! `poll(2)`, as redis-benchmark does, so that 50 clients cost the machine one thread and not
//! 50 runnable ones.
//!
//! Each client sends a batch of `pipeline` operations, waits until all of them are done, and
//! sends the next (redis-benchmark's `-P`). An operation's latency runs from the write of its
//! batch to the reply that completes it (its own reply; redis-benchmark gives every reply of a
//! batch the latency of the batch's first). A run ends after `ops` operations over all clients,
//! or when `duration` has passed, whichever is first.
//!
//! The string workloads' operations come from [`super::ycsb`], those on lists, sets and sorted
//! sets from [`super::collections`]. Against a target that waits ([`Wait`]), every write is
//! followed by `WAIT 1 0` (sent with the write) or `WAITAOF 1 1 0` (sent once the write's reply
//! is in: [`Wait::pipelined`] says why) on the same connection, and is done when that answers.
//!
//! Against a cluster target each client holds a connection to every shard and sends each
//! operation to the shard that owns its key ([`super::route`], from `CLUSTER SLOTS` read once
//! when the run starts); a batch may span shards. A `-MOVED` answer moves the slot for the rest
//! of the run and the operation is sent again there, a `-ASK` answer sends it there behind
//! `ASKING`; both are counted. The cluster targets run the workloads on one key per command
//! (not YCSB-E's MGET, nor those on collections).

use super::collections::{CollOp, CollSource};
use super::keys::{fnv64, Rng};
use super::resp::{self, Reply};
use super::route::{Redirect, Route};
use super::targets::Wait;
use super::ycsb::{Op, OpKind, OpSource, Workload};
use hdrhistogram::Histogram;
use mojim::error::{Error, Result};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a run may go without any reply before it fails.
pub const STALL: Duration = Duration::from_secs(30);

/// What one run does.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The server.
    pub addr: String,
    /// The workload.
    pub workload: Workload,
    /// Bytes per value.
    pub size: usize,
    /// Connections.
    pub clients: usize,
    /// Operations per batch on each connection.
    pub pipeline: usize,
    /// Operations over all clients.
    pub ops: u64,
    /// Stop issuing after this long, even if `ops` are not done.
    pub duration: Option<Duration>,
    /// Keys loaded before the run (numbered 0..records).
    pub records: u64,
    /// Members of the loaded sorted set or set (the workloads on collections).
    pub members: u64,
    /// What follows every write (the write is done when it answers).
    pub wait: Wait,
    /// Seed of the operation choices.
    pub seed: u64,
    /// `addr` is one shard of a cluster: each key goes to its slot's owner.
    pub cluster: bool,
}

/// What one run measured.
pub struct RunOutcome {
    /// Operations done.
    pub ops: u64,
    /// From the first batch's write to the last operation's reply.
    pub secs: f64,
    /// Latency of each operation, in nanoseconds.
    pub hist: Histogram<u64>,
    /// Reads (or scanned keys) that found no value; for the workloads on collections, the
    /// replies [`super::collections`] counts as misses.
    pub misses: u64,
    /// Key numbers the run inserted (to delete afterwards); for `sadd`, the members it added.
    pub inserted: std::ops::Range<u64>,
    /// Per shard (its address; the one server of a standalone target), the operations it
    /// completed.
    pub shard_ops: Vec<(String, u64)>,
    /// `-MOVED` answers followed.
    pub moved: u64,
    /// `-ASK` answers followed.
    pub asked: u64,
    /// `-TRYAGAIN` answers (a key in flight between two shards), each operation sent again.
    pub retried: u64,
}

/// The name of record `n` (`user<fnv64(n)>`, YCSB's hashed key), and its length.
fn key_bytes(n: u64) -> ([u8; 32], usize) {
    let mut b = [0u8; 32];
    let len = {
        let mut c = std::io::Cursor::new(&mut b[..]);
        // 4 + 20 digits fit in 32 bytes.
        let _ = write!(c, "user{}", fnv64(n));
        c.position() as usize
    };
    (b, len)
}

/// Appends the name of record `n` as a bulk string.
pub fn key_bulk(out: &mut Vec<u8>, n: u64) {
    let (b, len) = key_bytes(n);
    resp::bulk(out, &b[..len]);
}

/// Appends `GET key`.
fn encode_get(out: &mut Vec<u8>, key: u64) {
    resp::header(out, b'*', 2);
    resp::bulk(out, b"GET");
    key_bulk(out, key);
}

/// Appends `SET key value`.
pub fn encode_set(out: &mut Vec<u8>, key: u64, value: &[u8]) {
    resp::header(out, b'*', 3);
    resp::bulk(out, b"SET");
    key_bulk(out, key);
    resp::bulk(out, value);
}

/// The command a reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Get,
    Set,
    Wait(Wait),
    Mget(u64),
    Coll(CollOp),
    /// `ASKING`, ahead of a command sent where an `-ASK` said.
    Asking,
}

impl std::fmt::Display for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cmd::Get => write!(f, "GET"),
            Cmd::Set => write!(f, "SET"),
            Cmd::Wait(w) => write!(f, "{}", w.name()),
            Cmd::Mget(n) => write!(f, "MGET of {n} keys"),
            Cmd::Coll(op) => write!(f, "{op}"),
            Cmd::Asking => write!(f, "ASKING"),
        }
    }
}

/// An operation of a batch: a string workload's, or one on a collection (which its replies'
/// [`Cmd::Coll`] carries).
#[derive(Clone, Copy, Debug)]
enum AnyOp {
    Str(Op),
    Coll,
}

/// Where a run's operations come from.
enum Source {
    Str(OpSource),
    Coll(CollSource),
}

impl Source {
    fn rng(&mut self) -> &mut Rng {
        match self {
            Source::Str(s) => s.rng(),
            Source::Coll(s) => s.rng(),
        }
    }

    fn inserted(&self) -> std::ops::Range<u64> {
        match self {
            Source::Str(s) => s.inserted(),
            Source::Coll(s) => s.added(),
        }
    }
}

/// A reply owed on a connection.
#[derive(Clone, Copy, Debug)]
struct Expect {
    /// The operation's place in its batch.
    slot: usize,
    cmd: Cmd,
    /// This reply completes the operation (else more follow, or, for a read-modify-write's GET,
    /// its SET is sent now).
    done: bool,
    /// The wait to send once this reply, a write's, is in.
    then: Option<Wait>,
}

/// Expects the reply of a write just encoded (`cmd`) and, if the target waits, of the wait
/// that follows it: sent now, behind the write, or once the write's reply is in.
fn expect_write(c: &mut Link, slot: usize, cmd: Cmd, wait: Wait) {
    match wait {
        Wait::None => c.expect.push_back(Expect { slot, cmd, done: true, then: None }),
        w if w.pipelined() => {
            c.out.extend_from_slice(w.request());
            c.expect.push_back(Expect { slot, cmd, done: false, then: None });
            c.expect.push_back(Expect { slot, cmd: Cmd::Wait(w), done: true, then: None });
        }
        w => c.expect.push_back(Expect { slot, cmd, done: false, then: Some(w) }),
    }
}

/// One connection of a client, to one server (to one shard of a cluster).
struct Link {
    addr: String,
    stream: TcpStream,
    out: Vec<u8>,
    sent: usize,
    buf: Vec<u8>,
    parsed: usize,
    filled: usize,
    expect: VecDeque<Expect>,
}

/// A client: its connections (one per shard of the route, in its order) and its batch.
struct Conn {
    links: Vec<Link>,
    batch: Vec<AnyOp>,
    open: usize,
    /// The queue this connection pops next (`lpush-rpop`: its RPOP follows its LPUSH).
    pop: Option<u64>,
    batch_start: Instant,
}

fn io_err(addr: &str, what: &str) -> impl FnOnce(std::io::Error) -> Error {
    let op = format!("{what} {addr}");
    move |source| Error::Io { op, source }
}

fn fail(addr: &str, msg: String) -> Error {
    Error::Io { op: format!("benchmark {addr}"), source: std::io::Error::other(msg) }
}

impl Conn {
    fn open(route: &Route, pipeline: usize) -> Result<Conn> {
        Ok(Conn {
            links: route.addrs.iter().map(|a| Link::open(a, pipeline)).collect::<Result<_>>()?,
            batch: Vec::with_capacity(pipeline),
            open: 0,
            pop: None,
            batch_start: Instant::now(),
        })
    }

    /// Sends what it can of every link's pending output.
    fn send(&mut self) -> Result<()> {
        self.links.iter_mut().try_for_each(Link::send)
    }
}

impl Link {
    fn open(addr: &str, pipeline: usize) -> Result<Link> {
        let sa = addr
            .to_socket_addrs()
            .map_err(io_err(addr, "resolve"))?
            .next()
            .ok_or_else(|| fail(addr, "resolves to no address".into()))?;
        let mut stream =
            TcpStream::connect_timeout(&sa, Duration::from_secs(5)).map_err(io_err(addr, "connect to"))?;
        stream.set_nodelay(true).map_err(io_err(addr, "set TCP_NODELAY on"))?;
        // One blocking PING, so the server has taken the connection in before the clock starts
        // (after AUTH, when the run has a password).
        stream.set_read_timeout(Some(STALL)).map_err(io_err(addr, "set a timeout on"))?;
        if let Some(auth) = super::client::auth_request() {
            stream.write_all(&auth).map_err(io_err(addr, "send AUTH to"))?;
            let mut ok = [0u8; 5];
            stream.read_exact(&mut ok).map_err(io_err(addr, "read AUTH's reply from"))?;
            if &ok != b"+OK\r\n" {
                return Err(fail(addr, format!("answered AUTH with \"{}\"", ok.escape_ascii())));
            }
        }
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").map_err(io_err(addr, "send PING to"))?;
        let mut pong = [0u8; 7];
        stream.read_exact(&mut pong).map_err(io_err(addr, "read PONG from"))?;
        if &pong != b"+PONG\r\n" {
            return Err(fail(addr, format!("answered PING with \"{}\"", pong.escape_ascii())));
        }
        stream.set_nonblocking(true).map_err(io_err(addr, "make non-blocking"))?;
        Ok(Link {
            addr: addr.to_string(),
            stream,
            out: Vec::with_capacity(64 << 10),
            sent: 0,
            buf: vec![0; 256 << 10],
            parsed: 0,
            filled: 0,
            expect: VecDeque::with_capacity(4 * pipeline),
        })
    }

    /// Sends what it can of the pending output.
    fn send(&mut self) -> Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&self.addr, "send to")(e)),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(())
    }

    /// Reads what has arrived; false once nothing more is there.
    fn receive(&mut self) -> Result<bool> {
        let addr = &self.addr;
        if self.filled == self.buf.len() {
            if self.parsed > 0 {
                self.buf.copy_within(self.parsed..self.filled, 0);
                self.filled -= self.parsed;
                self.parsed = 0;
            } else {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        match self.stream.read(&mut self.buf[self.filled..]) {
            Ok(0) => {
                Err(fail(addr, format!("closed the connection with {} replies owed", self.expect.len())))
            }
            Ok(n) => {
                self.filled += n;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(io_err(addr, "receive from")(e)),
        }
    }
}

/// The state every connection shares: the operations, the value bytes, the results.
struct Driver<'a> {
    spec: &'a RunSpec,
    src: Source,
    values: Vec<u8>,
    issued: u64,
    deadline: Option<Instant>,
    done: u64,
    misses: u64,
    hist: Histogram<u64>,
    last_done: Instant,
    route: Route,
    /// Per shard of `route`, the operations it completed.
    shard_ops: Vec<u64>,
    moved: u64,
    asked: u64,
    retried: u64,
}

impl Driver<'_> {
    fn may_issue(&self, now: Instant) -> bool {
        self.issued < self.spec.ops && self.deadline.is_none_or(|d| now < d)
    }

    fn value(&mut self) -> std::ops::Range<usize> {
        let off = (self.src.rng().next() % 64) as usize;
        off..off + self.spec.size
    }

    /// The link (shard) that serves record `key`.
    fn link_of(&self, key: u64) -> usize {
        if !self.route.is_cluster() {
            return 0;
        }
        let (b, len) = key_bytes(key);
        self.route.shard_of(&b[..len])
    }

    fn encode_write(&mut self, c: &mut Conn, slot: usize, key: u64) {
        let l = self.link_of(key);
        self.encode_write_on(&mut c.links[l], slot, key);
    }

    fn encode_write_on(&mut self, l: &mut Link, slot: usize, key: u64) {
        let v = self.value();
        encode_set(&mut l.out, key, &self.values[v]);
        expect_write(l, slot, Cmd::Set, self.spec.wait);
    }

    /// Collections and scans run on standalone targets only: their link is the one.
    fn encode_coll(&mut self, c: &mut Conn, slot: usize, op: CollOp) {
        let v = self.value();
        let l = &mut c.links[0];
        op.encode(&mut l.out, &self.values[v]);
        expect_write(l, slot, Cmd::Coll(op), if op.writes() { self.spec.wait } else { Wait::None });
    }

    /// Starts the connection's next batch, if the run is not over; false if it is.
    fn start_batch(&mut self, c: &mut Conn) -> Result<bool> {
        let now = Instant::now();
        c.batch.clear();
        while c.batch.len() < self.spec.pipeline && self.may_issue(now) {
            let slot = c.batch.len();
            self.issued += 1;
            let op = match &mut self.src {
                Source::Str(src) => src.next_op(),
                Source::Coll(src) => {
                    let op = src.next_op(&mut c.pop);
                    c.batch.push(AnyOp::Coll);
                    self.encode_coll(c, slot, op);
                    continue;
                }
            };
            c.batch.push(AnyOp::Str(op));
            match op.kind {
                OpKind::Read | OpKind::ReadModifyWrite => {
                    let l = &mut c.links[self.link_of(op.key)];
                    encode_get(&mut l.out, op.key);
                    let done = op.kind == OpKind::Read;
                    l.expect.push_back(Expect { slot, cmd: Cmd::Get, done, then: None });
                }
                OpKind::Update | OpKind::Insert => self.encode_write(c, slot, op.key),
                OpKind::Scan => {
                    let l = &mut c.links[0];
                    resp::header(&mut l.out, b'*', 1 + op.len as usize);
                    resp::bulk(&mut l.out, b"MGET");
                    for k in op.key..op.key + op.len {
                        key_bulk(&mut l.out, k);
                    }
                    l.expect.push_back(Expect { slot, cmd: Cmd::Mget(op.len), done: true, then: None });
                }
            }
        }
        c.open = c.batch.len();
        c.batch_start = Instant::now();
        c.send()?;
        Ok(c.open > 0)
    }

    /// Sends the operation `exp` belongs to again where `r` says: for good (MOVED), or once,
    /// behind `ASKING` (ASK).
    fn redirect(&mut self, c: &mut Conn, from: usize, exp: Expect, r: Redirect) -> Result<()> {
        let Some(to) = self.route.index_of(&r.addr) else {
            return Err(fail(
                &c.links[from].addr,
                format!(
                    "redirected {} to {}, a shard CLUSTER SLOTS did not name when the run started",
                    exp.cmd, r.addr
                ),
            ));
        };
        let l = &mut c.links[to];
        if r.ask {
            self.asked += 1;
            resp::encode_command(&mut l.out, &[b"ASKING"]);
            l.expect.push_back(Expect { slot: exp.slot, cmd: Cmd::Asking, done: false, then: None });
        } else {
            self.moved += 1;
            self.route.moved(r.slot, to);
        }
        self.resend(c, from, to, exp)
    }

    /// Sends the operation `exp` belongs to (answered on link `from`) again on link `to`.
    fn resend(&mut self, c: &mut Conn, from: usize, to: usize, exp: Expect) -> Result<()> {
        let l = &mut c.links[to];
        match (exp.cmd, c.batch[exp.slot]) {
            (Cmd::Get, AnyOp::Str(op)) => {
                encode_get(&mut l.out, op.key);
                l.expect.push_back(exp);
            }
            (Cmd::Set, AnyOp::Str(op)) => self.encode_write_on(l, exp.slot, op.key),
            (cmd, _) => {
                return Err(fail(
                    &c.links[from].addr,
                    format!("redirected {cmd}, which the load does not send to a cluster"),
                ))
            }
        }
        Ok(())
    }

    /// Parses the replies received on `c`'s link `li` and acts on each.
    fn handle_replies(&mut self, c: &mut Conn, li: usize, now: Instant) -> Result<()> {
        loop {
            let l = &mut c.links[li];
            let addr = &l.addr;
            let parsed = resp::parse(&l.buf[l.parsed..l.filled])
                .map_err(|e| fail(addr, format!("broke RESP2: {e}")))?;
            let Some((reply, n)) = parsed else { break };
            let Some(exp) = l.expect.pop_front() else {
                return Err(fail(addr, format!("sent a reply nobody asked for: {}", reply.to_value())));
            };
            let op = c.batch[exp.slot];
            let (mut redirect, mut again) = (None, false);
            match (exp.cmd, &reply) {
                (_, Reply::Error(e)) if self.route.is_cluster() && Redirect::parse(e).is_some() => {
                    redirect = Redirect::parse(e);
                }
                // A key in flight between two shards (a slot move): the same shard again.
                (_, Reply::Error(e)) if self.route.is_cluster() && e.starts_with(b"TRYAGAIN") => again = true,
                (_, Reply::Error(e)) => {
                    return Err(fail(
                        addr,
                        format!("answered {} with -{}", exp.cmd, String::from_utf8_lossy(e)),
                    ))
                }
                (Cmd::Asking, Reply::Simple(b"OK")) => {}
                (Cmd::Get, Reply::Bulk(v)) => self.misses += u64::from(v.is_none()),
                (Cmd::Set, Reply::Simple(b"OK")) => {}
                (Cmd::Wait(w), r) if w.met(&r.to_value()) => {}
                (Cmd::Mget(len), Reply::Array(Some(items))) if items.len() as u64 == len => {
                    self.misses += items.iter().filter(|r| matches!(r, Reply::Bulk(None))).count() as u64;
                }
                (Cmd::Coll(op), r) if op.check(r).is_some() => {
                    self.misses += u64::from(op.check(r) == Some(true));
                }
                (cmd, other) => {
                    return Err(fail(addr, format!("answered {cmd} with {}", other.to_value())));
                }
            }
            l.parsed += n;
            if let Some(r) = redirect {
                self.redirect(c, li, exp, r)?;
                continue;
            }
            if again {
                self.retried += 1;
                self.resend(c, li, li, exp)?;
                continue;
            }
            if let Some(w) = exp.then {
                l.out.extend_from_slice(w.request());
                l.expect.push_back(Expect { slot: exp.slot, cmd: Cmd::Wait(w), done: true, then: None });
            }
            if exp.done {
                let ns = now.saturating_duration_since(c.batch_start).as_nanos() as u64;
                self.hist.record(ns.max(1)).ok();
                self.done += 1;
                self.shard_ops[li] += 1;
                c.open -= 1;
                self.last_done = now;
                if let (AnyOp::Str(op), Source::Str(src)) = (op, &mut self.src) {
                    if op.kind == OpKind::Insert {
                        src.acknowledge_insert(op.key);
                    }
                }
            } else if let AnyOp::Str(op) = op {
                if op.kind == OpKind::ReadModifyWrite && exp.cmd == Cmd::Get {
                    self.encode_write(c, exp.slot, op.key);
                }
            }
        }
        let l = &mut c.links[li];
        if l.parsed == l.filled {
            l.parsed = 0;
            l.filled = 0;
        }
        // A redirect may have written to another link.
        c.send()
    }
}

/// Runs `spec` against its server, whose keys 0..records must be loaded.
pub fn run(spec: &RunSpec) -> Result<RunOutcome> {
    assert!(spec.clients >= 1 && spec.pipeline >= 1 && spec.size >= 1, "checked by the flags");
    let route = if spec.cluster { Route::read(&spec.addr)? } else { Route::standalone(&spec.addr) };
    let mut conns =
        (0..spec.clients).map(|_| Conn::open(&route, spec.pipeline)).collect::<Result<Vec<_>>>()?;
    let mut rng = Rng(spec.seed ^ 0xA5A5_5A5A_DEAD_BEEF | 1);
    // Printable bytes, so that a value read back by a person is text.
    let values: Vec<u8> = (0..spec.size + 64).map(|_| b'a' + (rng.next() % 26) as u8).collect();
    let start = Instant::now();
    let mut d = Driver {
        spec,
        src: if spec.workload.on_strings() {
            Source::Str(OpSource::new(spec.workload, spec.records, spec.ops, spec.seed))
        } else {
            Source::Coll(CollSource::new(spec.workload, spec.members, spec.seed))
        },
        values,
        issued: 0,
        deadline: spec.duration.map(|t| start + t),
        done: 0,
        misses: 0,
        hist: Histogram::new(3).expect("3 significant figures is valid"),
        last_done: start,
        shard_ops: vec![0; route.addrs.len()],
        route,
        moved: 0,
        asked: 0,
        retried: 0,
    };
    for c in &mut conns {
        d.start_batch(c)?;
    }
    let mut ready: Vec<(usize, usize, PollFlags)> = Vec::with_capacity(conns.len());
    let mut progress = Instant::now();
    loop {
        ready.clear();
        {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(conns.len());
            let mut index = Vec::with_capacity(conns.len());
            for (i, c) in conns.iter().enumerate().filter(|(_, c)| c.open > 0) {
                // The links that owe replies (every link that was sent something does).
                for (j, l) in c.links.iter().enumerate().filter(|(_, l)| !l.expect.is_empty()) {
                    let mut f = PollFlags::IN;
                    if l.sent < l.out.len() {
                        f |= PollFlags::OUT;
                    }
                    fds.push(PollFd::new(&l.stream, f));
                    index.push((i, j));
                }
            }
            if fds.is_empty() {
                break;
            }
            let timeout = Timespec { tv_sec: 1, tv_nsec: 0 };
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(Error::Io { op: "poll the client connections".into(), source: e.into() })
                }
            }
            ready.extend(
                fds.iter()
                    .zip(&index)
                    .filter(|(f, _)| !f.revents().is_empty())
                    .map(|(f, &(i, j))| (i, j, f.revents())),
            );
        }
        if ready.is_empty() {
            if progress.elapsed() > STALL {
                let owed: usize = conns.iter().flat_map(|c| &c.links).map(|l| l.expect.len()).sum();
                return Err(fail(
                    &spec.addr,
                    format!(
                        "sent no reply for {} s ({} of {} operations done, {owed} replies owed)",
                        STALL.as_secs(),
                        d.done,
                        spec.ops
                    ),
                ));
            }
            continue;
        }
        progress = Instant::now();
        for &(i, j, flags) in &ready {
            let c = &mut conns[i];
            if flags.contains(PollFlags::OUT) {
                c.links[j].send()?;
            }
            if flags.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                while c.links[j].receive()? {
                    d.handle_replies(c, j, Instant::now())?;
                }
                if c.open == 0 {
                    d.start_batch(c)?;
                }
            }
        }
    }
    let secs = d.last_done.saturating_duration_since(start).as_secs_f64();
    let shard_ops = d.route.addrs.iter().cloned().zip(d.shard_ops).collect();
    Ok(RunOutcome {
        ops: d.done,
        secs,
        hist: d.hist,
        misses: d.misses,
        inserted: d.src.inserted(),
        shard_ops,
        moved: d.moved,
        asked: d.asked,
        retried: d.retried,
    })
}
