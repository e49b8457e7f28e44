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

use super::collections::{CollOp, CollSource};
use super::keys::{fnv64, Rng};
use super::resp::{self, Reply};
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
}

/// Appends the name of record `n` (`user<fnv64(n)>`, YCSB's hashed key) as a bulk string.
pub fn key_bulk(out: &mut Vec<u8>, n: u64) {
    let mut b = [0u8; 32];
    let len = {
        let mut c = std::io::Cursor::new(&mut b[..]);
        // 4 + 20 digits fit in 32 bytes.
        let _ = write!(c, "user{}", fnv64(n));
        c.position() as usize
    };
    resp::bulk(out, &b[..len]);
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
}

impl std::fmt::Display for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cmd::Get => write!(f, "GET"),
            Cmd::Set => write!(f, "SET"),
            Cmd::Wait(w) => write!(f, "{}", w.name()),
            Cmd::Mget(n) => write!(f, "MGET of {n} keys"),
            Cmd::Coll(op) => write!(f, "{op}"),
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
fn expect_write(c: &mut Conn, slot: usize, cmd: Cmd, wait: Wait) {
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

struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
    sent: usize,
    buf: Vec<u8>,
    parsed: usize,
    filled: usize,
    expect: VecDeque<Expect>,
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
    fn open(addr: &str, pipeline: usize) -> Result<Conn> {
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
        Ok(Conn {
            stream,
            out: Vec::with_capacity(64 << 10),
            sent: 0,
            buf: vec![0; 256 << 10],
            parsed: 0,
            filled: 0,
            expect: VecDeque::with_capacity(4 * pipeline),
            batch: Vec::with_capacity(pipeline),
            open: 0,
            pop: None,
            batch_start: Instant::now(),
        })
    }

    /// Sends what it can of the pending output.
    fn send(&mut self, addr: &str) -> Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(addr, "send to")(e)),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(())
    }

    /// Reads what has arrived; false once nothing more is there.
    fn receive(&mut self, addr: &str) -> Result<bool> {
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
}

impl Driver<'_> {
    fn may_issue(&self, now: Instant) -> bool {
        self.issued < self.spec.ops && self.deadline.is_none_or(|d| now < d)
    }

    fn value(&mut self) -> std::ops::Range<usize> {
        let off = (self.src.rng().next() % 64) as usize;
        off..off + self.spec.size
    }

    fn encode_write(&mut self, c: &mut Conn, slot: usize, key: u64) {
        let v = self.value();
        encode_set(&mut c.out, key, &self.values[v]);
        expect_write(c, slot, Cmd::Set, self.spec.wait);
    }

    fn encode_coll(&mut self, c: &mut Conn, slot: usize, op: CollOp) {
        let v = self.value();
        op.encode(&mut c.out, &self.values[v]);
        expect_write(c, slot, Cmd::Coll(op), if op.writes() { self.spec.wait } else { Wait::None });
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
                    resp::header(&mut c.out, b'*', 2);
                    resp::bulk(&mut c.out, b"GET");
                    key_bulk(&mut c.out, op.key);
                    let done = op.kind == OpKind::Read;
                    c.expect.push_back(Expect { slot, cmd: Cmd::Get, done, then: None });
                }
                OpKind::Update | OpKind::Insert => self.encode_write(c, slot, op.key),
                OpKind::Scan => {
                    resp::header(&mut c.out, b'*', 1 + op.len as usize);
                    resp::bulk(&mut c.out, b"MGET");
                    for k in op.key..op.key + op.len {
                        key_bulk(&mut c.out, k);
                    }
                    c.expect.push_back(Expect { slot, cmd: Cmd::Mget(op.len), done: true, then: None });
                }
            }
        }
        c.open = c.batch.len();
        c.batch_start = Instant::now();
        c.send(&self.spec.addr)?;
        Ok(c.open > 0)
    }

    /// Parses the replies received on `c` and acts on each.
    fn handle_replies(&mut self, c: &mut Conn, now: Instant) -> Result<()> {
        let addr = &self.spec.addr;
        loop {
            let parsed = resp::parse(&c.buf[c.parsed..c.filled])
                .map_err(|e| fail(addr, format!("broke RESP2: {e}")))?;
            let Some((reply, n)) = parsed else { break };
            let Some(exp) = c.expect.pop_front() else {
                return Err(fail(addr, format!("sent a reply nobody asked for: {}", reply.to_value())));
            };
            let op = c.batch[exp.slot];
            match (exp.cmd, &reply) {
                (_, Reply::Error(e)) => {
                    return Err(fail(
                        addr,
                        format!("answered {} with -{}", exp.cmd, String::from_utf8_lossy(e)),
                    ))
                }
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
            c.parsed += n;
            if let Some(w) = exp.then {
                c.out.extend_from_slice(w.request());
                c.expect.push_back(Expect { slot: exp.slot, cmd: Cmd::Wait(w), done: true, then: None });
            }
            if exp.done {
                let ns = now.saturating_duration_since(c.batch_start).as_nanos() as u64;
                self.hist.record(ns.max(1)).ok();
                self.done += 1;
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
        if c.parsed == c.filled {
            c.parsed = 0;
            c.filled = 0;
        }
        c.send(addr)
    }
}

/// Runs `spec` against its server, whose keys 0..records must be loaded.
pub fn run(spec: &RunSpec) -> Result<RunOutcome> {
    assert!(spec.clients >= 1 && spec.pipeline >= 1 && spec.size >= 1, "checked by the flags");
    let mut conns =
        (0..spec.clients).map(|_| Conn::open(&spec.addr, spec.pipeline)).collect::<Result<Vec<_>>>()?;
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
    };
    for c in &mut conns {
        d.start_batch(c)?;
    }
    let mut ready: Vec<(usize, PollFlags)> = Vec::with_capacity(conns.len());
    let mut progress = Instant::now();
    loop {
        ready.clear();
        {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(conns.len());
            let mut index = Vec::with_capacity(conns.len());
            for (i, c) in conns.iter().enumerate().filter(|(_, c)| c.open > 0) {
                let mut f = PollFlags::IN;
                if c.sent < c.out.len() {
                    f |= PollFlags::OUT;
                }
                fds.push(PollFd::new(&c.stream, f));
                index.push(i);
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
                    .map(|(f, &i)| (i, f.revents())),
            );
        }
        if ready.is_empty() {
            if progress.elapsed() > STALL {
                let owed: usize = conns.iter().map(|c| c.expect.len()).sum();
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
        for &(i, flags) in &ready {
            let c = &mut conns[i];
            if flags.contains(PollFlags::OUT) {
                c.send(&spec.addr)?;
            }
            if flags.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                while c.receive(&spec.addr)? {
                    d.handle_replies(c, Instant::now())?;
                }
                if c.open == 0 {
                    d.start_batch(c)?;
                }
            }
        }
    }
    let secs = d.last_done.saturating_duration_since(start).as_secs_f64();
    Ok(RunOutcome { ops: d.done, secs, hist: d.hist, misses: d.misses, inserted: d.src.inserted() })
}
