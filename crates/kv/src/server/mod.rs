//! `mojim kv`'s driver: opens the region (repairing a batch a crash cut short), then one
//! thread runs an event loop over non-blocking sockets (epoll). Each turn:
//! 1. reads what every ready client sent;
//! 2. runs every complete request, from every client, against the store: one batch;
//! 3. seals the batch and queues its group (group commit: one round trip for the whole turn,
//!    however many clients and pipelined commands);
//! 4. writes the turn's replies once that group is acknowledged.
//!
//! Batches overlap: while one batch's group is on its way to the mirror, the next turn runs
//! (at most [`GROUPS_IN_FLIGHT`] groups unacknowledged). Replies are released in batch order,
//! and a batch without a group (reads only) is released with the batch before it, whose
//! state its reads may have seen. From a batch's first store until its group is queued,
//! copies into the mirror are held off ([`Primary::hold_copies`], FORMAT.md §11.4).
//!
//! A client whose request breaks the protocol or a limit gets `-ERR Protocol error: ...` after
//! its earlier replies, and is closed; nothing else changes.

mod blocking;
mod busy;
mod client;
mod host;
mod instant;
mod link;
mod listeners;
pub(crate) mod pubsub;
mod scrape;
mod sync;

use crate::cmd::{self, Args, Cx, Outcome, Session, Stats};
use crate::error::KvError;
use crate::options::KvOptions;
use crate::resp::{Parsed, Reply};
use crate::store::Store;
use blocking::{Waits, Written};
use client::{Client, ReadOutcome, MAX_PENDING_OUT};
use host::{AuthLog, ServerHost};
use listeners::Listeners;
use mojim::{CopyHold, Primary, Ticket};
use rustix::event::epoll;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use sync::{persist, settle, sync, wait};

/// The epoll token of [`Control::stop`] (client slots are small numbers, the listeners' the
/// largest two).
const STOP: u64 = u64::MAX - 2;
// The tokens above every client slot and arrival (`busy::ARRIVAL`): each its own.
const _: () = {
    let tokens = [listeners::LISTENER, listeners::TLS_LISTENER, STOP, scrape::WAKE];
    let mut i = 0;
    while i < tokens.len() {
        assert!(tokens[i] > busy::ARRIVAL + 1024);
        let mut j = i + 1;
        while j < tokens.len() {
            assert!(tokens[i] != tokens[j], "two epoll tokens are the same");
            j += 1;
        }
        i += 1;
    }
};
/// How often expired keys are looked for.
const EXPIRE_EVERY: Duration = Duration::from_millis(100);
/// Buckets an expiry pass looks at in one slice.
const EXPIRE_BUCKETS: u64 = 4096;
/// How long one expiry pass may look for expired keys (Redis's active expiry takes up to 25 ms
/// of each 100 ms; this one, a twentieth of that).
const EXPIRE_BUDGET: Duration = Duration::from_millis(1);
/// Buckets swept per group after a flush.
const SWEEP_BUCKETS: u64 = 1 << 16;
/// Groups queued and not yet acknowledged, at most: past this the loop waits for the oldest.
const GROUPS_IN_FLIGHT: usize = 2;

/// A batch whose replies wait for its group (or, without one, for the batches before it).
struct Batch {
    ticket: Option<Ticket>,
    /// (client slot, client id, bytes of its replies).
    replies: Vec<(usize, u64, usize)>,
}

/// How long a stopping server waits for clients to read the replies it owes them.
const STOP_WRITE_WAIT: Duration = Duration::from_secs(5);

/// What the caller of [`run_with`] controls: when the server stops, and whom it tells that it
/// serves.
#[derive(Default)]
pub struct Control {
    /// A descriptor (the read end of a pipe or socket pair) that becomes readable when the
    /// server is to stop, as a signal handler makes it: the server then stops accepting, runs
    /// the requests it has read, waits for their groups, sends their replies and closes every
    /// client ([`run_with`]).
    pub stop: Option<OwnedFd>,
    /// Called once the server serves, with the address clients connect to.
    pub ready: Option<OnReady>,
    /// A metrics listener, bound by the caller (so that an address it cannot have stops it
    /// before the region is opened): it serves `/metrics`, `/healthz` and `/readyz` once the
    /// server serves clients, and "metrics on ADDR" is printed before "serving on ADDR".
    pub metrics: Option<mojim_metrics::MetricsListener>,
    /// Cluster mode: the topology this server redirects by (MOVED, ASK) and answers CLUSTER
    /// from, kept current by the caller's etcd watcher. `None`: a standalone server.
    pub cluster: Option<std::sync::Arc<crate::cluster::view::ClusterView>>,
    /// Cluster mode: the topology's store. Once the region is open as primary (holding its
    /// lease in etcd) and before any client is served, this node takes its shard there if the
    /// topology names another node its primary (`cluster::failover`).
    pub cluster_store: Option<crate::cluster::store::TopologyStore>,
}

/// What [`Control::ready`] calls: told the address clients connect to.
pub type OnReady = Box<dyn FnOnce(&str)>;

/// Opens the primary; while its mirror cannot be reached (not started yet, or restarting), tries
/// again every second for up to `opts.mirror_wait`, saying so once, so that `mojim kv` started
/// before its mirror waits for it instead of exiting on "Connection refused".
fn open_waiting_for_mirror(lock: mojim::RegionLock, opts: &KvOptions) -> Result<Primary, KvError> {
    let deadline = Instant::now() + opts.mirror_wait;
    let mut lock = lock;
    let mut said = false;
    loop {
        match Primary::open_locked(lock, &opts.primary) {
            Ok(p) => return Ok(p),
            Err(e) if e.is_peer_unreachable() && Instant::now() < deadline => {
                if !said {
                    tracing::warn!(
                        mirror = %opts.primary.mirror,
                        error = %e,
                        wait_s = opts.mirror_wait.as_secs(),
                        "waiting for the mirror (start it with `mojim serve`; --mirror-wait sets how long to wait)"
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_secs(1));
                lock = mojim::RegionLock::acquire(&opts.primary.region_path)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs `mojim kv` until the process is stopped or the primary is fenced.
pub fn run(opts: &KvOptions) -> Result<(), KvError> {
    run_with(opts, Control::default())
}

/// Runs `mojim kv` until `control.stop` becomes readable (then returns `Ok` once every request
/// it read is answered and the region is closed), the process is stopped, or the primary is
/// fenced.
///
/// A clean stop answers every request the server had read: each one's group is acknowledged
/// (or, once the mirror is back, sent again) before its reply is written, as in any turn.
/// Requests still in a client's socket are not read; the client sees its connection closed
/// after the replies it was owed. A client blocked in BLPOP and the like is closed too. While
/// the mirror is lost with `on_mirror_loss = "block"`, the stop waits for it, as writes do.
pub fn run_with(opts: &KvOptions, control: Control) -> Result<(), KvError> {
    let max_ranges = opts.primary.limits.max_ranges;
    let path = &opts.primary.region_path;
    // Repair first, on the region file itself: the primary then only ever sends whole states.
    // (An empty region is made a store only through the primary, once it is known to be one.)
    let region_error = |source| KvError::Region { path: path.clone(), source };
    // Under the region's lock, taken before the repair: a second server (or any primary) on the
    // region is refused before it changes anything, naming the holder.
    let lock = mojim::RegionLock::acquire(path)?;
    {
        let region = mojim_region::RegionFile::open(path).map_err(mojim::Error::from)?;
        if let Some(o) = Store::repair(&region, max_ranges).map_err(region_error)? {
            if o.undone > 0 {
                tracing::warn!(records = o.undone, batch = o.batch, "undid a batch a crash cut short");
            }
        }
    }
    let primary = open_waiting_for_mirror(lock, opts)?;
    if let (Some(store), Some(view)) = (&control.cluster_store, &control.cluster) {
        let prefix = opts.primary.coordinator.as_ref().map_or("", |c| c.prefix.as_str());
        crate::cluster::failover::take_over_shard(&primary, prefix, store, view)?;
    }
    let mut store = Store::open(&primary, max_ranges).map_err(region_error)?;
    if store.opened().formatted {
        tracing::info!(region = %path.display(), "made an empty store in the region");
    }
    let resend = store.take_resend();
    sync(&primary, &resend)?;
    settle(&primary);
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| KvError::io("epoll_create")(e.into()))?;
    let listeners = Listeners::bind(opts, &ep)?;
    if let Some(fd) = &control.stop {
        epoll::add(&ep, fd.as_fd(), epoll::EventData::new_u64(STOP), epoll::EventFlags::IN)
            .map_err(|e| KvError::io("epoll_ctl")(e.into()))?;
    }
    let local = listeners.main_addr().to_string();
    let tls_local = listeners.tls_addr.clone();
    let plain = !listeners.plain_addr.is_empty();
    // In cluster mode every metric carries the shard this node belongs to (it never changes).
    let metric_labels: Vec<(String, String)> = control
        .cluster
        .as_ref()
        .and_then(|v| v.member_of())
        .map(|id| ("shard".to_owned(), id))
        .into_iter()
        .collect();
    let mut server = Server {
        primary: &primary,
        store,
        opts,
        listeners,
        listen: local.clone(),
        ep,
        tls_backlog: Vec::new(),
        clients: Vec::new(),
        free: Vec::new(),
        ready: Vec::new(),
        closing: Vec::new(),
        next_id: 1,
        started: Instant::now(),
        stats: Stats::default(),
        expire_cursor: 0,
        last_expire: Instant::now(),
        lazyfree_retry: Instant::now(),
        inflight: VecDeque::new(),
        spare: Vec::new(),
        auth: AuthLog::default(),
        reads_in_batch: false,
        settings: cmd::Settings::default(),
        watches: cmd::Watches::default(),
        kill: Default::default(),
        pause: Default::default(),
        postponed: Vec::new(),
        reset_stats: Default::default(),
        errors: Default::default(),
        telemetry: Default::default(),
        rates: Default::default(),
        run_id: run_id(),
        waits: RefCell::new(Waits::default()),
        woken: Vec::new(),
        scripts: RefCell::default(),
        arrivals: RefCell::default(),
        busy_touched: RefCell::default(),
        drain_first: false,
        pubsub: RefCell::new(pubsub::Registry::new(opts.output_limit)),
        outgoing: Vec::new(),
        scrape: None,
        batches: Default::default(),
        cluster: control.cluster.map(crate::cluster::view::CachedView::new),
    };
    // A key in flight (staged) that expires stays staged until the move drops it: the source
    // answers TRYAGAIN for it, not ASK, until the target has whatever the move wrote there.
    if server.cluster.is_some() {
        server.store.keep_expired_in(Some(crate::cluster::STAGE_DB));
    }
    server.sweep_stale()?;
    if let Some(l) = control.metrics {
        let sc = scrape::Scrape::new().map_err(KvError::io("make the metrics listener's eventfd"))?;
        epoll::add(
            &server.ep,
            sc.wake_fd().as_fd(),
            epoll::EventData::new_u64(scrape::WAKE),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )
        .map_err(|e| KvError::io("epoll_ctl (metrics eventfd)")(e.into()))?;
        let addr = l.local_addr();
        l.serve(
            scrape::pages(sc.clone(), Box::new(primary.status_source()), metric_labels),
            mojim_metrics::Limits::default(),
        )
        .map_err(KvError::io("start the metrics listener"))?
        .forever();
        server.scrape = Some(sc);
        println!("metrics on {addr}");
    }
    tracing::info!(listen = %local, tls = %tls_local, keys = server.store.keys(), "mojim kv serving");
    // The ready line comes last: "serving on" the plaintext address, or the TLS one alone.
    if plain && !tls_local.is_empty() {
        println!("serving TLS on {tls_local}");
    }
    println!("serving on {local}");
    let _ = std::io::stdout().flush();
    if let Some(ready) = control.ready {
        ready(&local);
    }
    server.run_loop()?;
    // Stopped: every client is answered and closed. The store's last changes are acknowledged;
    // closing the primary waits for anything else sent (and a copy in progress) and ends the
    // session, then the region's lock goes with it.
    drop(server);
    primary.close()?;
    tracing::info!("mojim kv stopped");
    Ok(())
}

/// A run id: 40 hex digits from the system's random source (INFO's `run_id`).
fn run_id() -> String {
    let mut b = [0u8; 20];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Server<'p> {
    primary: &'p Primary,
    store: Store<&'p Primary>,
    opts: &'p KvOptions,
    listeners: Listeners,
    /// The address INFO and SENTINEL give (the plaintext listener's, else the TLS one's).
    listen: String,
    ep: std::os::fd::OwnedFd,
    /// TLS clients whose session holds plaintext not read yet (the socket, drained, will not
    /// say so): read again once they may read.
    tls_backlog: Vec<usize>,
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
    /// When freeing removed values in the background may go on (after a pass that failed).
    lazyfree_retry: Instant,
    /// Batches whose replies are not released yet, oldest first.
    inflight: VecDeque<Batch>,
    /// Reply lists of released batches, for reuse.
    spare: Vec<Vec<(usize, u64, usize)>>,
    auth: AuthLog,
    /// A command of this batch read the keyspace (what the read barrier is for; PING, INFO or
    /// SENTINEL need none, so that a server cut off from its mirror still answers them).
    reads_in_batch: bool,
    /// What CONFIG SET changes.
    settings: cmd::Settings,
    /// What clients WATCH.
    watches: cmd::Watches,
    /// Clients CLIENT KILL asked to close.
    kill: std::cell::RefCell<Vec<u64>>,
    /// CLIENT PAUSE: until when (Unix ms) and whether reads wait too.
    pause: std::cell::Cell<(u64, bool)>,
    /// Clients whose next command waits for the pause to end.
    postponed: Vec<usize>,
    /// Set by CONFIG RESETSTAT.
    reset_stats: std::cell::Cell<bool>,
    /// Error replies sent, per code (`INFO errorstats`).
    errors: cmd::ErrorStats,
    /// Per command counts and histograms, the slow log, the latency monitor.
    telemetry: cmd::observe::Telemetry,
    /// INFO's instantaneous rates.
    rates: instant::Rates,
    /// INFO's `run_id`.
    run_id: String,
    /// Clients parked by blocking commands (`blocking.rs`).
    waits: RefCell<Waits>,
    /// Clients outside the turn's ready list that got a reply in it (woken, or timed out), or
    /// a message (`fed`).
    woken: Vec<usize>,
    /// Scripts and functions (`EVAL`, `FUNCTION`).
    scripts: RefCell<cmd::Scripts>,
    /// Clients accepted while a script ran (`busy.rs`).
    arrivals: RefCell<Vec<Client>>,
    /// Clients served while a script ran.
    busy_touched: RefCell<Vec<usize>>,
    /// A script asked to run alone: the replies in flight go first.
    drain_first: bool,
    /// Pub/sub's subscriptions and the messages not yet delivered (`pubsub.rs`).
    pubsub: RefCell<pubsub::Registry>,
    /// Messages being delivered (kept for its allocation).
    outgoing: Vec<pubsub::Message>,
    /// The metrics listener's requests for snapshots, when it has one (`scrape.rs`).
    scrape: Option<std::sync::Arc<scrape::Scrape>>,
    /// Commands per group sent, for the metrics.
    batches: scrape::BatchSizes,
    /// Cluster mode: the topology, taken again when its watcher replaced it; `None`:
    /// standalone.
    cluster: Option<crate::cluster::view::CachedView>,
}

/// [`Server::follow_topology`] on the fields it touches.
fn follow_topology(cluster: &mut Option<crate::cluster::view::CachedView>, waits: &RefCell<Waits>) {
    if cluster.as_mut().is_some_and(|c| c.refresh()) && waits.borrow().any() {
        waits.borrow_mut().recheck_all();
    }
}

impl Server<'_> {
    /// Cluster mode: takes the topology again if its watcher replaced it. Clients parked by
    /// blocking commands then run their request again, to be redirected if their keys' slot
    /// left this shard (as Redis unblocks them with -MOVED); the others park again.
    fn follow_topology(&mut self) {
        follow_topology(&mut self.cluster, &self.waits);
    }

    fn run_loop(&mut self) -> Result<(), KvError> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(1024);
        loop {
            // Between turns (and before each client runs, in run_client).
            self.follow_topology();
            // Between turns: the counters are consistent.
            if let Some(asked) = self.scrape.as_ref().and_then(|s| s.wanted()) {
                let snap = self.snapshot();
                if let Some(s) = &self.scrape {
                    s.publish(asked, snap);
                }
            }
            let (woke, deadline) = {
                let w = self.waits.borrow();
                (w.has_ready(), w.next_deadline())
            };
            let backlog = self.tls_backlog.iter().any(|&i| self.may_read(i));
            let busy =
                !self.ready.is_empty() || !self.inflight.is_empty() || woke || backlog || self.lazyfree_due();
            let mut timeout = if busy { Some(Duration::ZERO) } else { Some(EXPIRE_EVERY) };
            if let Some(d) = deadline {
                let left = Duration::from_millis(d.saturating_sub(cmd::now_ms()));
                timeout = timeout.map(|t| t.min(left));
            }
            // Commands held back by CLIENT PAUSE run once it is over.
            if !self.postponed.is_empty() {
                let left = self.pause.get().0.saturating_sub(cmd::now_ms());
                if left == 0 {
                    self.pause.set((0, false));
                    for i in std::mem::take(&mut self.postponed) {
                        self.mark_ready(i);
                    }
                    timeout = Some(Duration::ZERO);
                } else {
                    timeout = timeout.map(|t| t.min(Duration::from_millis(left)));
                }
            }
            let ts = timeout.map(|d| rustix::event::Timespec {
                tv_sec: d.as_secs() as i64,
                tv_nsec: i64::from(d.subsec_nanos()),
            });
            self.rates.sample(&self.stats);
            events.clear();
            let found = match epoll::wait(&self.ep, rustix::buffer::spare_capacity(&mut events), ts.as_ref())
            {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(KvError::io("epoll_wait")(e.into())),
            };
            let mut stop = false;
            for ev in &events {
                let token = ev.data.u64();
                if token == STOP {
                    stop = true;
                    continue;
                }
                if listeners::is_listener(token) {
                    self.accept(token);
                    continue;
                }
                // A snapshot is asked for: taken at the top of the loop.
                if token == scrape::WAKE {
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
            for i in std::mem::take(&mut self.tls_backlog) {
                if self.may_read(i) {
                    self.read_client(i);
                } else if !self.tls_backlog.contains(&i) {
                    self.tls_backlog.push(i);
                }
            }
            self.turn()?;
            // Wait for the oldest group when too many are in flight, or when nothing else is
            // there to do.
            let groups = self.inflight.iter().filter(|b| b.ticket.is_some()).count();
            if groups >= GROUPS_IN_FLIGHT || (found == 0 && self.ready.is_empty()) {
                self.release(true)?;
            }
            if stop {
                return self.finish();
            }
        }
    }

    /// The clean stop: no new client, no new request; the requests read so far run (turns go
    /// on while clients have complete requests buffered), every batch's group is waited for,
    /// the replies are written (for at most [`STOP_WRITE_WAIT`] to a client that does not
    /// read them), then every client is closed.
    fn finish(&mut self) -> Result<(), KvError> {
        self.listeners.close(&self.ep);
        let clients = self.clients.iter().flatten().count();
        tracing::info!(clients, "stopping: answering the requests read, then closing every client");
        loop {
            while !self.inflight.is_empty() {
                self.release(true)?;
            }
            if self.ready.is_empty() {
                break;
            }
            self.turn()?;
        }
        let deadline = Instant::now() + STOP_WRITE_WAIT;
        let mut events: Vec<epoll::Event> = Vec::with_capacity(64);
        loop {
            let owed: Vec<usize> = (0..self.clients.len())
                .filter(|&i| self.clients[i].as_ref().is_some_and(|c| !c.all_sent()))
                .collect();
            let left = deadline.saturating_duration_since(Instant::now());
            if owed.is_empty() || left.is_zero() {
                if !owed.is_empty() {
                    tracing::warn!(
                        clients = owed.len(),
                        "stopping: closing clients that did not read their replies"
                    );
                }
                break;
            }
            for i in owed {
                self.write_client(i);
            }
            self.close_pending();
            // Wakes when a socket can take more (or the time is up).
            let ts = rustix::event::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            events.clear();
            match epoll::wait(&self.ep, rustix::buffer::spare_capacity(&mut events), Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(KvError::io("epoll_wait")(e.into())),
            }
        }
        self.closing.extend((0..self.clients.len()).filter(|&i| self.clients[i].is_some()));
        self.close_pending();
        Ok(())
    }

    /// Whether client `i` is open and registered for input (its buffer has room, its replies
    /// are being read).
    fn may_read(&self, i: usize) -> bool {
        self.clients
            .get(i)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.interest.contains(epoll::EventFlags::IN))
    }

    /// Accepts the connections waiting on the listener of `token`.
    fn accept(&mut self, token: u64) {
        loop {
            let (stream, peer) = match self.listeners.accept(token) {
                Ok(Some(x)) => x,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            };
            self.stats.connections += 1;
            let live = self.clients.len() - self.free.len();
            if live >= self.opts.max_clients {
                self.stats.rejected_connections += 1;
                // Over TLS, before a handshake, it can only be closed.
                if let link::Link::Plain(mut s) = stream {
                    let _ = s.write_all(b"-ERR max number of clients reached\r\n");
                }
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            let mut session = Session::new(id, peer.to_string(), self.opts.password.is_none());
            session.tls = matches!(stream, link::Link::Tls(_));
            let laddr = stream.tcp().local_addr().map(|a| a.to_string()).unwrap_or_default();
            let mut c = Client::new(stream, session, self.opts.limits);
            c.laddr = laddr.into();
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
        let outcome = c.read(max_request);
        self.stats.net_input_bytes += (c.end - c.start).saturating_sub(before) as u64;
        let tls = c.stream.is_tls();
        if tls && c.stream.has_buffered_input() && !self.tls_backlog.contains(&i) {
            self.tls_backlog.push(i);
        }
        match outcome {
            ReadOutcome::Closed => self.closing.push(i),
            // New bytes (or the end): whatever was waiting may be complete now.
            ReadOutcome::Data if c.end - c.start != before || c.eof != was_eof => self.mark_ready(i),
            ReadOutcome::Data => {}
        }
        if tls {
            // The handshake's answers may wait for the socket to be writable.
            self.update_interest(i);
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
        let written = c.written;
        let ok = c.write();
        self.stats.net_output_bytes += c.written - written;
        if !ok {
            self.closing.push(i);
            return;
        }
        if c.all_sent() && c.closing {
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
        let commands = self.stats.commands;
        self.reads_in_batch = false;
        let mut seal_now = false;
        let ready = std::mem::take(&mut self.ready);
        for &i in &ready {
            if let Some(c) = self.clients[i].as_mut() {
                c.queued = false;
            }
        }
        let mut again = Vec::new();
        // Copies into the mirror wait from the batch's first store until its group is queued.
        let hold = self.primary.hold_copies();
        // Keys a turn before left ready (its batch had no room) are served first.
        seal_now |= self.serve_ready(now_ms)?;
        for (n, &i) in ready.iter().enumerate() {
            if seal_now {
                again.extend_from_slice(&ready[n..]);
                break;
            }
            loop {
                match self.run_client(i, now_ms, false)? {
                    ClientRun::Drained | ClientRun::Parked | ClientRun::Served => {
                        // A peer that closed its side with nothing complete left is done (and
                        // one parked stops waiting).
                        if let Some(c) = self.clients[i].as_mut().filter(|c| c.eof) {
                            c.closing = true;
                        }
                    }
                    ClientRun::SealFirst => {
                        again.push(i);
                        seal_now = true;
                    }
                    // Its command made keys ready: their waiters are served before it goes on.
                    ClientRun::Woke => {
                        if !self.serve_ready(now_ms)? {
                            continue;
                        }
                        again.push(i);
                        seal_now = true;
                    }
                }
                break;
            }
        }
        self.expire_waits(now_ms);
        if !seal_now && self.last_expire.elapsed() >= EXPIRE_EVERY {
            self.expire(now_ms)?;
        }
        if !seal_now {
            self.lazyfree()?;
        }
        let reads = self.reads_in_batch;
        let flushed = self.store.flushed_in_batch();
        let groups = self.stats.groups;
        let ticket = self.commit(hold, reads)?;
        if self.stats.groups > groups {
            self.batches.record(self.stats.commands.saturating_sub(commands));
        }
        self.stats.used_memory_peak = self.stats.used_memory_peak.max(self.store.used_bytes());
        // The batch's replies wait for its group. Only the clients that ran have new ones.
        let mut replies = self.spare.pop().unwrap_or_default();
        let woken = std::mem::take(&mut self.woken);
        for &i in ready.iter().chain(&woken) {
            let Some(c) = self.clients[i].as_mut() else { continue };
            c.fed = false;
            let new = c.out.len() - c.releasable - c.held;
            if new > 0 {
                c.held += new;
                replies.push((i, c.session.id, new));
            }
        }
        if ticket.is_none() && replies.is_empty() {
            self.spare.push(replies);
        } else {
            self.inflight.push_back(Batch { ticket, replies });
        }
        if flushed {
            // Everything before the flush is acknowledged before its old bucket words go.
            while !self.inflight.is_empty() {
                self.release(true)?;
            }
            self.sweep_stale()?;
        }
        // A script runs alone next: every reply before it is sent first.
        if std::mem::take(&mut self.drain_first) {
            while !self.inflight.is_empty() {
                self.release(true)?;
            }
        }
        self.release(false)?;
        for &i in ready.iter().chain(&woken) {
            if self.clients[i].as_ref().is_some_and(|c| c.closing && c.all_sent()) {
                self.closing.push(i);
            }
            self.update_interest(i);
        }
        for i in again {
            self.mark_ready(i);
        }
        self.after_busy();
        self.kill_pending();
        self.close_pending();
        Ok(())
    }

    /// Closes the clients CLIENT KILL named: what they sent and did not run is dropped.
    fn kill_pending(&mut self) {
        let ids = std::mem::take(&mut *self.kill.borrow_mut());
        for id in ids {
            let slot = self.clients.iter().position(|c| c.as_ref().is_some_and(|c| c.session.id == id));
            // It is closed once the replies it was owed before are written (a client that
            // killed itself gets its OK), as when it quits.
            if let Some(c) = slot.and_then(|i| self.clients[i].as_mut()) {
                c.closing = true;
                c.start = c.end;
                if c.all_sent() {
                    self.closing.push(slot.expect("found"));
                }
            }
        }
    }

    /// One pass of active expiry over the next buckets, in the batch, as far as the batch has
    /// room (a pass cut short goes on next turn). Nothing a client stored can make it fail:
    /// a pass that still meets a store error (other than a damaged store) is undone and logged.
    fn expire(&mut self, now_ms: u64) -> Result<(), KvError> {
        if !self.store.expiring() {
            // No key has an expiry: nothing to look for (the pass costs nothing).
            self.last_expire = Instant::now();
            return Ok(());
        }
        let (max_group, max_ranges) = (self.opts.max_group_bytes, self.opts.primary.limits.max_ranges);
        let sp = self.store.savepoint();
        let watching = self.watches.any();
        // `expired` keyspace events, when they are on and someone listens.
        let on = self.settings.notify_keyspace_events;
        let (channels, patterns, _) = self.pubsub.get_mut().counts();
        let notify = on & cmd::notify::EXPIRED != 0
            && on & (cmd::notify::KEYSPACE | cmd::notify::KEYEVENT) != 0
            && channels + patterns > 0;
        let mut expired = Vec::new();
        let mut expired_keys = 0;
        let started = Instant::now();
        let buckets = self.store.geometry().buckets;
        let mut scanned = 0;
        let pass_from = self.expire_cursor;
        // Slices of the bucket array until the pass's time is spent, the whole array was
        // looked at, or the batch has no room left for removals.
        let r = loop {
            let from = self.expire_cursor;
            let r = self.store.expire_buckets(
                from,
                EXPIRE_BUCKETS,
                now_ms,
                |s| s.batch_has_room(max_group, max_ranges),
                |db, key| {
                    expired_keys += 1;
                    if watching || notify {
                        expired.push((db, key.to_vec()));
                    }
                },
            );
            let Ok((next, _)) = r else { break r.map(|_| false) };
            let upto = next.unwrap_or(buckets);
            scanned += upto - from;
            self.expire_cursor = next.unwrap_or(0);
            if upto < (from + EXPIRE_BUCKETS).min(buckets) {
                // Cut short by the batch's room: it goes on in the next turn.
                break Ok(false);
            }
            if scanned >= buckets || started.elapsed() >= EXPIRE_BUDGET {
                break Ok(true);
            }
        };
        match r {
            Ok(done) => {
                self.stats.expired_keys += expired_keys;
                // An expired key is touched, for the clients that WATCH it, and its event raised.
                for (db, key) in expired {
                    self.watches.touch_now(db, &key);
                    if notify {
                        let registry = self.pubsub.get_mut();
                        cmd::notify::messages(on, db, "expired", &key, |channel, payload| {
                            registry.publish(channel, payload, false);
                        });
                    }
                }
                self.deliver();
                if done {
                    self.last_expire = Instant::now();
                }
            }
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => {
                self.store.rollback_to(&sp)?;
                self.expire_cursor = pass_from;
                self.last_expire = Instant::now();
                tracing::warn!(error = %e, bucket = pass_from, "an expiry pass was undone; it is tried again later");
            }
        }
        Ok(())
    }

    /// Whether values wait to be freed in the background and may be freed now.
    fn lazyfree_due(&self) -> bool {
        self.store.lazyfree_pending() > 0 && Instant::now() >= self.lazyfree_retry
    }

    /// Frees values removed in the background, as far as the batch has room
    /// ([`Store::lazyfree_room`]), after the turn's commands: each turn's group carries a
    /// share of the freeing, and a turn with no commands is all freeing. A pass that meets a
    /// store error (other than a damaged store) is undone, logged, and tried again a while
    /// later.
    fn lazyfree(&mut self) -> Result<(), KvError> {
        if !self.lazyfree_due() {
            return Ok(());
        }
        let (max_group, max_ranges) = (self.opts.max_group_bytes, self.opts.primary.limits.max_ranges);
        if !self.store.batch_has_room(max_group, max_ranges) {
            return Ok(());
        }
        let sp = self.store.savepoint();
        let r = self.store.lazyfree_step(|s, blocks| s.lazyfree_room(blocks, max_group, max_ranges));
        match r {
            Ok(freed) => self.stats.lazyfreed_objects += freed,
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => {
                self.store.rollback_to(&sp)?;
                self.lazyfree_retry = Instant::now() + EXPIRE_EVERY;
                tracing::warn!(error = %e, "a pass freeing removed values was undone; it is tried again later");
            }
        }
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
        if c.wants_write() {
            want |= epoll::EventFlags::OUT;
        }
        if want != c.interest {
            c.interest = want;
            let _ = epoll::modify(&self.ep, c.stream.as_fd(), epoll::EventData::new_u64(i as u64), want);
        }
    }

    /// Runs the complete requests of client `i` into the batch; `once`: only the first, the
    /// request a parked client waits with (`blocking.rs`). Then delivers what they published.
    fn run_client(&mut self, i: usize, now_ms: u64, once: bool) -> Result<ClientRun, KvError> {
        let r = self.run_requests(i, now_ms, once);
        self.deliver();
        r
    }

    fn run_requests(&mut self, i: usize, now_ms: u64, once: bool) -> Result<ClientRun, KvError> {
        let max_request = self.max_request();
        let mut stats = self.stats.clone();
        stats.uptime_s = self.started.elapsed().as_secs();
        stats.auth_failures = self.auth.failures.get();
        let live = self.clients.len() - self.free.len();
        let Some((me, me_id)) = self.clients[i].as_ref().map(|c| (c.conn(now_ms), c.session.id)) else {
            return Ok(ClientRun::Drained);
        };
        // The others are lent to the commands (CLIENT LIST), this one to the loop below.
        let (before, rest) = self.clients.split_at_mut(i);
        let (this, after) = rest.split_first_mut().expect("client i exists");
        stats.blocked_clients = self.waits.borrow().count() as u64;
        self.rates.fill(&mut stats);
        let host = ServerHost {
            primary: self.primary,
            opts: self.opts,
            listen: &self.listen,
            tls_listen: &self.listeners.tls_addr,
            clients: live,
            stats,
            run_id: &self.run_id,
            auth: &self.auth,
            reset: &self.reset_stats,
            others: RefCell::new([before, after]),
            me,
            kill: &self.kill,
            pause: &self.pause,
            waits: &self.waits,
            scripts: &self.scripts,
            busy: busy::BusyIo {
                ep: &self.ep,
                listeners: &self.listeners,
                me: i,
                waits: &self.waits,
                arrivals: &self.arrivals,
                touched: &self.busy_touched,
                limits: self.opts.limits,
                max_request,
                password: self.opts.password.is_some(),
            },
            pubsub: &self.pubsub,
            me_sub: pubsub::Sub { slot: i, id: me_id },
        };
        let Some(c) = this.as_mut() else { return Ok(ClientRun::Drained) };
        let parked = self.waits.borrow().is_parked(i);
        if !once && parked {
            // A parked client runs nothing until it is woken.
            return Ok(ClientRun::Parked);
        }
        // The clients are lent out here: the fields it needs, not `self`.
        follow_topology(&mut self.cluster, &self.waits);
        let mut cx = Cx {
            store: &mut self.store,
            host: &host,
            now_ms,
            max_ranges: self.opts.primary.limits.max_ranges,
            max_group_bytes: self.opts.max_group_bytes,
            output_limit: self.opts.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: self.opts.databases,
            watches: &mut self.watches,
            errors: &mut self.errors,
            telemetry: &mut self.telemetry,
            cluster: self.cluster.as_ref(),
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
                    let watching = self.waits.borrow().any();
                    let written = if watching { blocking::written(&args, session) } else { Written::Nothing };
                    let published = self.pubsub.borrow().queued();
                    let o = cmd::execute(&mut cx, session, &args, out)?;
                    self.stats.commands += 1;
                    self.reads_in_batch |= cx.read_keys;
                    if self.reset_stats.take() {
                        self.stats = Stats::default();
                        self.batches = Default::default();
                        cx.errors.reset();
                        self.auth.failures.set(0);
                    }
                    match o {
                        Outcome::Done => *start += len,
                        Outcome::Close => {
                            *start = *end;
                            c.closing = true;
                        }
                        Outcome::OverLimit => {
                            self.stats.output_limit_closes += 1;
                            tracing::info!(client = %session.addr, limit = self.opts.output_limit,
                                "closing a client whose reply would pass [kv] output_limit");
                            *start = *end;
                            c.closing = true;
                        }
                        Outcome::Retry => return Ok(ClientRun::SealFirst),
                        Outcome::Alone => {
                            self.drain_first = true;
                            return Ok(ClientRun::SealFirst);
                        }
                        // Not run: it stays in the buffer until the pause is over.
                        Outcome::Paused => {
                            self.postponed.push(i);
                            return Ok(ClientRun::Drained);
                        }
                        Outcome::Block(w) => {
                            // Nothing changed, nothing answered: the request waits, unread.
                            self.waits.borrow_mut().park(i, session.id, w, len);
                            return Ok(ClientRun::Parked);
                        }
                    }
                    // Its messages to itself follow its reply (the others' go when it is done).
                    if self.pubsub.borrow().queued() > published
                        && deliver_own(&self.pubsub, c, published, self.opts.output_limit)
                    {
                        self.stats.output_limit_closes += 1;
                        tracing::info!(client = %c.session.addr, limit = self.opts.output_limit,
                            "closing a subscriber whose messages would pass [kv] output_limit");
                        self.closing.push(i);
                        return Ok(ClientRun::Drained);
                    }
                    let woke = {
                        let mut w = self.waits.borrow_mut();
                        if once {
                            w.unpark(i);
                        }
                        w.note(written);
                        w.has_ready()
                    };
                    if once {
                        return Ok(ClientRun::Served);
                    }
                    if cx.store.flushed_in_batch() {
                        return Ok(ClientRun::SealFirst);
                    }
                    if woke {
                        return Ok(ClientRun::Woke);
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

    /// Seals the batch and queues its group (a barrier's for a batch of reads under `[kv]
    /// read_barrier`), then lets copies run again. Returns the ticket to wait for before the
    /// batch's replies go, or `None` when the batch has no group or it was sent and
    /// acknowledged here (the mirror was lost, and this waited until it was back).
    fn commit(&mut self, hold: CopyHold<'_>, reads: bool) -> Result<Option<Ticket>, KvError> {
        let primary = self.primary;
        let barrier = [self.store.barrier()];
        let group = match self.store.seal(self.opts.primary.limits.max_ranges)? {
            Some(group) => {
                self.stats.groups += 1;
                group
            }
            None if reads && self.opts.read_barrier => &barrier[..],
            None => return Ok(None),
        };
        if let Some(t) = persist(primary, group)? {
            return Ok(Some(t));
        }
        // The mirror is lost: wait until it is back, without holding copies off.
        drop(hold);
        self.resend()?;
        Ok(None)
    }

    /// Releases the replies of the oldest batches whose groups are acknowledged: when
    /// `block`, after waiting for the oldest group in flight; otherwise only those that need
    /// no wait.
    fn release(&mut self, block: bool) -> Result<(), KvError> {
        let mut may_wait = block;
        while let Some(front) = self.inflight.front() {
            if let Some(t) = front.ticket {
                if !may_wait {
                    return Ok(());
                }
                may_wait = false;
                if !wait(self.primary, t)? {
                    // Its session ended first.
                    self.resend()?;
                }
            }
            let mut b = self.inflight.pop_front().expect("a front");
            for &(i, id, bytes) in &b.replies {
                let Some(c) = self.clients[i].as_mut().filter(|c| c.session.id == id) else { continue };
                c.held -= bytes;
                c.releasable += bytes;
                self.write_client(i);
                if self.clients[i].as_ref().is_some_and(|c| c.closing && c.all_sent()) {
                    self.closing.push(i);
                }
            }
            b.replies.clear();
            self.spare.push(b.replies);
        }
        Ok(())
    }

    /// The mirror was lost with groups unacknowledged: once it is back, sends the last sealed
    /// group again (the barrier before any) and waits for the new session's copy, which
    /// carries the rest. Every batch in flight is then acknowledged.
    fn resend(&mut self) -> Result<(), KvError> {
        let last = self.store.last_group();
        let barrier = [self.store.barrier()];
        sync(self.primary, if last.is_empty() { &barrier[..] } else { last })?;
        settle(self.primary);
        for b in &mut self.inflight {
            b.ticket = None;
        }
        Ok(())
    }

    /// Zeroes bucket words of older generations, a group at a time, then records that none
    /// remain.
    fn sweep_stale(&mut self) -> Result<(), KvError> {
        if !self.store.stale() {
            return Ok(());
        }
        let mut at = 0;
        loop {
            let (next, group) = self.store.sweep(at, SWEEP_BUCKETS, self.opts.primary.limits.max_ranges)?;
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

    /// Writes what the commands published into the subscribers' output (it goes with the
    /// batch's replies). A subscriber whose output would pass `[kv] output_limit` is closed, as
    /// a client whose reply would be: a publisher can never grow the server's memory without
    /// bound, and the publisher and the other subscribers go on.
    fn deliver(&mut self) {
        if !self.pubsub.get_mut().has_queued() {
            return;
        }
        let mut msgs = std::mem::take(&mut self.outgoing);
        self.pubsub.get_mut().take_all(&mut msgs);
        let limit = self.opts.output_limit;
        for m in msgs.drain(..) {
            let i = m.to.slot;
            let Some(c) =
                self.clients.get_mut(i).and_then(|c| c.as_mut()).filter(|c| c.session.id == m.to.id)
            else {
                continue;
            };
            if c.closing {
                continue;
            }
            if m.kind == pubsub::MessageKind::Cut || c.unsent().saturating_add(m.encoded_len()) > limit {
                close_over_limit(c, &mut self.stats, limit);
                self.closing.push(i);
                continue;
            }
            m.write(c.session.proto, &mut c.out);
            if !c.fed {
                c.fed = true;
                self.woken.push(i);
            }
        }
        self.outgoing = msgs;
    }

    fn close_pending(&mut self) {
        let mut closing = std::mem::take(&mut self.closing);
        closing.sort_unstable();
        closing.dedup();
        for i in closing {
            if let Some(mut c) = self.clients[i].take() {
                c.stream.close();
                self.tls_backlog.retain(|&r| r != i);
                self.watches.unwatch(c.session.id);
                self.pubsub.get_mut().remove_client(c.session.id);
                self.waits.borrow_mut().unpark(i);
                let _ = epoll::delete(&self.ep, c.stream.as_fd());
                self.free.push(i);
                self.ready.retain(|&r| r != i);
            }
        }
    }
}

/// Writes the messages client `c` published to itself since `mark`, after its reply; true if
/// they would pass the output limit (`c` is then marked closing, its input dropped).
fn deliver_own(registry: &RefCell<pubsub::Registry>, c: &mut Client, mark: usize, limit: usize) -> bool {
    let mut mine = Vec::new();
    registry.borrow_mut().take_for(mark, c.session.id, &mut mine);
    for m in mine {
        if m.kind == pubsub::MessageKind::Cut || c.unsent().saturating_add(m.encoded_len()) > limit {
            c.closing = true;
            c.start = c.end;
            return true;
        }
        m.write(c.session.proto, &mut c.out);
    }
    false
}

/// Closes subscriber `c`, whose messages would pass the output limit: what it sent and did not
/// run is dropped, and so is what it was not sent yet.
fn close_over_limit(c: &mut Client, stats: &mut Stats, limit: usize) {
    stats.output_limit_closes += 1;
    tracing::info!(client = %c.session.addr, limit, "closing a subscriber whose messages would pass [kv] output_limit");
    c.closing = true;
    c.start = c.end;
}

enum ClientRun {
    /// Nothing complete left to run (or the client waits for its replies to be read).
    Drained,
    /// The batch must be sealed before this client's next request runs.
    SealFirst,
    /// The client is parked: its request waits for a key (`blocking.rs`).
    Parked,
    /// Its command made keys ready that clients wait on (or asked to unblock one): serve
    /// them, then run it on.
    Woke,
    /// (`once`) the parked request ran, and was answered.
    Served,
}
