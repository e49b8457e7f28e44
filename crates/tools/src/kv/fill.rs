//! Loading large collections fast: variadic commands (ZADD, SADD, RPUSH, HSET ...) of up to
//! [`PER_COMMAND`] elements each, or one small command per key, pipelined on one connection
//! (up to [`MAX_QUEUED_ELEMENTS`] elements or [`MAX_QUEUED_COMMANDS`] commands sent before
//! their replies are read), every reply checked, with progress on stderr about once a second.

use super::client::RespClient;
use super::resp::Value;
use mojim::error::{Error, Result};
use std::time::{Duration, Instant};

/// Elements per variadic command.
pub const PER_COMMAND: u64 = 1000;
/// Elements sent before the replies are read (16 variadic commands).
pub const MAX_QUEUED_ELEMENTS: u64 = 16 * PER_COMMAND;
/// Commands sent before their replies are read.
pub const MAX_QUEUED_COMMANDS: usize = 1000;

/// A load in progress on one connection.
pub struct Fill<'a> {
    c: &'a mut RespClient,
    target: &'a str,
    what: String,
    total: u64,
    done: u64,
    /// Elements and command names of the commands queued and not yet answered.
    queued: Vec<(u64, String)>,
    queued_elements: u64,
    started: Instant,
    shown: Instant,
}

impl<'a> Fill<'a> {
    /// A load of `total` elements, described as `what` (`1000000 members into bench:zset`), into
    /// `target` over `c`.
    pub fn new(c: &'a mut RespClient, target: &'a str, what: String, total: u64) -> Fill<'a> {
        let now = Instant::now();
        Fill {
            c,
            target,
            what,
            total,
            done: 0,
            queued: Vec::new(),
            queued_elements: 0,
            started: now,
            shown: now,
        }
    }

    /// Queues a command carrying `elements` elements; sends the queue when it is full.
    pub fn push(&mut self, args: &[&[u8]], elements: u64) -> Result<()> {
        self.c.queue(args);
        self.queued.push((elements, String::from_utf8_lossy(args[0]).into_owned()));
        self.queued_elements += elements;
        if self.queued.len() >= MAX_QUEUED_COMMANDS || self.queued_elements >= MAX_QUEUED_ELEMENTS {
            self.exchange()?;
        }
        Ok(())
    }

    /// Sends what is queued and checks every reply.
    fn exchange(&mut self) -> Result<()> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let replies = self.c.exec()?;
        for (v, (elements, name)) in replies.iter().zip(self.queued.drain(..)) {
            if let Value::Error(e) = v {
                return Err(Error::Io {
                    op: format!("load {} into {} ({})", self.what, self.target, self.c.addr()),
                    source: std::io::Error::other(format!("{} answered {name} with -{e}", self.target)),
                });
            }
            self.done += elements;
        }
        self.queued_elements = 0;
        if self.shown.elapsed() >= Duration::from_secs(1) {
            self.shown = Instant::now();
            let secs = self.started.elapsed().as_secs_f64();
            eprintln!(
                "kv: {}: loading {}: {} of {} ({:.0} %, {:.0} per second)",
                self.target,
                self.what,
                self.done,
                self.total,
                100.0 * self.done as f64 / self.total.max(1) as f64,
                self.done as f64 / secs
            );
        }
        Ok(())
    }

    /// Sends the rest and says how long the load took.
    pub fn finish(mut self) -> Result<()> {
        self.exchange()?;
        let secs = self.started.elapsed().as_secs_f64();
        eprintln!(
            "kv: {}: loaded {} in {secs:.1} s ({:.0} per second)",
            self.target,
            self.what,
            self.done as f64 / secs.max(1e-9)
        );
        Ok(())
    }
}

/// Loads the members numbered `range` ([`super::collections::member`]) into `key` with `cmd`
/// (SADD, RPUSH, or with `score` ZADD, each member after its score), [`PER_COMMAND`] to a
/// command, pipelined, into `target` over `c`.
pub fn variadic(
    c: &mut RespClient,
    target: &str,
    cmd: &'static [u8],
    key: &[u8],
    range: std::ops::Range<u64>,
    mut score: Option<&mut dyn FnMut(u64) -> u64>,
) -> Result<()> {
    use super::collections::member;
    let what = format!("{} elements into {}", range.end - range.start, String::from_utf8_lossy(key));
    let mut fill = Fill::new(c, target, what, range.end - range.start);
    let mut first = range.start;
    while first < range.end {
        let n = (range.end - first).min(PER_COMMAND);
        let members: Vec<[u8; super::collections::MEMBER_BYTES]> = (first..first + n).map(member).collect();
        let scores: Vec<String> = match score.as_mut() {
            Some(f) => (first..first + n).map(|m| f(m).to_string()).collect(),
            None => Vec::new(),
        };
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * n as usize);
        args.push(cmd);
        args.push(key);
        for (i, m) in members.iter().enumerate() {
            if let Some(s) = scores.get(i) {
                args.push(s.as_bytes());
            }
            args.push(m);
        }
        fill.push(&args, n)?;
        first += n;
    }
    fill.finish()
}
