//! The harness: runs the generator's steps against `mojim kv` (with its mirror) and Redis side
//! by side, compares the replies, injects the faults, compares whole keyspaces, and on the
//! first difference fails with what is needed to replay it.
//!
//! Each step goes to mojim kv first, then to Redis: a request mojim kv refuses with `-OOM` (a
//! transaction whose EXEC it refuses, whole) is not sent to Redis, and the keys it names are
//! compared afterwards (it must have changed nothing).

use super::clock::{now_ms, Clock};
use super::compare::{compare, took_what_mojim_refused, Cmp, Ctx};
use super::gen::{
    expiring_keys, is_expiring, Arg, Cmd, Fault, Gates, Gen, Mangle, Mode, Step, When, MAX_BULK, NO_PAYLOAD,
};
use super::redis::{running, RedisServer};
use super::resp::{encode, show_all, Conn, Replies, Reply};
use super::stats::Stats;
use crate::common::edit_kv;
use crate::common::kv::KvCluster;
use crate::common::{exe, WAIT};
use mojim_tools::child::ChildNode;
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// One run: a seed, a phase, a size.
pub struct Options {
    pub test: &'static str,
    pub seed: u64,
    pub steps: usize,
    pub mode: Mode,
    /// The region's data area, bytes.
    pub region: u64,
    pub faults: usize,
    pub gates: Gates,
    /// `BUG_TTL_ROUNDS_UP` is gated: TTL may round up.
    pub ttl_may_round_up: bool,
    /// `BUG_APPEND_PAST_MAX_BULK` is gated: no APPEND that could pass `MAX_BULK` is sent.
    pub append_guard: bool,
}

/// A key's state on one server.
#[derive(Debug)]
struct KeyState {
    typ: Reply,
    value: Reply,
    pttl: Reply,
}

pub struct Harness<'a> {
    o: Options,
    gen: Gen,
    k: KvCluster,
    redis: &'a RedisServer,
    m: Conn,
    r: Conn,
    /// Where the mirror listens (its restarts listen there again).
    mirror_addr: String,
    clock: Clock,
    /// A key may have expired and not been removed yet: DBSIZE may count it.
    expired_unremoved: bool,
    /// The longest step so far (request to last reply), milliseconds.
    longest_ms: u64,
    history: VecDeque<String>,
    pub stats: Stats,
    step: usize,
}

const HISTORY: usize = 25;

impl<'a> Harness<'a> {
    pub fn new(o: Options, redis: &'a RedisServer) -> Harness<'a> {
        let gen = Gen::new(o.seed, o.mode, o.steps, o.faults, o.gates);
        let name = format!("kv-diff-{}-{}", if o.mode == Mode::Oom { "oom" } else { "main" }, o.seed);
        let k = KvCluster::with(&name, o.region, |f| {
            edit_kv(f, |k| k.max_bulk = format!("{}", MAX_BULK));
            f.cluster.reconnect_ms = 20;
        });
        let m = Conn::connect(&k.addr()).expect("connect to mojim kv");
        let mirror_addr = k.c.mirror_addr();
        let mut r = Conn::connect(&redis.addr).expect("connect to redis");
        r.call(&[vec![b"FLUSHALL".to_vec()]]).expect("flush redis");
        // A new mojim kv has no scripts and no libraries: nor has Redis (the seed before may
        // have left some).
        forget_scripts(&mut r).expect("flush redis's scripts and functions");
        Harness {
            o,
            gen,
            k,
            redis,
            m,
            r,
            mirror_addr,
            clock: Clock::new(),
            expired_unremoved: false,
            longest_ms: 0,
            history: VecDeque::new(),
            stats: Stats { seeds: 1, ..Stats::default() },
            step: 0,
        }
    }

    pub fn run(mut self) -> Stats {
        for i in 0..self.o.steps {
            self.step = i;
            let step = self.gen.step(i);
            self.stats.steps += 1;
            match step {
                Step::Pipeline(cmds) => self.pipeline(cmds, false),
                Step::Scan(opts) => self.scan_step(opts),
                Step::OverLimit(before, req) => self.over_limit(before, req),
                Step::Unsupported(args) => self.unsupported(args),
                Step::Fault(f) => self.fault(f),
                Step::Check => self.check_keyspace("a periodic check"),
            }
        }
        self.step = self.o.steps;
        self.check_keyspace("the end");
        self.stats
    }

    /// Fails the test with the replay information and the steps before this one.
    fn fail(&self, what: &str, detail: &str) -> ! {
        let mode = if self.o.mode == Mode::Oom { "OOM" } else { "main" };
        let mut s = format!(
            "\n{what}\n{detail}\nseed {seed}, {mode} phase, step {step} of {steps}: replay with \
             MOJIM_TEST_SEED={seed} MOJIM_TEST_OPS={steps} cargo test -p mojim-cli --test kv_differential {test} \
             (absolute times follow the clock)\nthe steps before it, latest last:\n",
            seed = self.o.seed,
            step = self.step,
            steps = self.o.steps,
            test = self.o.test,
        );
        for h in &self.history {
            s.push_str("  ");
            s.push_str(h);
            s.push('\n');
        }
        if let Some(kv) = &self.k.kv {
            let state = if running(kv.pid()) { "is running" } else { "has exited" };
            s.push_str(&format!("mojim kv (pid {}) {state}; ", kv.pid()));
        }
        s.push_str(&self.redis.last_words());
        panic!("{s}");
    }

    fn remember(&mut self, what: String) {
        let what: String =
            if what.len() > 400 { what.chars().take(400).collect::<String>() + "..." } else { what };
        self.history.push_back(format!("#{}: {what}", self.step));
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    /// The requests of `cmds`, their times filled in now.
    fn resolve(&mut self, cmds: &[Cmd]) -> Vec<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(cmds.len());
        for c in cmds {
            let mut args = Vec::with_capacity(c.args.len());
            for a in &c.args {
                args.push(match a {
                    Arg::B(b) => {
                        if b.len() > 64 << 10 {
                            self.stats.values_over_64k += 1;
                        }
                        if b.len() == MAX_BULK {
                            self.stats.values_at_max_bulk += 1;
                        }
                        b.clone()
                    }
                    Arg::At { unit_ms, when } => {
                        let now = now_ms();
                        let ms = match when {
                            When::Tick => self.clock.tick(),
                            When::Ahead(d) => now + d,
                            When::Ago(d) => now - d,
                            When::One => *unit_ms,
                        };
                        (ms / unit_ms).to_string().into_bytes()
                    }
                    Arg::Dumped { req, from_redis, mangle } => self.dumped(req, *from_redis, *mangle),
                });
            }
            out.push(args);
        }
        self.stats.requests += out.len() as u64;
        out
    }

    /// The payload one server answers to `req` now, changed by `mangle` (`NO_PAYLOAD` if it
    /// answers none, or one past `MAX_BULK`).
    fn dumped(&mut self, req: &[Vec<u8>], from_redis: bool, mangle: Mangle) -> Vec<u8> {
        let c = if from_redis { &mut self.r } else { &mut self.m };
        let got = c.call(&[req.to_vec()]).map(|r| r.replies);
        self.stats.requests += 1;
        let mut p = match got {
            // (A payload past `MAX_BULK`, of a value near it, is not sent: both servers would close
            // the connection.)
            Ok(r) => match r.into_iter().next() {
                Some(Reply::Bulk(p)) if p.len() <= MAX_BULK => p,
                _ => return NO_PAYLOAD.to_vec(),
            },
            Err(e) => self.fail("a server did not answer a DUMP", &e),
        };
        self.stats.payloads += 1;
        let n = p.len();
        match mangle {
            Mangle::None => {}
            Mangle::Truncate => p.truncate(n.saturating_sub(1)),
            Mangle::Checksum if n > 0 => p[n - 1] ^= 0x10,
            // The body, the RDB version and the checksum (CRC-64 of both), as Redis seals it. Not
            // the type's byte (mojim kv refuses a kind it does not hold by name, Redis as bad
            // data), nor a sorted set's (mojim kv checks its scores, which Redis's check leaves:
            // docs/COMPATIBILITY.md): a wrong checksum for those.
            Mangle::Corrupt { .. } if n > 11 && ZSET_TYPES.contains(&p[0]) => p[n - 1] ^= 0x10,
            Mangle::Corrupt { at, xor } if n > 11 => {
                p[1 + (at % (n as u64 - 11)) as usize] ^= xor;
                let crc = mojim_kv::cmd::rdb::crc64::crc64(0, &p[..n - 8]);
                p[n - 8..].copy_from_slice(&crc.to_le_bytes());
            }
            _ => {}
        }
        p
    }

    fn ctx(&mut self, span_ms: u64, cmds: &[Cmd]) -> Ctx {
        self.longest_ms = self.longest_ms.max(span_ms);
        Ctx {
            span_ms,
            longest_ms: self.longest_ms,
            expired_unremoved: self.expired_unremoved || cmds.iter().any(|c| c.leaves_expired),
            ttl_may_round_up: self.o.ttl_may_round_up,
        }
    }

    /// Which requests Redis is sent: all but those mojim kv refused with `-OOM` (a refused
    /// EXEC takes its whole transaction with it). Also returns the keys the refused ones name.
    fn kept(&mut self, cmds: &[Cmd], m: &[Reply]) -> (Vec<usize>, Vec<Vec<u8>>) {
        let mut keep = Vec::with_capacity(cmds.len());
        let mut refused_keys = Vec::new();
        let mut block: Option<usize> = None;
        for (i, c) in cmds.iter().enumerate() {
            let name = c.name();
            let oom = m.get(i).is_some_and(|r| r.error_starts("OOM"));
            match block {
                None if name == "MULTI" => {
                    block = Some(i);
                    keep.push(i);
                }
                Some(start) if name == "EXEC" || name == "DISCARD" => {
                    block = None;
                    if oom {
                        self.stats.oom_refusals += 1;
                        keep.retain(|&j| j < start);
                        refused_keys.extend(cmds[start..=i].iter().flat_map(|c| c.keys.clone()));
                    } else {
                        keep.push(i);
                    }
                }
                None if oom => {
                    self.stats.oom_refusals += 1;
                    if ["DEL", "UNLINK", "FLUSHALL", "FLUSHDB"].contains(&name.as_str()) {
                        self.fail(
                            "mojim kv refused a command that frees memory with -OOM",
                            &format!("{} answered {}", c.show(), m[i].show()),
                        );
                    }
                    refused_keys.extend(c.keys.clone());
                }
                _ => keep.push(i),
            }
        }
        (keep, refused_keys)
    }

    /// Sends `cmds` to mojim kv, then what it did not refuse to Redis, and compares. With
    /// `mirror_down`, the mirror is killed first and restarted once they are sent.
    fn pipeline(&mut self, cmds: Vec<Cmd>, mirror_down: bool) {
        let timed = cmds.iter().any(|c| c.timed);
        if timed && self.clock.wait_clear() {
            self.stats.tick_waits += 1;
        }
        let cmds = if self.o.append_guard { self.guard_appends(cmds) } else { cmds };
        let reqs = self.resolve(&cmds);
        let shown = cmds.iter().map(Cmd::show).collect::<Vec<_>>().join(" ; ");
        self.remember(shown.clone());
        let t0 = now_ms();
        let m = if mirror_down {
            self.k.c.kill_mirror();
            let (k, addr) = (&mut self.k, &self.mirror_addr);
            let (got, _) = self.m.exchange(&encode(&reqs), |c| {
                restart_mirror(k, addr)?;
                c.read_n(reqs.len())
            });
            got
        } else {
            self.m.call(&reqs)
        };
        let m =
            m.unwrap_or_else(|e| self.fail("mojim kv did not answer", &format!("{e}\nthe step: {shown}")));
        let (keep, refused_keys) = self.kept(&cmds, &m.replies);
        let rreqs: Vec<Vec<Vec<u8>>> = keep.iter().map(|&i| reqs[i].clone()).collect();
        let r = self
            .r
            .call(&rreqs)
            .unwrap_or_else(|e| self.fail("redis did not answer", &format!("{e}\nthe step: {shown}")));
        let t1 = now_ms();
        // Set before the step's flushes (below) may clear it.
        self.expired_unremoved |= cmds.iter().any(|c| c.leaves_expired);
        if timed {
            self.clock.record(t1 - t0);
            if self.clock.overlapped(t0, t1) {
                self.overrun();
                if m.closed || r.closed {
                    self.reconnect();
                }
                return;
            }
        }
        let cx = self.ctx(t1 - t0, &cmds);
        let mut quit = false;
        // Keys a changed payload was restored into on Redis only.
        let mut diverged = Vec::new();
        for (p, &i) in keep.iter().enumerate() {
            let (a, b) = match (m.replies.get(i), r.replies.get(p)) {
                (Some(a), Some(b)) => (a, b),
                (None, None) => break,
                (a, b) => self.fail(
                    "one server answered a request the other closed the connection before",
                    &format!(
                        "request {i}: {}\nmojim kv: {:?}\nredis: {:?}\nthe step: {shown}",
                        cmds[i].show(),
                        a.map(Reply::show),
                        b.map(Reply::show)
                    ),
                ),
            };
            let prev = (p > 0 && keep[p - 1] == i - 1).then(|| (&m.replies[i - 1], &r.replies[p - 1]));
            if let Err(why) = compare(&cmds[i].cmp, a, b, prev, &cx) {
                // A payload it was sent, whose bytes the step does not show.
                let payload = cmds[i]
                    .args
                    .iter()
                    .zip(&reqs[i])
                    .find(|(a, _)| matches!(a, Arg::Dumped { .. }))
                    .map_or(String::new(), |(_, p)| format!(" (the payload: \"{}\")", p.escape_ascii()));
                let keys = self.describe_keys(&cmds[i].keys);
                self.fail(
                    &format!("the servers answered request {i} differently: {why}"),
                    &format!(
                        "request {i}: {}{payload}\nmojim kv: {}\nredis:    {}\nthe step: {shown}\nmojim kv's replies: {}\nredis's replies:    {}\nthe keys it names, now:{keys}",
                        cmds[i].show(),
                        a.show(),
                        b.show(),
                        show_all(&m.replies),
                        show_all(&r.replies)
                    ),
                );
            }
            let name = cmds[i].name();
            if let Cmp::CorruptRestore { dst } = &cmds[i].cmp {
                if took_what_mojim_refused(a, b) {
                    diverged.push(dst.clone());
                }
            }
            quit |= name == "QUIT";
            if name == "MULTI" && a == &Reply::Simple(b"OK".to_vec()) {
                self.stats.transactions += 1;
            }
            if name == "EXEC" && a.error_starts("EXECABORT") {
                self.stats.exec_aborts += 1;
            }
            // A flush of every database leaves no key, expired or not (but the requests after
            // it may). Not FLUSHDB: the connection may have SELECTed another database than the
            // one that holds a key expired unremoved.
            if name == "FLUSHALL" && a == &Reply::Simple(b"OK".to_vec()) {
                self.expired_unremoved = cmds[i + 1..].iter().any(|c| c.leaves_expired);
            }
        }
        if m.closed != r.closed {
            self.fail(
                "one server closed the connection and the other did not",
                &format!("mojim kv closed: {}, redis closed: {}\nthe step: {shown}", m.closed, r.closed),
            );
        }
        if reqs.len() > 1 {
            self.stats.pipelines += 1;
        }
        if quit || m.closed {
            self.stats.quits += u64::from(quit);
            self.reconnect();
        }
        if !refused_keys.is_empty() {
            self.compare_keys(&refused_keys, "after a request mojim kv refused with -OOM");
        }
        if !diverged.is_empty() {
            self.stats.corrupt_payloads_taken += 1;
            self.delete_on_both(&diverged, "a payload Redis took and mojim kv refused");
        }
    }

    /// `BUG_APPEND_PAST_MAX_BULK`: a step whose APPENDs could make a string longer than
    /// `MAX_BULK` has them replaced by STRLEN (the lengths are read from Redis, and not compared).
    fn guard_appends(&mut self, mut cmds: Vec<Cmd>) -> Vec<Cmd> {
        if !cmds.iter().any(|c| c.name() == "APPEND") {
            return cmds;
        }
        let keys: BTreeSet<Vec<u8>> = cmds.iter().flat_map(|c| c.keys.clone()).collect();
        let reqs: Vec<Vec<Vec<u8>>> = keys.iter().map(|k| vec![b"STRLEN".to_vec(), k.clone()]).collect();
        let lens = self.r.call(&reqs).unwrap_or_else(|e| self.fail("redis did not answer STRLEN", &e));
        let longest = lens
            .replies
            .iter()
            .map(|r| if let Reply::Int(n) = r { *n as usize } else { 0 })
            .max()
            .unwrap_or(0);
        let added: usize =
            cmds.iter().flat_map(|c| &c.args).map(|a| if let Arg::B(b) = a { b.len() } else { 0 }).sum();
        if longest + added <= MAX_BULK {
            return cmds;
        }
        for c in &mut cmds {
            if c.name() == "APPEND" && c.args.len() == 3 {
                self.stats.append_guarded += 1;
                c.args = vec![Arg::B(b"STRLEN".to_vec()), c.args[1].clone()];
            }
        }
        cmds
    }

    /// A timed step ran into a tick: its replies may differ for that reason alone, and so may
    /// the expiring keys. They are not compared; once the tick is past, the expiring keys are
    /// deleted on both.
    fn overrun(&mut self) {
        self.stats.overruns += 1;
        self.remember("(ran into an expiry instant: not compared; the expiring keys are deleted)".into());
        self.clock.wait_clear();
        let mut del = vec![b"DEL".to_vec()];
        del.extend(expiring_keys());
        let req = [del];
        self.m.call(&req).unwrap_or_else(|e| self.fail("mojim kv did not answer DEL", &e));
        self.r.call(&req).unwrap_or_else(|e| self.fail("redis did not answer DEL", &e));
    }

    /// Deletes `keys` on both servers (their states differ for a documented reason).
    fn delete_on_both(&mut self, keys: &[Vec<u8>], why: &str) {
        self.remember(format!("({why}: deleted on both)"));
        let mut del = vec![b"DEL".to_vec()];
        del.extend(keys.iter().cloned());
        let req = [del];
        self.m.call(&req).unwrap_or_else(|e| self.fail("mojim kv did not answer DEL", &e));
        self.r.call(&req).unwrap_or_else(|e| self.fail("redis did not answer DEL", &e));
    }

    fn reconnect(&mut self) {
        self.m =
            Conn::connect(&self.k.addr()).unwrap_or_else(|e| self.fail("cannot reconnect to mojim kv", &e));
        self.r =
            Conn::connect(&self.redis.addr).unwrap_or_else(|e| self.fail("cannot reconnect to redis", &e));
    }

    /// SCAN from 0 to the end; `Err(reply)` if a call was refused.
    fn scan_all(
        c: &mut Conn,
        opts: &[Vec<u8>],
        requests: &mut u64,
    ) -> Result<Result<BTreeSet<Vec<u8>>, Reply>, String> {
        let mut keys = BTreeSet::new();
        let mut cursor = b"0".to_vec();
        for _ in 0..1_000_000 {
            let mut req = vec![b"SCAN".to_vec(), cursor.clone()];
            req.extend(opts.iter().cloned());
            *requests += 1;
            let got = c.call(&[req])?;
            let Some(reply) = got.replies.into_iter().next() else {
                return Err("closed the connection".into());
            };
            let Reply::Array(v) = &reply else { return Ok(Err(reply)) };
            let [Reply::Bulk(next), Reply::Array(found)] = &v[..] else {
                return Err(format!("SCAN answered {}", reply.show()));
            };
            for k in found {
                let Reply::Bulk(k) = k else { return Err(format!("SCAN answered {}", reply.show())) };
                keys.insert(k.clone());
            }
            if next == b"0" {
                return Ok(Ok(keys));
            }
            cursor = next.clone();
        }
        Err("SCAN did not come back to cursor 0 in a million calls".into())
    }

    fn scan_step(&mut self, opts: Vec<Vec<u8>>) {
        if self.clock.wait_clear() {
            self.stats.tick_waits += 1;
        }
        self.stats.scans += 1;
        let shown = format!(
            "SCAN ... {}",
            opts.iter().map(|o| o.escape_ascii().to_string()).collect::<Vec<_>>().join(" ")
        );
        self.remember(shown.clone());
        let t0 = now_ms();
        let mut n = 0;
        let a = Self::scan_all(&mut self.m, &opts, &mut n)
            .unwrap_or_else(|e| self.fail("mojim kv's SCAN failed", &e));
        let mut ignored = 0;
        let b = Self::scan_all(&mut self.r, &opts, &mut ignored)
            .unwrap_or_else(|e| self.fail("redis's SCAN failed", &e));
        self.stats.requests += n;
        let t1 = now_ms();
        self.clock.record(t1 - t0);
        if self.clock.overlapped(t0, t1) {
            return self.overrun();
        }
        if a != b {
            let detail = match (&a, &b) {
                (Ok(a), Ok(b)) => format!(
                    "only mojim kv's: {}\nonly redis's: {}",
                    show_keys(a.difference(b)),
                    show_keys(b.difference(a))
                ),
                _ => format!(
                    "mojim kv: {:?}\nredis: {:?}",
                    a.as_ref().map_err(Reply::show),
                    b.as_ref().map_err(Reply::show)
                ),
            };
            self.fail("SCAN iterated to the end found different keys", &format!("{shown}\n{detail}"));
        }
    }

    fn over_limit(&mut self, before: Vec<Cmd>, big: Vec<Vec<u8>>) {
        let timed = before.iter().any(|c| c.timed);
        if timed && self.clock.wait_clear() {
            self.stats.tick_waits += 1;
        }
        let reqs = self.resolve(&before);
        let shown = format!(
            "{} ; {} with an argument of {} bytes",
            before.iter().map(Cmd::show).collect::<Vec<_>>().join(" ; "),
            String::from_utf8_lossy(&big[0]),
            big.iter().map(Vec::len).max().unwrap_or(0)
        );
        self.remember(shown.clone());
        // The long string's header and its first bytes only: a server that closes the
        // connection with bytes it has not read resets it, and the replies still on their way
        // to the client are lost (TCP), which would be no server's fault.
        let mut bytes = encode(&reqs);
        let (long, rest) = big.split_last().expect("a request");
        bytes.extend_from_slice(&encode(&[[rest, &[vec![]]].concat()]));
        bytes.truncate(bytes.len() - b"$0\r\n\r\n".len());
        bytes.extend_from_slice(format!("${}\r\n", long.len()).as_bytes());
        bytes.extend_from_slice(&long[..16]);
        let n = reqs.len() + 1;
        let t0 = now_ms();
        // One reply more than requests: the close.
        let (m, _) = self.m.exchange(&bytes, |c| c.read_n(n + 1));
        let m = m.unwrap_or_else(|e| self.fail("mojim kv did not answer", &e));
        let (r, _) = self.r.exchange(&bytes, |c| c.read_n(n + 1));
        let r = r.unwrap_or_else(|e| self.fail("redis did not answer", &e));
        let t1 = now_ms();
        if timed {
            self.clock.record(t1 - t0);
            if self.clock.overlapped(t0, t1) {
                self.overrun();
                return self.reconnect();
            }
        }
        let cx = self.ctx(t1 - t0, &before);
        let ok_close = |x: &Replies| {
            x.closed
                && x.replies.len() == n
                && x.replies[n - 1].error_starts("ERR Protocol error: invalid bulk length")
        };
        if !ok_close(&m) || !ok_close(&r) {
            self.fail(
                "a bulk string past the limit did not get the protocol error and a close from both",
                &format!(
                    "{shown}\nmojim kv (closed {}): {}\nredis (closed {}): {}",
                    m.closed,
                    show_all(&m.replies),
                    r.closed,
                    show_all(&r.replies)
                ),
            );
        }
        for (i, c) in before.iter().enumerate() {
            let prev = (i > 0).then(|| (&m.replies[i - 1], &r.replies[i - 1]));
            if let Err(why) = compare(&c.cmp, &m.replies[i], &r.replies[i], prev, &cx) {
                self.fail(
                    &format!("the servers answered request {i} differently: {why}"),
                    &format!("{shown}\nmojim kv: {}\nredis: {}", show_all(&m.replies), show_all(&r.replies)),
                );
            }
            self.expired_unremoved |= c.leaves_expired;
        }
        self.stats.over_limit_closes += 1;
        self.reconnect();
    }

    fn unsupported(&mut self, args: Vec<Vec<u8>>) {
        self.stats.unsupported += 1;
        self.stats.requests += 1;
        let shown = args.iter().map(|a| a.escape_ascii().to_string()).collect::<Vec<_>>().join(" ");
        self.remember(format!("{shown} (mojim kv only)"));
        let expected = String::from_utf8_lossy(&redis_unknown_command(&args)).into_owned();
        let m = self
            .m
            .call(std::slice::from_ref(&args))
            .unwrap_or_else(|e| self.fail("mojim kv did not answer", &e));
        if m.replies != [Reply::Error(redis_unknown_command(&args))] {
            self.fail(
                "mojim kv did not refuse a command outside its subset as Redis refuses one it does not know",
                &format!("{shown}\nmojim kv: {}\nexpected: -{expected}", show_all(&m.replies)),
            );
        }
        self.compare_keys(&[args[1].clone()], "after a command mojim kv does not know");
    }

    fn fault(&mut self, f: Fault) {
        self.remember(format!("fault: {f:?}"));
        match f {
            Fault::KillKv => {
                self.k.kill();
                self.start_kv(f);
                self.stats.kv_restarts += 1;
            }
            Fault::KillMirror => {
                self.k.c.kill_mirror();
                self.restart_mirror();
                self.stats.mirror_restarts += 1;
            }
            Fault::KillBoth => {
                self.k.kill();
                self.k.c.kill_mirror();
                self.restart_mirror();
                self.start_kv(f);
                self.stats.both_restarts += 1;
            }
            Fault::MirrorDownUnderWrites => {
                let cmds = self.gen.writes();
                self.stats.writes_across_mirror_restart += cmds.len() as u64;
                self.pipeline(cmds, true);
                self.stats.mirror_restarts += 1;
            }
        }
        self.reconnect();
        if matches!(f, Fault::KillKv | Fault::KillBoth) {
            self.forget_scripts();
        }
        self.check_keyspace(&format!("after {f:?}"));
    }

    /// mojim kv's script cache and libraries live in its heap, not in the region: a restart
    /// loses them (docs/COMPATIBILITY.md). Redis's are flushed alike.
    fn forget_scripts(&mut self) {
        forget_scripts(&mut self.r).unwrap_or_else(|e| self.fail("redis did not flush its scripts", &e));
    }

    fn restart_mirror(&mut self) {
        restart_mirror(&mut self.k, &self.mirror_addr)
            .unwrap_or_else(|e| self.fail("the mirror did not start again", &e));
    }

    /// Starts mojim kv again on the same region: it must start, whatever state it was killed in.
    fn start_kv(&mut self, after: Fault) {
        let mirror = self.k.c.mirror_addr();
        let cfg = self.k.c.cfg_path.to_str().expect("utf-8").to_string();
        let args = ["kv", "--config", &cfg, "--listen", "127.0.0.1:0", "--mirror", &mirror];
        match ChildNode::spawn(exe(), &args) {
            Ok(c) => self.k.kv = Some(c),
            Err(e) => self.fail(&format!("mojim kv did not start again after {after:?}"), &e.to_string()),
        }
    }

    /// Each key's type, value and time to live on `c`.
    fn key_states(c: &mut Conn, keys: &[Vec<u8>], requests: &mut u64) -> Result<Vec<KeyState>, String> {
        let types: Vec<Vec<Vec<u8>>> = keys.iter().map(|k| vec![b"TYPE".to_vec(), k.clone()]).collect();
        let types = c.call(&types)?.replies;
        let mut reqs = Vec::new();
        for (k, t) in keys.iter().zip(&types) {
            let read: Vec<&[u8]> = match t {
                Reply::Simple(s) if s == b"hash" => vec![b"HGETALL"],
                Reply::Simple(s) if s == b"list" => vec![b"LRANGE", b"0", b"-1"],
                Reply::Simple(s) if s == b"set" => vec![b"SMEMBERS"],
                Reply::Simple(s) if s == b"zset" => vec![b"ZRANGE", b"0", b"-1", b"WITHSCORES"],
                _ => vec![b"GET"],
            };
            let mut r: Vec<Vec<u8>> = vec![read[0].to_vec(), k.clone()];
            r.extend(read[1..].iter().map(|x| x.to_vec()));
            reqs.push(r);
            reqs.push(vec![b"PTTL".to_vec(), k.clone()]);
        }
        let got = c.call(&reqs)?.replies;
        *requests += (types.len() + got.len()) as u64;
        if types.len() != keys.len() || got.len() != reqs.len() {
            return Err("closed the connection".into());
        }
        let mut it = got.into_iter();
        Ok(types
            .into_iter()
            .map(|typ| KeyState {
                typ,
                value: it.next().expect("counted"),
                pttl: it.next().expect("counted"),
            })
            .collect())
    }

    /// Each key's type, value and time to live on both servers, for a failure's report.
    fn describe_keys(&mut self, keys: &[Vec<u8>]) -> String {
        let mut n = 0;
        let (Ok(a), Ok(b)) =
            (Self::key_states(&mut self.m, keys, &mut n), Self::key_states(&mut self.r, keys, &mut n))
        else {
            return " (not read: a connection closed)".into();
        };
        let mut s = String::new();
        for ((k, a), b) in keys.iter().zip(&a).zip(&b) {
            s.push_str(&format!(
                "\n  {:?}: mojim kv {} {} pttl {}; redis {} {} pttl {}",
                k.escape_ascii().to_string(),
                a.typ.show(),
                a.value.show(),
                a.pttl.show(),
                b.typ.show(),
                b.value.show(),
                b.pttl.show()
            ));
        }
        s
    }

    /// Compares `keys` on both servers: type, value (a hash as field/value pairs, a set's
    /// members in any order, a sorted set in order), whether and when they expire. Expiring keys
    /// are read away from a tick.
    fn compare_keys(&mut self, keys: &[Vec<u8>], why: &str) {
        let keys: Vec<Vec<u8>> = keys.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        let timed = keys.iter().any(|k| is_expiring(k));
        if timed {
            self.clock.wait_clear();
        }
        let t0 = now_ms();
        let mut n = 0;
        let a = Self::key_states(&mut self.m, &keys, &mut n)
            .unwrap_or_else(|e| self.fail("mojim kv did not answer", &e));
        let mut ignored = 0;
        let b = Self::key_states(&mut self.r, &keys, &mut ignored)
            .unwrap_or_else(|e| self.fail("redis did not answer", &e));
        self.stats.requests += n;
        self.stats.keys_compared += keys.len() as u64;
        let t1 = now_ms();
        if timed && self.clock.overlapped(t0, t1) {
            return self.overrun();
        }
        let cx = Ctx {
            span_ms: t1 - t0,
            longest_ms: self.longest_ms,
            expired_unremoved: true,
            ttl_may_round_up: self.o.ttl_may_round_up,
        };
        for ((k, a), b) in keys.iter().zip(&a).zip(&b) {
            let value_cmp = if a.typ == Reply::Simple(b"hash".to_vec()) {
                Cmp::Pairs
            } else if a.typ == Reply::Simple(b"set".to_vec()) {
                Cmp::Unordered
            } else {
                Cmp::Exact
            };
            let diff = compare(&Cmp::Exact, &a.typ, &b.typ, None, &cx)
                .and_then(|()| compare(&value_cmp, &a.value, &b.value, None, &cx))
                .and_then(|()| compare(&Cmp::Ttl { ms: true }, &a.pttl, &b.pttl, None, &cx));
            if let Err(e) = diff {
                self.fail(
                    &format!("key {:?} differs {why}: {e}", k.escape_ascii().to_string()),
                    &format!(
                        "mojim kv: type {}, value {}, pttl {}\nredis:    type {}, value {}, pttl {}",
                        a.typ.show(),
                        a.value.show(),
                        a.pttl.show(),
                        b.typ.show(),
                        b.value.show(),
                        b.pttl.show()
                    ),
                );
            }
        }
    }

    /// Both keyspaces, whole: the keys SCAN and KEYS find, and each key's type, value and time
    /// to live; DBSIZE no lower than the keys found (equal while no key can have expired
    /// unremoved).
    fn check_keyspace(&mut self, why: &str) {
        self.stats.checks += 1;
        self.remember(format!("keyspace check ({why})"));
        let opts = [b"COUNT".to_vec(), b"100000".to_vec()];
        let mut n = 0;
        let a = Self::scan_all(&mut self.m, &opts, &mut n)
            .unwrap_or_else(|e| self.fail("mojim kv's SCAN failed", &e));
        let b = Self::scan_all(&mut self.r, &opts, &mut n)
            .unwrap_or_else(|e| self.fail("redis's SCAN failed", &e));
        let keys = |c: &mut Conn| -> Result<BTreeSet<Vec<u8>>, String> {
            match c.call(&[vec![b"KEYS".to_vec(), b"*".to_vec()]])?.replies.pop() {
                Some(Reply::Array(v)) => Ok(v
                    .into_iter()
                    .filter_map(|k| if let Reply::Bulk(k) = k { Some(k) } else { None })
                    .collect()),
                other => Err(format!("KEYS * answered {other:?}")),
            }
        };
        let ka = keys(&mut self.m).unwrap_or_else(|e| self.fail("mojim kv's KEYS failed", &e));
        let kb = keys(&mut self.r).unwrap_or_else(|e| self.fail("redis's KEYS failed", &e));
        let (Ok(a), Ok(b)) = (a, b) else { self.fail("SCAN was refused", why) };
        let plain = |s: &BTreeSet<Vec<u8>>| -> BTreeSet<Vec<u8>> {
            s.iter().filter(|k| !is_expiring(k)).cloned().collect()
        };
        let (pa, pb, pka, pkb) = (plain(&a), plain(&b), plain(&ka), plain(&kb));
        if pa != pb || pka != pa || pkb != pb {
            self.fail(
                &format!("the keyspaces differ {why}"),
                &format!(
                    "SCAN: only mojim kv's: {}; only redis's: {}\nKEYS: only mojim kv's: {}; only redis's: {}\n\
                     mojim kv's SCAN and KEYS differ: {}",
                    show_keys(pa.difference(&pb)),
                    show_keys(pb.difference(&pa)),
                    show_keys(pka.difference(&pkb)),
                    show_keys(pkb.difference(&pka)),
                    pa != pka
                ),
            );
        }
        let plain_keys: Vec<Vec<u8>> = pa.iter().cloned().collect();
        self.compare_keys(&plain_keys, why);
        // The expiring keys, and DBSIZE (which counts them), away from a tick.
        self.clock.wait_clear();
        let t0 = now_ms();
        let e = if self.o.mode == Mode::Main { expiring_keys() } else { Vec::new() };
        let exists: Vec<Vec<Vec<u8>>> = e.iter().map(|k| vec![b"EXISTS".to_vec(), k.clone()]).collect();
        let mut live = [0i64; 2];
        let mut sizes = [0i64; 2];
        let mut reqs = exists.clone();
        reqs.push(vec![b"DBSIZE".to_vec()]);
        for side in 0..2 {
            let c = if side == 0 { &mut self.m } else { &mut self.r };
            let got = c.call(&reqs).map(|r| r.replies).unwrap_or_default();
            n += reqs.len() as u64;
            let ints: Vec<i64> =
                got.iter().filter_map(|r| if let Reply::Int(n) = r { Some(*n) } else { None }).collect();
            if ints.len() != reqs.len() {
                self.fail("EXISTS or DBSIZE failed", &show_all(&got));
            }
            live[side] = pa.len() as i64 + ints[..e.len()].iter().sum::<i64>();
            sizes[side] = ints[e.len()];
        }
        self.stats.requests += n;
        let t1 = now_ms();
        if self.clock.overlapped(t0, t1) {
            return self.overrun();
        }
        let exact = !self.expired_unremoved;
        if live[0] != live[1]
            || sizes[0] < live[0]
            || sizes[1] < live[1]
            || (exact && sizes[0] != live[0])
            || (exact && sizes[1] != live[1])
        {
            self.fail(
                &format!("DBSIZE does not count the live keys {why}"),
                &format!(
                    "live keys: mojim kv {}, redis {}; DBSIZE: mojim kv {}, redis {}; keys expired unremoved: {}",
                    live[0], live[1], sizes[0], sizes[1], !exact
                ),
            );
        }
        self.compare_keys(&e, why);
    }
}

/// What Redis answers a command it does not know (`processCommand`): the name and the
/// arguments as C strings (to a NUL), the arguments listed until the list passes 128 bytes
/// (the last one cut there), line ends made spaces.
fn redis_unknown_command(args: &[Vec<u8>]) -> Vec<u8> {
    let c_str = |b: &[u8]| b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())].to_vec();
    let mut list = Vec::new();
    for a in &args[1..] {
        if list.len() >= 128 {
            break;
        }
        let a = c_str(a);
        list.push(b'\'');
        list.extend_from_slice(&a[..a.len().min(128 - (list.len() - 1))]);
        list.extend_from_slice(b"' ");
    }
    let name = c_str(&args[0]);
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(&name[..name.len().min(128)]);
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend(list);
    msg.iter_mut().filter(|c| **c == b'\r' || **c == b'\n').for_each(|c| *c = b' ');
    msg
}

/// The RDB types of sorted sets (3 and 5: a table; 12: a ziplist; 17: a listpack).
const ZSET_TYPES: [u8; 4] = [3, 5, 12, 17];

/// SCRIPT FLUSH and FUNCTION FLUSH on `c`.
fn forget_scripts(c: &mut Conn) -> Result<(), String> {
    let ok = Reply::Simple(b"OK".to_vec());
    let got = c.call(&[
        vec![b"SCRIPT".to_vec(), b"FLUSH".to_vec()],
        vec![b"FUNCTION".to_vec(), b"FLUSH".to_vec()],
    ])?;
    if got.replies != [ok.clone(), ok] {
        return Err(format!("SCRIPT FLUSH, FUNCTION FLUSH answered {}", show_all(&got.replies)));
    }
    Ok(())
}

fn show_keys<'k>(keys: impl Iterator<Item = &'k Vec<u8>>) -> String {
    let v: Vec<String> = keys.map(|k| format!("{:?}", k.escape_ascii().to_string())).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Starts the mirror again on its address `addr` (retried while its old socket goes).
fn restart_mirror(k: &mut KvCluster, addr: &str) -> Result<(), String> {
    let cfg = k.c.cfg_path.to_str().expect("utf-8").to_string();
    let args = ["serve", "--config", &cfg, "--listen", addr];
    let t0 = Instant::now();
    loop {
        match ChildNode::spawn(exe(), &args) {
            Ok(c) => {
                k.c.mirror = Some(c);
                return Ok(());
            }
            Err(e) if t0.elapsed() > WAIT => return Err(format!("on {addr}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
