//! The Redis backend: recoverable memory's pages are keys of a Redis server, and a commit
//! switches them in with one transaction (the report's §2.4, with Redis where it had
//! RAMCloud). The byte-level description is docs/FORMAT.md §10.4.
//!
//! # Keys
//!
//! Every key starts with a prefix `P` ([`RedisOptions::key`], `[rvm] redis_key`). Numbers are
//! decimal, without leading zeros.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:p:<page>:<version>` | string, 4100 bytes | page `<page>` (backend bytes `page × 4096 ..`) as commit `<version>` wrote it, then its check (`page.rs`) |
//! | `P:master` | hash | the **master entry**: field `<page>` → `<version>` for every page the memory holds; `seq` → commits made; `checked` → 1 (every page has its check); `capacity` → the memory's bytes at the last commit |
//!
//! The memory's state is the master entry and the keys it names: page `p` is the value of
//! `P:p:<p>:<master[p]>`, and a page the master does not name reads as zeros. A key the master
//! does not name is garbage.
//!
//! # A commit: shadow pages, then one switch
//!
//! Commit `v` (the master's `seq` + 1):
//! 1. `SET P:p:<page>:v` for every page of the commit, pipelined, each reply checked. These
//!    are shadow pages: the master names none of them, so no recovery reads them yet.
//! 2. `MULTI`, `HSET P:master <page> v …` (in chunks), `HDEL P:master <page> …` for the pages
//!    freed since the last commit, `HSET P:master seq v capacity <bytes>`, `EXEC`. Redis runs
//!    the queued commands as one step: the master names every page of the commit and the new
//!    `seq`, or none of it (a connection lost before `EXEC` discards the queue).
//! 3. `DEL` of the versions the switch superseded, and of the freed pages' keys, pipelined;
//!    their replies are read (and checked) before the next command.
//!
//! # Connecting, recovery and garbage
//!
//! Connecting authenticates first when a password is set (`AUTH`; `[rvm] redis_password` or
//! `MOJIM_REDIS_PASSWORD`), and otherwise checks that the server wants none (`PING` answered
//! `-NOAUTH` is an error naming both). With `[rvm] redis_tls` it speaks TLS (`tls.rs`), with a
//! client certificate when one is set.
//! Then it reads the master entry (`HGETALL`): that is recovery, and an absent master is
//! new memory. Every page read later is verified against its check, and a page that fails is
//! an error naming it: nothing of a page changed in the server is used. A memory an older
//! build wrote (no checks) is given them by its first connection (`upgrade.rs`). Then it collects garbage: `SCAN … MATCH P:p:*` and `DEL` of every key of the
//! form `P:p:<page>:<version>` whose version is not the master's for its page (a crash before
//! `EXEC` leaves the shadow pages of a commit that never happened; a crash after it, the
//! superseded versions not yet deleted). Keys under the prefix of any other form are left
//! alone.
//!
//! After a lost connection the next command connects again and reads the master again: it
//! must be at this process's last commit, or one past it when that commit's `EXEC` was sent
//! but not answered (then it landed). Anything else means the server lost committed state (a
//! restart without persistence, an older snapshot) or another process uses the same prefix:
//! the store refuses every command from then on, rather than commit on top of a hole, until
//! the memory is opened again.
//!
//! # Durability and sharing
//!
//! A commit is as durable as the server makes an `EXEC`: with `appendonly yes` and
//! `appendfsync always` it is on the server's disk when the commit returns; without
//! persistence it lasts as long as the server process. Keys must not be evicted
//! (`maxmemory-policy noeviction`, the default): a page the master names but the server no
//! longer holds is an error on reading. One process at a time may use a prefix.

mod commit;
mod keys;
mod options;
mod page;
mod read;
mod recover;
pub mod resp;
mod tls;
mod upgrade;

pub use options::{RedisOptions, RedisPassword, MAX_KEY_LEN, REDIS_PASSWORD_ENV};
pub use tls::RedisTls;

use crate::error::{Result, RvmError};
use crate::layout::PAGE;
use crate::rmem::Rmem;
use mojim_region::Arena;
use resp::{Conn, Reply};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Display;

/// Pages per `HSET`, `HDEL`, `MGET` or `DEL` command.
const CHUNK: u64 = 512;
/// Keys asked for per `SCAN` step.
const SCAN_COUNT: &[u8] = b"1000";
/// The master's field that says every page carries a check (value 1).
const CHECKED_FIELD: &[u8] = b"checked";

/// A Redis server as recoverable memory's store: shadow pages and one master entry.
pub struct RedisRmem {
    opts: RedisOptions,
    master_key: Vec<u8>,
    conn: Option<Conn>,
    /// Whether the master was read once: a later connection must find it where this process
    /// left it.
    recovered: bool,
    /// The master entry as of the last commit: page → version.
    master: HashMap<u64, u64>,
    /// Commits made.
    seq: u64,
    /// Whether the master says every page carries a check (a memory an older build wrote does
    /// not, until the first connection adds them).
    checked: bool,
    /// Pages freed since the last commit.
    freed: BTreeSet<u64>,
    /// Set while an `EXEC` is sent and not answered.
    in_doubt: bool,
    /// Replies to `DEL`s of superseded pages not read yet.
    owed: usize,
    /// Why the store refuses every command, once it found committed state lost.
    broken: Option<String>,
    /// The last error, for status.
    last_error: Option<String>,
    /// Scratch: a key or number being formatted.
    scratch: Vec<u8>,
    /// Scratch: one page read.
    page: Vec<u8>,
    /// Scratch: `(page, version)` keys to delete after the commit at hand.
    superseded: Vec<(u64, u64)>,
}

fn fail(addr: &str, what: impl Display, why: impl Display) -> RvmError {
    RvmError::Redis(format!("redis at {addr}: {what}: {why}"))
}

impl RedisRmem {
    /// Connects to the server and reads the master entry (recovery; none means new memory),
    /// then deletes the keys under the prefix it does not name (garbage of interrupted
    /// commits). A master of another capacity is not refused here: the RVM layer compares
    /// the size with its own header and names both.
    pub fn connect(opts: &RedisOptions) -> Result<RedisRmem> {
        opts.check()?;
        let mut me = RedisRmem {
            master_key: format!("{}:master", opts.key).into_bytes(),
            opts: opts.clone(),
            conn: None,
            recovered: false,
            master: HashMap::new(),
            seq: 0,
            checked: false,
            freed: BTreeSet::new(),
            in_doubt: false,
            owed: 0,
            broken: None,
            last_error: None,
            scratch: Vec::new(),
            page: vec![0; page::VALUE_LEN],
            superseded: Vec::new(),
        };
        me.connected()?;
        Ok(me)
    }

    /// Commits made, as the master entry counts them.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn fail(&self, what: impl Display, why: impl Display) -> RvmError {
        fail(&self.opts.addr, what, why)
    }

    /// Makes sure a connection is up, connecting (and checking what the server holds) if not.
    fn connected(&mut self) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(RvmError::Redis(why.clone()));
        }
        if self.conn.is_some() {
            return Ok(());
        }
        let r = self.reconnect();
        if let Err(e) = &r {
            self.last_error = Some(e.to_string());
        }
        r
    }

    /// Proves the password to the server (`AUTH`), or, without one, checks that the server
    /// wants none: either error names the setting.
    fn authenticate(&self, conn: &mut Conn) -> Result<()> {
        let addr = &self.opts.addr;
        match &self.opts.password {
            Some(pw) => match conn.call(&[b"AUTH", pw.value.as_bytes()]) {
                Ok(Reply::Status(s)) if s == "OK" => Ok(()),
                Ok(Reply::Error(e)) => Err(RvmError::Config(format!(
                    "redis at {addr} refused the password from {} (-{e}): set the server's password \
                     (its requirepass) there, or remove it if the server wants none",
                    pw.from
                ))),
                Ok(other) => Err(fail(addr, "AUTH", format!("protocol violation: AUTH answered {other}"))),
                Err(e) => Err(fail(addr, "AUTH", e)),
            },
            None => match conn.call(&[b"PING"]) {
                Ok(Reply::Error(e)) if e.starts_with("NOAUTH") => Err(RvmError::Config(format!(
                    "redis at {addr} requires a password (-{e}): set [rvm] redis_password in the \
                     configuration, or the {REDIS_PASSWORD_ENV} environment variable"
                ))),
                Ok(_) => Ok(()),
                Err(e) => Err(fail(addr, "PING", e)),
            },
        }
    }

    fn reconnect(&mut self) -> Result<()> {
        let addr = self.opts.addr.clone();
        let mut conn = Conn::connect_tls(&addr, self.opts.timeout, self.opts.tls.as_ref())
            .map_err(|e| fail(&addr, "cannot connect", e))?;
        self.authenticate(&mut conn)?;
        conn.wait_loaded(self.opts.timeout).map_err(|e| fail(&addr, "waiting for it to load its data", e))?;
        let found = self.read_master(&mut conn)?;
        if self.recovered {
            let same = found.seq == self.seq && found.pages == self.master;
            let landed = self.in_doubt && found.seq == self.seq + 1;
            if !same && !landed {
                let why = format!(
                    "redis at {addr}: the master entry {} is at commit {} ({} pages), but this process \
                     last committed {} ({} pages): the server lost committed state (a restart without \
                     persistence, or from an older snapshot) or another process uses [rvm] redis_key = \
                     {:?}; nothing more is written: open the memory again",
                    String::from_utf8_lossy(&self.master_key),
                    found.seq,
                    found.pages.len(),
                    self.seq,
                    self.master.len(),
                    self.opts.key
                );
                self.broken = Some(why.clone());
                return Err(RvmError::Redis(why));
            }
            if landed {
                tracing::info!(seq = found.seq, "the commit whose EXEC went unanswered landed");
            }
        }
        self.master = found.pages;
        self.seq = found.seq;
        self.checked = found.checked;
        self.in_doubt = false;
        self.owed = 0;
        self.recovered = true;
        let removed = self.collect_garbage(&mut conn)?;
        if !self.checked && !self.master.is_empty() {
            self.add_checks(&mut conn)?;
        }
        tracing::info!(
            server = %addr,
            seq = self.seq,
            pages = self.master.len(),
            removed,
            "redis: read the master entry, removed garbage keys"
        );
        self.conn = Some(conn);
        Ok(())
    }

    /// Runs `f` on the connection (made first if need be), after reading the replies owed to
    /// the last commit's deletions. On error the connection is dropped: its replies are out of
    /// step, and the next command connects again.
    fn run<T>(&mut self, f: impl FnOnce(&mut Self, &mut Conn) -> Result<T>) -> Result<T> {
        self.connected()?;
        let mut conn = self.conn.take().expect("connected() leaves a connection");
        let r = self.drain(&mut conn).and_then(|()| f(self, &mut conn));
        match &r {
            Ok(_) => self.conn = Some(conn),
            Err(e) => self.last_error = Some(e.to_string()),
        }
        r
    }
}

impl Rmem for RedisRmem {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn capacity(&self) -> u64 {
        self.opts.capacity
    }

    fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        self.run(|me, conn| me.read_pages(conn, offset, out))
    }

    fn allocate(&mut self, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.opts.capacity) {
            return Err(RvmError::Full {
                wanted: len,
                why: format!("the redis backend holds {} bytes ([rvm] redis_capacity)", self.opts.capacity),
            });
        }
        Ok(())
    }

    fn free(&mut self, offset: u64, len: u64) {
        self.freed.extend(offset / PAGE..(offset + len) / PAGE);
    }

    fn check(&mut self, runs: &[(u64, u64)]) -> Result<()> {
        let bytes: u64 = runs.iter().map(|r| r.1).sum();
        let end = runs.last().map_or(0, |r| r.0 + r.1);
        let cap = self.opts.capacity;
        if bytes > cap || end > cap {
            return Err(RvmError::TooLarge(format!(
                "a commit of {} pages ({bytes} bytes, up to backend offset {end}) does not fit the redis \
                 backend's {cap} bytes: a commit writes each page of the memory at most once; raise [rvm] \
                 redis_capacity",
                bytes / PAGE
            )));
        }
        Ok(())
    }

    fn commit(&mut self, runs: &[(u64, u64)], memory: &Arena) -> Result<()> {
        for &(o, l) in runs {
            assert!(
                o.is_multiple_of(PAGE) && l.is_multiple_of(PAGE) && o + l <= self.opts.capacity,
                "a commit of ({o}, {l}): not whole pages inside the memory; check() refuses these"
            );
        }
        self.run(|me, conn| me.write_and_switch(conn, runs, memory))?;
        self.delete_superseded();
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        if let Some(mut conn) = self.conn.take() {
            self.drain(&mut conn)?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let state = match (&self.broken, &self.conn, &self.last_error) {
            (Some(why), _, _) => format!("refusing commands: {why}"),
            (None, Some(_), _) => "connected".to_string(),
            (None, None, Some(e)) => format!("disconnected: {e}"),
            (None, None, None) => "disconnected".to_string(),
        };
        format!(
            "redis at {}, keys {}:*, commit {}, {} pages stored ({state})",
            self.opts.addr,
            self.opts.key,
            self.seq,
            self.master.len()
        )
    }
}
