//! `mojim kv`'s driver: opens the region (repairing a batch a crash cut short), then one
//! thread runs an event loop over non-blocking sockets (epoll). Each turn:
//! 1. reads what every ready client sent;
//! 2. runs every complete request, from every client, against the store: one batch;
//! 3. seals the batch and sends its group with one `gmsync` (group commit: one round trip for
//!    the whole turn, however many clients and pipelined commands);
//! 4. only then writes the turn's replies.
//!
//! A client whose request breaks the protocol or a limit gets `-ERR Protocol error: ...` after
//! its earlier replies, and is closed; nothing else changes.

mod client;
mod host;
mod sync;

use crate::cmd::{self, Args, Cx, Outcome, Session, Stats};
use crate::error::KvError;
use crate::options::KvOptions;
use crate::resp::{Parsed, Reply};
use crate::store::Store;
use client::{Client, ReadOutcome, MAX_PENDING_OUT};
use host::ServerHost;
use mojim::Primary;
use rustix::event::epoll;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use sync::{settle, sync};

const LISTENER: u64 = u64::MAX;
/// How often expired keys are looked for.
const EXPIRE_EVERY: Duration = Duration::from_millis(100);
/// Buckets looked at per expiry pass.
const EXPIRE_BUCKETS: u64 = 1024;
/// Buckets swept per group after a flush.
const SWEEP_BUCKETS: u64 = 1 << 16;

/// Runs `mojim kv` until the process is stopped or the primary is fenced.
pub fn run(opts: &KvOptions) -> Result<(), KvError> {
    let max_ranges = opts.primary.limits.max_ranges;
    let path = &opts.primary.region_path;
    // Repair first, on the region file itself: the primary then only ever sends whole states.
    // (An empty region is made a store only through the primary, once it is known to be one.)
    let region_error = |source| KvError::Region { path: path.clone(), source };
    {
        let region = mojim_region::RegionFile::open(path).map_err(mojim::Error::from)?;
        if let Some(o) = Store::repair(&region, max_ranges).map_err(region_error)? {
            if o.undone > 0 {
                tracing::warn!(records = o.undone, batch = o.batch, "undid a batch a crash cut short");
            }
        }
    }
    let primary = Primary::open(&opts.primary)?;
    let mut store = Store::open(&primary, max_ranges).map_err(region_error)?;
    if store.opened().formatted {
        tracing::info!(region = %path.display(), "made an empty store in the region");
    }
    let resend = store.take_resend();
    sync(&primary, &resend)?;
    settle(&primary);
    let listener = TcpListener::bind(&opts.listen).map_err(|e| {
        KvError::Config(format!(
            "cannot listen on [kv] listen (or --listen) {}: {e}; choose a free address (port 0: any)",
            opts.listen
        ))
    })?;
    listener.set_nonblocking(true).map_err(KvError::io("make the listener non-blocking"))?;
    let local = listener.local_addr().map_err(KvError::io("read the listener's address"))?.to_string();
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| KvError::io("epoll_create")(e.into()))?;
    epoll::add(&ep, listener.as_fd(), epoll::EventData::new_u64(LISTENER), epoll::EventFlags::IN)
        .map_err(|e| KvError::io("epoll_ctl")(e.into()))?;
    let mut server = Server {
        primary: &primary,
        store,
        opts,
        listener,
        listen: local.clone(),
        ep,
        clients: Vec::new(),
        free: Vec::new(),
        ready: Vec::new(),
        closing: Vec::new(),
        next_id: 1,
        started: Instant::now(),
        stats: Stats::default(),
        expire_cursor: 0,
        last_expire: Instant::now(),
    };
    server.sweep_stale()?;
    tracing::info!(listen = %local, keys = server.store.keys(), "mojim kv serving");
    println!("serving on {local}");
    let _ = std::io::stdout().flush();
    server.run_loop()
}

struct Server<'p> {
    primary: &'p Primary,
    store: Store<&'p Primary>,
    opts: &'p KvOptions,
    listener: TcpListener,
    listen: String,
    ep: std::os::fd::OwnedFd,
    clients: Vec<Option<Client>>,
    free: Vec<usize>,
    /// Clients with input to run (in order of arrival).
    ready: Vec<usize>,
    /// Clients to close at the end of the turn.
    closing: Vec<usize>,
    next_id: u64,
    started: Instant,
    stats: Stats,
    expire_cursor: u64,
    last_expire: Instant,
}

impl Server<'_> {
    fn run_loop(&mut self) -> Result<(), KvError> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(1024);
        loop {
            let timeout = if self.ready.is_empty() { Some(EXPIRE_EVERY) } else { Some(Duration::ZERO) };
            let ts = timeout.map(|d| rustix::event::Timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: i64::from(d.subsec_nanos()),
            });
            events.clear();
            match epoll::wait(&self.ep, rustix::buffer::spare_capacity(&mut events), ts.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(KvError::io("epoll_wait")(e.into())),
            }
            for ev in &events {
                let token = ev.data.u64();
                if token == LISTENER {
                    self.accept();
                    continue;
                }
                let i = token as usize;
                let flags = ev.flags;
                if flags.intersects(epoll::EventFlags::OUT) {
                    self.write_client(i);
                }
                if flags.intersects(epoll::EventFlags::IN | epoll::EventFlags::HUP | epoll::EventFlags::ERR) {
                    self.read_client(i);
                }
            }
            self.turn()?;
        }
    }

    fn accept(&mut self) {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            };
            self.stats.connections += 1;
            let live = self.clients.len() - self.free.len();
            if live >= self.opts.max_clients {
                let mut s = stream;
                let _ = s.write_all(b"-ERR max number of clients reached\r\n");
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let id = self.next_id;
            self.next_id += 1;
            let c = Client::new(stream, Session::new(id, peer.to_string()), self.opts.limits);
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.clients.push(None);
                    self.clients.len() - 1
                }
            };
            if epoll::add(
                &self.ep,
                c.stream.as_fd(),
                epoll::EventData::new_u64(slot as u64),
                epoll::EventFlags::IN,
            )
            .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.clients[slot] = Some(c);
        }
    }

    fn read_client(&mut self, i: usize) {
        let max_request = self.max_request();
        let Some(c) = self.clients.get_mut(i).and_then(|c| c.as_mut()) else { return };
        if c.closing {
            return;
        }
        let (before, was_eof) = (c.end - c.start, c.eof);
        match c.read(max_request) {
            ReadOutcome::Closed => self.closing.push(i),
            // New bytes (or the end): whatever was waiting may be complete now.
            ReadOutcome::Data if c.end - c.start != before || c.eof != was_eof => self.mark_ready(i),
            ReadOutcome::Data => {}
        }
    }

    /// Queues client `i` to run in the next turn (once).
    fn mark_ready(&mut self, i: usize) {
        if let Some(c) = self.clients.get_mut(i).and_then(|c| c.as_mut()) {
            if !c.queued {
                c.queued = true;
                self.ready.push(i);
            }
        }
    }

    /// The largest request the limits allow (what a client's buffer may have to hold).
    fn max_request(&self) -> usize {
        let l = self.opts.limits;
        l.max_bulk.saturating_mul(2).saturating_add(l.max_inline).min(1 << 30)
    }

    fn write_client(&mut self, i: usize) {
        let Some(c) = self.clients.get_mut(i).and_then(|c| c.as_mut()) else { return };
        if !c.write() {
            self.closing.push(i);
            return;
        }
        if c.unsent() == 0 && c.closing {
            self.closing.push(i);
        }
        // A client that was held back for its pending replies may run again.
        let resume = c.unsent() < MAX_PENDING_OUT && !c.pending_input().is_empty();
        if resume {
            self.mark_ready(i);
        }
        self.update_interest(i);
    }

    /// One turn: run what the ready clients sent (one batch), commit it, release the replies.
    fn turn(&mut self) -> Result<(), KvError> {
        let now_ms = cmd::now_ms();
        let commands_before = self.stats.commands;
        let mut seal_now = false;
        let ready = std::mem::take(&mut self.ready);
        for &i in &ready {
            if let Some(c) = self.clients[i].as_mut() {
                c.queued = false;
            }
        }
        let mut again = Vec::new();
        for (n, &i) in ready.iter().enumerate() {
            if seal_now {
                again.extend_from_slice(&ready[n..]);
                break;
            }
            match self.run_client(i, now_ms)? {
                ClientRun::Drained => {
                    // A peer that closed its side with nothing complete left is done.
                    if let Some(c) = self.clients[i].as_mut().filter(|c| c.eof) {
                        c.closing = true;
                    }
                }
                ClientRun::SealFirst => {
                    again.push(i);
                    seal_now = true;
                }
            }
        }
        if !seal_now && self.last_expire.elapsed() >= EXPIRE_EVERY {
            self.last_expire = Instant::now();
            let (next, _) = self.store.expire_buckets(self.expire_cursor, EXPIRE_BUCKETS, now_ms)?;
            self.expire_cursor = next;
        }
        let commands = self.stats.commands != commands_before;
        if !self.commit()? && commands && self.opts.read_barrier {
            sync(self.primary, &[self.store.barrier()])?;
        }
        // Replies of the batch are acknowledged (or there was nothing to acknowledge): release
        // and write them. Only the clients that ran have new ones.
        for &i in &ready {
            let Some(c) = self.clients[i].as_mut() else { continue };
            if c.releasable < c.out.len() {
                c.releasable = c.out.len();
                self.write_client(i);
            }
            if self.clients[i].as_ref().is_some_and(|c| c.closing && c.unsent() == 0) {
                self.closing.push(i);
            }
            self.update_interest(i);
        }
        for i in again {
            self.mark_ready(i);
        }
        self.close_pending();
        Ok(())
    }

    /// Registers client `i` for what it can use: input while it is open, its replies are
    /// being read and its buffer has room; writability while replies wait.
    fn update_interest(&mut self, i: usize) {
        let max_request = self.max_request();
        let Some(c) = self.clients[i].as_mut() else { return };
        let mut want = epoll::EventFlags::empty();
        if !c.closing && c.unsent() < MAX_PENDING_OUT && c.can_read(max_request) {
            want |= epoll::EventFlags::IN;
        }
        if c.sent < c.releasable {
            want |= epoll::EventFlags::OUT;
        }
        if want != c.interest {
            c.interest = want;
            let _ = epoll::modify(&self.ep, c.stream.as_fd(), epoll::EventData::new_u64(i as u64), want);
        }
    }

    /// Runs the complete requests of client `i` into the batch.
    fn run_client(&mut self, i: usize, now_ms: u64) -> Result<ClientRun, KvError> {
        let max_request = self.max_request();
        let mut stats = self.stats.clone();
        stats.uptime_s = self.started.elapsed().as_secs();
        let host = ServerHost {
            primary: self.primary,
            opts: self.opts,
            listen: &self.listen,
            clients: self.clients.len() - self.free.len(),
            stats,
        };
        let Some(c) = self.clients[i].as_mut() else { return Ok(ClientRun::Drained) };
        let mut cx = Cx {
            store: &mut self.store,
            host: &host,
            now_ms,
            max_ranges: self.opts.primary.limits.max_ranges,
            max_group_bytes: self.opts.max_group_bytes,
        };
        loop {
            if c.closing {
                return Ok(ClientRun::Drained);
            }
            if c.unsent() >= MAX_PENDING_OUT {
                // Held back until it reads its replies (write_client puts it back).
                return Ok(ClientRun::Drained);
            }
            if !cx.batch_has_room() {
                return Ok(ClientRun::SealFirst);
            }
            let can_read = c.can_read(max_request);
            let Client { parser, buf, start, end, session, out, .. } = c;
            let input = &buf[*start..*end];
            if input.is_empty() {
                return Ok(ClientRun::Drained);
            }
            let parsed = match parser.parse(input) {
                // The whole buffer holds part of one request and may not grow: it never ends.
                Ok(Parsed::Incomplete) if *start == 0 && !can_read => {
                    Err(crate::resp::ProtocolError::RequestTooLarge {
                        limit: client::buffer_cap(max_request),
                    })
                }
                other => other,
            };
            match parsed {
                Ok(Parsed::Incomplete) => return Ok(ClientRun::Drained),
                Ok(Parsed::Empty { len }) => *start += len,
                Ok(Parsed::Request { len }) => {
                    let args = Args::Parsed { parser, buf: input };
                    let o = cmd::execute(&mut cx, session, &args, out)?;
                    self.stats.commands += 1;
                    match o {
                        Outcome::Done => *start += len,
                        Outcome::Close => {
                            *start = *end;
                            c.closing = true;
                        }
                        Outcome::Retry => return Ok(ClientRun::SealFirst),
                    }
                    if cx.store.flushed_in_batch() {
                        return Ok(ClientRun::SealFirst);
                    }
                }
                Err(e) => {
                    self.stats.protocol_errors += 1;
                    tracing::info!(client = %session.addr, error = %e, "closing a client that broke the protocol");
                    Reply { buf: out, proto: session.proto }.error(&format!("ERR Protocol error: {e}"));
                    *start = *end;
                    c.closing = true;
                    return Ok(ClientRun::Drained);
                }
            }
        }
    }

    /// Seals the batch and sends its group; then, after a flush, zeroes the old bucket words.
    /// Returns whether a group was sent.
    fn commit(&mut self) -> Result<bool, KvError> {
        let flushed = self.store.flushed_in_batch();
        let mut sent = false;
        if let Some(group) = self.store.seal(self.opts.primary.limits.max_ranges)? {
            sync(self.primary, group)?;
            self.stats.groups += 1;
            sent = true;
        }
        if flushed {
            self.sweep_stale()?;
        }
        Ok(sent)
    }

    /// Zeroes bucket words of older generations, a group at a time, then records that none
    /// remain.
    fn sweep_stale(&mut self) -> Result<(), KvError> {
        if !self.store.stale() {
            return Ok(());
        }
        let mut at = 0;
        loop {
            let (next, group) = self.store.sweep(at, SWEEP_BUCKETS)?;
            if !group.is_empty() {
                sync(self.primary, &group)?;
            }
            if next == 0 {
                break;
            }
            at = next;
        }
        if let Some(group) = self.store.seal(self.opts.primary.limits.max_ranges)? {
            sync(self.primary, group)?;
        }
        Ok(())
    }

    fn close_pending(&mut self) {
        let mut closing = std::mem::take(&mut self.closing);
        closing.sort_unstable();
        closing.dedup();
        for i in closing {
            if let Some(c) = self.clients[i].take() {
                let _ = epoll::delete(&self.ep, c.stream.as_fd());
                self.free.push(i);
                self.ready.retain(|&r| r != i);
            }
        }
    }
}

enum ClientRun {
    /// Nothing complete left to run (or the client waits for its replies to be read).
    Drained,
    /// The batch must be sealed before this client's next request runs.
    SealFirst,
}
