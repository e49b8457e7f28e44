//! `mojim bench --kv-stall`: how long one large command keeps a server from answering anyone
//! else. On each target, a client PINGs in a loop (one PING at a time, each timed from its send
//! to its PONG) while a second client runs one large command of `--stall-commands`:
//!
//! | command | on |
//! |---|---|
//! | `zunionstore`: `ZUNIONSTORE bench:stall:zdest 2 bench:stall:za bench:stall:zb` | two sorted sets of `--members` members, sharing half of them (a union of 1.5 × `--members`) |
//! | `del`: `DEL bench:stall:set` | a set of `--members` members |
//! | `lrange`: `LRANGE bench:stall:list 0 -1` | a list of `--members` elements (the reply is read as it streams in, without keeping it) |
//!
//! Members are [`super::collections::member`]'s 16 bytes. Against a target that waits, a write
//! command is followed by `WAIT 1 0` or `WAITAOF 1 1 0` and its time includes that. The longest
//! PING delay (a PING sent before the command's reply arrived, its wait included), and the
//! command's own time, are reported for each target side by side; with `--repeat`, the round
//! with the median longest delay. A command a target refuses (an error reply) is reported as
//! refused, with its answer, and the other targets go on.
//!
//! A `DEL` may leave its value to be freed in the background (Redis's lazyfree, mojim kv's
//! large values): the PINGs then go on until the target's `INFO memory` counts no value waiting
//! (`lazyfree_pending_objects` 0, polled every millisecond from the reply), and the time until
//! then and the longest PING delay until then are reported too.

use super::client::{self, RespClient};
use super::fill;
use super::probe::{self, Need};
use super::resp::{Skipper, Value};
use super::targets::{Server, Target, Wait};
use super::{expect_reply, wait_for_replica, KvArgs};
use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long the large command, and a PING stuck behind it, may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);
/// PINGs before the command is sent (their delays are the baseline).
const WARMUP_PINGS: usize = 200;

const ZA: &[u8] = b"bench:stall:za";
const ZB: &[u8] = b"bench:stall:zb";
const ZDEST: &[u8] = b"bench:stall:zdest";
const SET: &[u8] = b"bench:stall:set";
const LIST: &[u8] = b"bench:stall:list";

/// A large command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StallCommand {
    /// ZUNIONSTORE of two sorted sets of --members members (sharing half) into a third.
    Zunionstore,
    /// DEL of a set of --members members.
    Del,
    /// LRANGE 0 -1 of a list of --members elements.
    Lrange,
}

impl StallCommand {
    /// The name in flags and results.
    pub fn name(self) -> &'static str {
        match self {
            StallCommand::Zunionstore => "zunionstore",
            StallCommand::Del => "del",
            StallCommand::Lrange => "lrange",
        }
    }

    /// The commands a target needs for it.
    pub fn need(self) -> Need {
        let probes = match self {
            StallCommand::Zunionstore => probe::ZSET,
            StallCommand::Del => probe::SET,
            StallCommand::Lrange => probe::LIST,
        };
        Need { flag: "--stall-commands", value: self.name(), probes }
    }

    /// The command's arguments.
    fn args(self) -> &'static [&'static [u8]] {
        match self {
            StallCommand::Zunionstore => &[b"ZUNIONSTORE", ZDEST, b"2", ZA, ZB],
            StallCommand::Del => &[b"DEL", SET],
            StallCommand::Lrange => &[b"LRANGE", LIST, b"0", b"-1"],
        }
    }

    fn writes(self) -> bool {
        self != StallCommand::Lrange
    }

    /// Whether it removes a value that a target may free in the background.
    fn frees(self) -> bool {
        self == StallCommand::Del
    }

    /// What the command works on, for the table.
    pub fn describe(self, members: u64) -> String {
        match self {
            StallCommand::Zunionstore => {
                format!("ZUNIONSTORE of 2 × {members} into {}", members + members / 2)
            }
            StallCommand::Del => format!("DEL of a set of {members}"),
            StallCommand::Lrange => format!("LRANGE 0 -1 of {members}"),
        }
    }
}

/// What to run.
pub struct Plan<'a> {
    /// The shared options (`--repeat`, `--json`).
    pub a: &'a BenchArgs,
    /// `--members`, `--stall-commands`.
    pub k: &'a KvArgs,
    /// The redis-server's version, given in the Redis targets' results.
    pub version: Option<&'a str>,
}

/// One command on one target.
#[derive(Clone, Debug, Serialize)]
pub struct StallResult {
    /// `stall`.
    pub mode: &'static str,
    /// `zunionstore`, `del` or `lrange`.
    pub command: &'static str,
    /// The target.
    pub target: &'static str,
    /// Elements of each collection.
    pub members: u64,
    /// The command's time, from its send to its reply (its wait's included), ms.
    pub command_ms: f64,
    /// The longest PING delay, ms.
    pub longest_ping_ms: f64,
    /// The median PING delay before the command, µs.
    pub ping_p50_us: f64,
    /// PINGs answered while the command ran.
    pub pings_during: u64,
    /// `del`: from the command's send until the target's `INFO memory` said no value waits to
    /// be freed in the background (`lazyfree_pending_objects` 0), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freed_ms: Option<f64>,
    /// `del`: the longest PING delay until then, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub longest_ping_until_freed_ms: Option<f64>,
    /// The target's answer, if it refused the command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The redis-server's version (the Redis targets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_version: Option<String>,
}

/// Runs every command of `--stall-commands` on every server.
pub fn run(p: &Plan, servers: &[Server]) -> Result<Vec<StallResult>> {
    let (k, repeat) = (p.k, p.a.repeat.max(1));
    let mut results = Vec::new();
    let total = k.stall_commands.len() * servers.len() * repeat;
    let mut done = 0;
    for &cmd in &k.stall_commands {
        let mut rounds: Vec<Vec<StallResult>> = vec![Vec::new(); servers.len()];
        for round in 0..repeat {
            for (i, s) in servers.iter().enumerate() {
                prepare(s, cmd, k.members)?;
                let mut r = measure(s, cmd, k.members)?;
                r.redis_version = p.version.filter(|_| s.target.is_redis()).map(str::to_string);
                done += 1;
                let round =
                    if repeat > 1 { format!(", round {}/{repeat}", round + 1) } else { String::new() };
                let freed = match (r.freed_ms, r.longest_ping_until_freed_ms) {
                    (Some(f), Some(p)) => {
                        format!("; freed after {f:.1} ms, the longest PING until then {p:.1} ms")
                    }
                    _ => String::new(),
                };
                match &r.error {
                    None => eprintln!(
                        "kv stall [{done}/{total}] {} {}: the command took {:.1} ms, the longest PING {:.1} ms \
                         ({} PINGs answered meanwhile{round}){freed}",
                        s.target.name(),
                        cmd.describe(k.members),
                        r.command_ms,
                        r.longest_ping_ms,
                        r.pings_during
                    ),
                    Some(e) => eprintln!(
                        "kv stall [{done}/{total}] {} {}: refused: -{e}{round}",
                        s.target.name(),
                        cmd.describe(k.members)
                    ),
                }
                rounds[i].push(r);
            }
        }
        for (s, mut rs) in servers.iter().zip(rounds) {
            rs.sort_by(|x, y| x.longest_ping_ms.total_cmp(&y.longest_ping_ms));
            let r = rs.swap_remove(rs.len() / 2);
            if p.a.json {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{}", serde_json::to_string(&r).unwrap_or_default())
                    .and_then(|_| out.flush());
            }
            results.push(r);
            clean_up(s, cmd)?;
        }
    }
    Ok(results)
}

/// The cardinality command of a collection's type.
fn count_of(key: &[u8]) -> &'static [u8] {
    match key {
        ZA | ZB | ZDEST => b"ZCARD",
        SET => b"SCARD",
        _ => b"LLEN",
    }
}

/// Loads what `cmd` works on, unless it is there already (a round before left it), and empties
/// its destination.
fn prepare(s: &Server, cmd: StallCommand, members: u64) -> Result<()> {
    let name = s.target.name();
    let mut c = RespClient::connect(&s.addr, COMMAND_TIMEOUT)?;
    let int = |v: &Value| matches!(v, Value::Int(_));
    let has = |c: &mut RespClient, key: &[u8]| -> Result<bool> {
        Ok(c.command(&[count_of(key), key])? == Value::Int(members as i64))
    };
    match cmd {
        StallCommand::Zunionstore => {
            // The union of a round before: removed outside the measurement.
            expect_reply(&mut c, name, &[b"DEL", ZDEST], int).map_err(|e| {
                Error::Config(format!(
                    "{e}: the union of the round before cannot be removed; run one round (--repeat 1)"
                ))
            })?;
            let half = members / 2;
            for (key, range) in [(ZA, 0..members), (ZB, half..half + members)] {
                if !has(&mut c, key)? {
                    expect_reply(&mut c, name, &[b"DEL", key], int)?;
                    fill::variadic(&mut c, name, b"ZADD", key, range, Some(&mut |m| m))?;
                }
            }
        }
        StallCommand::Del => {
            if !has(&mut c, SET)? {
                fill::variadic(&mut c, name, b"SADD", SET, 0..members, None)?;
            }
        }
        StallCommand::Lrange => {
            if !has(&mut c, LIST)? {
                expect_reply(&mut c, name, &[b"DEL", LIST], int)?;
                fill::variadic(&mut c, name, b"RPUSH", LIST, 0..members, None)?;
            }
        }
    }
    // The replica has all of it before the measurement starts.
    wait_for_replica(&mut c, name, s.target.wait())
}

/// Removes what `cmd` worked on. A server that refuses to DEL so large a collection is emptied
/// with FLUSHALL instead, saying so.
fn clean_up(s: &Server, cmd: StallCommand) -> Result<()> {
    let name = s.target.name();
    let mut c = RespClient::connect(&s.addr, COMMAND_TIMEOUT)?;
    let keys: &[&[u8]] = match cmd {
        StallCommand::Zunionstore => &[ZA, ZB, ZDEST],
        StallCommand::Del => &[SET],
        StallCommand::Lrange => &[LIST],
    };
    for key in keys {
        if let Value::Error(e) = c.command(&[b"DEL", key])? {
            eprintln!(
                "kv stall: {name} refused DEL {}: -{e}; emptying it with FLUSHALL",
                String::from_utf8_lossy(key)
            );
            expect_reply(&mut c, name, &[b"FLUSHALL"], |v| *v == Value::Simple("OK".into()))?;
            break;
        }
    }
    wait_for_replica(&mut c, name, s.target.wait())
}

/// The PINGs of one measurement: each one's send time and delay.
type Pings = Vec<(Instant, Duration)>;

/// PINGs `addr` one at a time until `stop`, saying on `warm` when the first [`WARMUP_PINGS`]
/// are done.
fn ping_loop(addr: &str, stop: &AtomicBool, warm: mpsc::Sender<()>) -> Result<Pings> {
    let mut c = RespClient::connect(addr, COMMAND_TIMEOUT)?;
    let mut pings = Vec::with_capacity(1 << 16);
    while !stop.load(Ordering::Acquire) {
        let t0 = Instant::now();
        let v = c.command(&[b"PING"])?;
        pings.push((t0, t0.elapsed()));
        if v != Value::Simple("PONG".into()) {
            return Err(Error::Io {
                op: format!("PING {addr}"),
                source: std::io::Error::other(format!("answered {v}")),
            });
        }
        if pings.len() == WARMUP_PINGS {
            let _ = warm.send(());
        }
    }
    Ok(pings)
}

/// Runs `cmd` on `s` while another connection PINGs.
fn measure(s: &Server, cmd: StallCommand, members: u64) -> Result<StallResult> {
    let wait = if cmd.writes() { s.target.wait() } else { Wait::None };
    let mut big = BigClient::connect(&s.addr)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (warm_tx, warm_rx) = mpsc::channel();
    let pinger = {
        let (addr, stop) = (s.addr.clone(), stop.clone());
        std::thread::spawn(move || ping_loop(&addr, &stop, warm_tx))
    };
    if warm_rx.recv().is_err() {
        // The pinger ended before its warm-up: its error says why.
        return match pinger.join() {
            Ok(Err(e)) => Err(e),
            _ => Err(Error::Config(format!("the PING connection to {} ended before its warm-up", s.addr))),
        };
    }
    let t0 = Instant::now();
    let answer = big.run(cmd.args(), wait);
    let t1 = Instant::now();
    let freed = match answer {
        Ok(None) if cmd.frees() => Some(wait_freed(&s.addr)),
        _ => None,
    };
    stop.store(true, Ordering::Release);
    let pings = pinger.join().map_err(|_| Error::Config("the PING thread panicked".into()))??;
    let answer = answer?;
    let freed = freed.transpose()?;
    let until_freed =
        freed.map(|t2| pings.iter().filter(|p| p.0 < t2).map(|p| p.1).max().unwrap_or_default());
    let mut before: Vec<Duration> = pings.iter().filter(|p| p.0 < t0).map(|p| p.1).collect();
    before.sort();
    let longest = pings.iter().filter(|p| p.0 < t1).map(|p| p.1).max().unwrap_or_default();
    Ok(StallResult {
        mode: "stall",
        command: cmd.name(),
        target: s.target.name(),
        members,
        command_ms: (t1 - t0).as_secs_f64() * 1e3,
        longest_ping_ms: longest.as_secs_f64() * 1e3,
        ping_p50_us: before.get(before.len() / 2).copied().unwrap_or_default().as_secs_f64() * 1e6,
        pings_during: pings.iter().filter(|p| p.0 >= t0 && p.0 + p.1 <= t1).count() as u64,
        freed_ms: freed.map(|t2| (t2 - t0).as_secs_f64() * 1e3),
        longest_ping_until_freed_ms: until_freed.map(|d| d.as_secs_f64() * 1e3),
        error: answer,
        redis_version: None,
    })
}

/// When `addr`'s `INFO memory` first says that no value waits to be freed in the background
/// (`lazyfree_pending_objects` 0, or no such field: a target that frees in the command), polled
/// every millisecond.
fn wait_freed(addr: &str) -> Result<Instant> {
    let mut c = RespClient::connect(addr, COMMAND_TIMEOUT)?;
    let t0 = Instant::now();
    loop {
        let v = c.command(&[b"INFO", b"memory"])?;
        let text = String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
        let pending = text
            .lines()
            .find_map(|l| l.strip_prefix("lazyfree_pending_objects:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if pending == 0 {
            return Ok(Instant::now());
        }
        if t0.elapsed() > COMMAND_TIMEOUT {
            return Err(Error::Config(format!(
                "{addr} still had {pending} values to free {} s after the command",
                COMMAND_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The connection of the large command: its reply is read as it streams in and never kept.
struct BigClient {
    addr: String,
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` received and not yet consumed.
    held: std::ops::Range<usize>,
}

impl BigClient {
    fn connect(addr: &str) -> Result<BigClient> {
        let io = |what: &str| {
            let op = format!("{what} {addr}");
            move |source| Error::Io { op, source }
        };
        let sa = addr
            .to_socket_addrs()
            .map_err(io("resolve"))?
            .next()
            .ok_or_else(|| Error::Config(format!("{addr} resolves to no address")))?;
        let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(5)).map_err(io("connect to"))?;
        stream.set_nodelay(true).map_err(io("set TCP_NODELAY on"))?;
        stream.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(io("set a timeout on"))?;
        let mut c = BigClient { addr: addr.to_string(), stream, buf: vec![0; 1 << 20], held: 0..0 };
        if let Some(auth) = client::auth_request() {
            c.send(&auth)?;
            if let Some(e) = c.reply()? {
                return Err(Error::Config(format!("{addr} refused AUTH: -{e}")));
            }
        }
        Ok(c)
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let addr = &self.addr;
        self.stream.write_all(bytes).map_err(|source| Error::Io { op: format!("send to {addr}"), source })
    }

    /// Reads one reply to its end: `Some(message)` if it is an error.
    fn reply(&mut self) -> Result<Option<String>> {
        let mut s = Skipper::new();
        loop {
            if !self.held.is_empty() {
                let fed = s.feed(&self.buf[self.held.clone()]).map_err(|e| Error::Io {
                    op: format!("read a reply from {}", self.addr),
                    source: std::io::Error::other(e.to_string()),
                })?;
                match fed {
                    Some(n) => {
                        self.held.start += n;
                        let first = s.first_line().unwrap_or_default();
                        return Ok(first.strip_prefix(b"-").map(|e| String::from_utf8_lossy(e).into_owned()));
                    }
                    None => self.held = 0..0,
                }
            }
            let n = self
                .stream
                .read(&mut self.buf)
                .map_err(|source| Error::Io { op: format!("receive from {}", self.addr), source })?;
            if n == 0 {
                return Err(Error::Io {
                    op: format!("receive from {}", self.addr),
                    source: std::io::Error::other("the server closed the connection before its reply ended"),
                });
            }
            self.held = 0..n;
        }
    }

    /// Sends `args` and, if `wait`, the wait (with the command, or after its reply:
    /// [`Wait::pipelined`]); reads every reply. `Some(message)` if the target refused the
    /// command (or its wait).
    fn run(&mut self, args: &[&[u8]], wait: Wait) -> Result<Option<String>> {
        let mut out = Vec::new();
        super::resp::encode_command(&mut out, args);
        if wait.pipelined() {
            out.extend_from_slice(wait.request());
        }
        self.send(&out)?;
        let refused = self.reply()?;
        if wait == Wait::None {
            return Ok(refused);
        }
        if !wait.pipelined() {
            self.send(wait.request())?;
        }
        let waited = self.reply()?;
        Ok(refused.or(waited.map(|e| format!("{e} (answering {})", wait.name()))))
    }
}

/// The table: a line per command, the longest PING delay and the command's time of each
/// target side by side; then, for a `del`, when each target had freed the value and the
/// longest PING delay until then; then the refusals, in full.
pub fn table(results: &[StallResult]) -> String {
    let targets: Vec<Target> = super::targets::ALL_TARGETS
        .into_iter()
        .filter(|t| results.iter().any(|r| r.target == t.name()))
        .collect();
    let mut commands: Vec<&str> = Vec::new();
    for r in results {
        if !commands.contains(&r.command) {
            commands.push(r.command);
        }
    }
    let members = results.first().map_or(0, |r| r.members);
    let mut out = format!(
        "kv stall: the longest PING delay (ms) on one connection while another runs the command, \
         and the command's own time (ms); {members} elements per collection\n{:<12}",
        ""
    );
    for t in &targets {
        out += &format!(" {:>23}", t.name());
    }
    out += &format!("\n{:<12}", "command");
    for _ in &targets {
        out += &format!(" {:>11} {:>11}", "ping_ms", "command_ms");
    }
    out.push('\n');
    let mut refusals = String::new();
    let mut freed = String::new();
    for c in commands {
        out += &format!("{c:<12}");
        for t in &targets {
            match results.iter().find(|r| r.command == c && r.target == t.name()) {
                Some(StallResult { error: Some(e), .. }) => {
                    out += &format!(" {:>23}", "refused");
                    refusals += &format!("{} {c}: -{e}\n", t.name());
                }
                Some(r) => {
                    out += &format!(" {:>11.1} {:>11.1}", r.longest_ping_ms, r.command_ms);
                    if let (Some(f), Some(p)) = (r.freed_ms, r.longest_ping_until_freed_ms) {
                        freed += &format!(
                            "{} {c}: freed {f:.1} ms after the send, the longest PING until then {p:.1} ms\n",
                            t.name()
                        );
                    }
                }
                None => out += &format!(" {:>23}", "-"),
            }
        }
        out.push('\n');
    }
    out + &freed + &refusals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(command: &'static str, target: &'static str, ping: f64, error: Option<&str>) -> StallResult {
        StallResult {
            mode: "stall",
            command,
            target,
            members: 1000,
            command_ms: 2.0 * ping,
            longest_ping_ms: ping,
            ping_p50_us: 30.0,
            pings_during: 3,
            freed_ms: (command == "del" && error.is_none()).then_some(40.0),
            longest_ping_until_freed_ms: (command == "del" && error.is_none()).then_some(7.5),
            error: error.map(str::to_string),
            redis_version: None,
        }
    }

    #[test]
    fn the_table_puts_the_targets_side_by_side_and_lists_refusals() {
        let t = table(&[
            row("del", "mojim-sync", 1.0, Some("ERR too large")),
            row("del", "redis-none", 4.5, None),
            row("lrange", "mojim-sync", 2.5, None),
            row("lrange", "redis-none", 3.0, None),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].contains("mojim-sync") && lines[1].contains("redis-none"), "{t}");
        assert!(lines[1].find("mojim-sync") < lines[1].find("redis-none"), "{t}");
        let del: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(del, ["del", "refused", "4.5", "9.0"], "{t}");
        let lrange: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(lrange, ["lrange", "2.5", "5.0", "3.0", "6.0"], "{t}");
        assert!(t.contains("mojim-sync del: -ERR too large"), "{t}");
        assert!(
            t.contains("redis-none del: freed 40.0 ms after the send, the longest PING until then 7.5 ms"),
            "{t}"
        );
    }
}
