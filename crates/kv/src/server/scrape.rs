//! `mojim kv`'s metrics listener (`[kv] metrics_listen`, docs/METRICS.md): `/metrics`,
//! `/healthz` and `/readyz` from the counters INFO shows.
//!
//! The counters belong to the command thread, which keeps them without locks. A request asks
//! that thread for a snapshot: it bumps [`Scrape`]'s request count and wakes the event loop
//! (an eventfd in its epoll set); between two turns the loop copies the counters into a
//! [`Snapshot`] (a few hundred bytes and one row per command called) and publishes it. The
//! page is written from the snapshot on the listener's thread. The commands never wait for a
//! scrape, and the snapshot is consistent: it is taken between turns.
//!
//! While the command thread cannot answer (a long script, or writes waiting for a lost
//! mirror), a scrape gives the last snapshot after [`FRESH_WAIT`]. The replication state and
//! `/readyz` are read from the primary's status at the request (`Primary::status_source`), on
//! the listener's thread: they are fresh even then.

use crate::cmd::observe::CommandRow;
use crate::cmd::Replication;
use mojim::{Mode, PrimaryStatus};
use mojim_metrics::{Exposition, Kind, Pages};
use rustix::event::{eventfd, EventfdFlags};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The epoll token of the wake-up eventfd (below the listeners' and the stop descriptor's,
/// above any client slot and any arrival's token, `busy.rs`; `mod.rs` checks they differ).
pub const WAKE: u64 = u64::MAX - 3;

/// How long a request waits for the command thread's snapshot.
pub const FRESH_WAIT: Duration = Duration::from_secs(2);

/// The latency histograms' bounds: durations below 2^k ns, for each k (1.02 µs to 8.6 s).
pub const POWERS: std::ops::RangeInclusive<u32> = 10..=33;

/// The commands per group histogram's bounds: at most 2^k commands, for each k up to 2^12.
pub const BATCH_POWERS: usize = 13;

/// What the command thread publishes.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub commands: Vec<CommandRow>,
    pub commands_processed: u64,
    pub error_replies: u64,
    pub clients: usize,
    pub max_clients: usize,
    pub blocked_clients: u64,
    pub connections: u64,
    pub rejected_connections: u64,
    /// Per database: (keys, keys with a time to live).
    pub dbs: Vec<(u64, u64)>,
    pub expired_keys: u64,
    pub used_bytes: u64,
    pub used_peak_bytes: u64,
    pub heap_bytes: u64,
    pub region_bytes: u64,
    pub groups: u64,
    pub batches: BatchSizes,
    pub auth_failures: u64,
    pub protocol_errors: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub uptime_s: u64,
}

/// Commands per group: how many groups had at most 2^k commands, for each k, their sum and
/// count (a fixed array: recording a group allocates nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchSizes {
    pub below: [u64; BATCH_POWERS],
    pub sum: u64,
    pub count: u64,
}

impl BatchSizes {
    /// Counts a group of `commands` commands.
    pub fn record(&mut self, commands: u64) {
        let k = if commands <= 1 { 0 } else { (64 - (commands - 1).leading_zeros()) as usize };
        for b in &mut self.below[k.min(BATCH_POWERS)..] {
            *b += 1;
        }
        self.sum += commands;
        self.count += 1;
    }
}

/// Shared by the command thread and the listener's threads.
pub struct Scrape {
    /// Snapshots asked for (each request adds one).
    requested: AtomicU64,
    /// The requests the last snapshot answers (the command thread's copy of `answers`, read
    /// without the lock).
    answered: AtomicU64,
    wake: OwnedFd,
    published: Mutex<Published>,
    cond: Condvar,
}

#[derive(Default)]
struct Published {
    /// The requests the snapshot answers (`requested` when the thread began it).
    answers: u64,
    snapshot: Option<Arc<Snapshot>>,
}

impl Scrape {
    pub fn new() -> std::io::Result<Arc<Scrape>> {
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Arc::new(Scrape {
            requested: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            wake,
            published: Mutex::new(Published::default()),
            cond: Condvar::new(),
        }))
    }

    /// The eventfd the command thread's epoll watches.
    pub fn wake_fd(&self) -> &OwnedFd {
        &self.wake
    }

    /// For the command thread: whether a snapshot is asked for, and which requests it answers
    /// (drains the eventfd).
    pub fn wanted(&self) -> Option<u64> {
        let asked = self.requested.load(Ordering::Acquire);
        if asked == self.answered.load(Ordering::Relaxed) {
            return None;
        }
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.wake, &mut b);
        Some(asked)
    }

    /// For the command thread: publishes `s`, taken after request `answers` was made.
    pub fn publish(&self, answers: u64, s: Snapshot) {
        let mut p = self.published.lock().unwrap_or_else(|p| p.into_inner());
        p.answers = p.answers.max(answers);
        self.answered.store(p.answers, Ordering::Relaxed);
        p.snapshot = Some(Arc::new(s));
        self.cond.notify_all();
    }

    /// A snapshot taken after this call began (`true`), or after [`FRESH_WAIT`] the last one
    /// taken (`false`), if any.
    pub fn snapshot(&self) -> (Option<Arc<Snapshot>>, bool) {
        let mine = self.requested.fetch_add(1, Ordering::AcqRel) + 1;
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        let p = self.published.lock().unwrap_or_else(|p| p.into_inner());
        let (p, timeout) = self
            .cond
            .wait_timeout_while(p, FRESH_WAIT, |p| p.answers < mine)
            .unwrap_or_else(|p| p.into_inner());
        (p.snapshot.clone(), !timeout.timed_out() || p.answers >= mine)
    }
}

impl super::Server<'_> {
    /// The counters now, for the metrics listener (on the command thread, between turns).
    pub(super) fn snapshot(&self) -> Snapshot {
        let g = self.store.geometry();
        // Cluster mode has database 0 alone (a slot move's stage is not a client's database).
        let databases =
            if self.cluster.is_some() { 1 } else { self.opts.databases.min(self.store.databases()).max(1) };
        Snapshot {
            commands: self.telemetry.commands.rows(POWERS),
            commands_processed: self.stats.commands,
            error_replies: self.errors.total(),
            clients: self.clients.len() - self.free.len(),
            max_clients: self.opts.max_clients,
            blocked_clients: self.waits.borrow().count() as u64,
            connections: self.stats.connections,
            rejected_connections: self.stats.rejected_connections,
            dbs: (0..databases).map(|db| (self.store.db_keys(db), self.store.db_expires(db))).collect(),
            expired_keys: self.stats.expired_keys,
            used_bytes: self.store.used_bytes(),
            used_peak_bytes: self.stats.used_memory_peak.max(self.store.used_bytes()),
            heap_bytes: g.heap_end - g.heap_off,
            region_bytes: g.size,
            groups: self.stats.groups,
            batches: self.batches,
            auth_failures: self.auth.failures.get(),
            protocol_errors: self.stats.protocol_errors,
            net_input_bytes: self.stats.net_input_bytes,
            net_output_bytes: self.stats.net_output_bytes,
            uptime_s: self.started.elapsed().as_secs(),
        }
    }
}

/// Reads the primary's status from the listener's threads (`Primary::status_source`).
pub type StatusSource = Box<dyn Fn() -> Option<(PrimaryStatus, Mode)> + Send + Sync>;

/// The replication state and why it takes no writes (`None`: it does), from the primary's
/// status read now: fresh even while the command thread waits for a lost mirror.
fn standing(status: &StatusSource) -> (Replication, Option<String>) {
    match status() {
        Some((st, mode)) => (super::host::replication(&st, mode), super::host::not_serving(&st, mode)),
        None => (Replication::default(), Some("mojim kv has stopped".into())),
    }
}

/// The listener's pages, every sample carrying the labels `constant` (in cluster mode the
/// node's `shard`; none outside it).
pub fn pages(scrape: Arc<Scrape>, status: StatusSource, constant: Vec<(String, String)>) -> Pages {
    let status = Arc::new(status);
    let (m, r) = (status.clone(), status);
    Pages {
        metrics: Box::new(move || {
            let (s, fresh) = scrape.snapshot();
            let (rep, not_serving) = standing(&m);
            render(s.as_deref(), fresh, &rep, not_serving.is_none(), &constant)
        }),
        // The process serves until it stops: the loop's end ends it.
        health: Box::new(|| Ok(())),
        // Not from the command thread, which waits while a lost mirror holds writes back.
        ready: Box::new(move || standing(&r).1.map_or(Ok(()), Err)),
    }
}

/// A page being written whose every sample carries the same labels first (cluster mode's
/// `shard`: a node never changes shard, so they are set once at start).
struct Page<'c> {
    e: Exposition,
    constant: &'c [(String, String)],
}

impl Page<'_> {
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        self.e.family(name, kind, help);
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<mojim_metrics::Value>) {
        self.e.sample(&with_constant(self.constant, labels), value);
    }

    fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<mojim_metrics::Value>) {
        self.family(name, kind, help);
        self.sample(&[], value);
    }

    fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        buckets: impl IntoIterator<Item = (f64, u64)>,
        sum: impl Into<mojim_metrics::Value>,
        count: u64,
    ) {
        self.e.histogram(&with_constant(self.constant, labels), buckets, sum, count);
    }

    fn finish(self) -> String {
        self.e.finish()
    }
}

/// `constant`'s labels, then `labels`.
fn with_constant<'a>(
    constant: &'a [(String, String)],
    labels: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut all: Vec<(&str, &str)> = constant.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.extend_from_slice(labels);
    all
}

/// The `/metrics` page: the counters `s` (none before the first snapshot), whether they are
/// fresh, and the replication state and whether it takes writes, read now; every sample
/// carries the labels `constant` first.
pub fn render(
    s: Option<&Snapshot>,
    fresh: bool,
    rep: &Replication,
    serving: bool,
    constant: &[(String, String)],
) -> String {
    use Kind::{Counter, Gauge, Histogram};
    let mut e = Page { e: Exposition::new(), constant };
    e.single(
        "mojim_kv_snapshot_fresh",
        Gauge,
        "1 when this page was taken for this request; 0 when the command thread was busy and it \
         is the last one taken.",
        fresh,
    );
    e.family("mojim_kv_role", Gauge, "This server's role, 1 (INFO role; mojim kv is always the master).");
    e.sample(&[("role", "master")], 1u64);
    e.family(
        "mojim_kv_mirror_state",
        Gauge,
        "1 for the mirror's state (INFO mirror_state): online, lost, degraded (serving without it), none (unreplicated).",
    );
    for state in ["online", "lost", "degraded", "none"] {
        e.sample(&[("state", state), ("mirror", &rep.mirror), ("mode", &rep.mode)], rep.state == state);
    }
    e.single(
        "mojim_kv_mirror_acked_sequence",
        Gauge,
        "Sequence number of the last group the mirror acknowledged (INFO mirror_acked_seq, master_repl_offset).",
        rep.acked_seq,
    );
    e.single(
        "mojim_kv_mirror_lag_groups",
        Gauge,
        "Groups sent and not yet acknowledged (INFO mirror_lag_groups).",
        rep.lag_groups,
    );
    e.single("mojim_kv_epoch", Gauge, "The primary's epoch (INFO epoch).", rep.epoch);
    e.single(
        "mojim_kv_serving",
        Gauge,
        "1 when it takes writes (what /readyz says; SENTINEL reports it down otherwise).",
        serving,
    );
    let Some(s) = s else { return e.finish() };
    e.family("mojim_kv_commands_total", Counter, "Calls of each command that ran (INFO commandstats calls).");
    for c in &s.commands {
        e.sample(&[("cmd", c.name)], c.calls);
    }
    e.family(
        "mojim_kv_command_duration_seconds_total",
        Counter,
        "Time spent running each command (INFO commandstats usec).",
    );
    for c in &s.commands {
        e.sample(&[("cmd", c.name)], c.ns as f64 / 1e9);
    }
    e.family(
        "mojim_kv_command_errors_total",
        Counter,
        "Calls of each command refused or answered with an error (INFO commandstats rejected_calls + failed_calls).",
    );
    for c in &s.commands {
        e.sample(&[("cmd", c.name)], c.errors);
    }
    e.family(
        "mojim_kv_command_duration_seconds",
        Histogram,
        "Latency of each command (INFO latencystats, LATENCY HISTOGRAM); le is 2^k - 1 ns.",
    );
    for c in &s.commands {
        let buckets = POWERS.zip(&c.below).map(|(k, n)| (((1u64 << k) - 1) as f64 / 1e9, *n));
        e.histogram(&[("cmd", c.name)], buckets, c.ns as f64 / 1e9, c.calls);
    }
    e.single(
        "mojim_kv_commands_processed_total",
        Counter,
        "Commands run, of every kind (INFO total_commands_processed).",
        s.commands_processed,
    );
    e.single(
        "mojim_kv_error_replies_total",
        Counter,
        "Error replies sent (INFO total_error_replies).",
        s.error_replies,
    );
    e.single("mojim_kv_connected_clients", Gauge, "Clients connected (INFO connected_clients).", s.clients);
    e.single(
        "mojim_kv_max_clients",
        Gauge,
        "Clients served at once, at most ([kv] max_clients).",
        s.max_clients,
    );
    e.single(
        "mojim_kv_blocked_clients",
        Gauge,
        "Clients waiting in a blocking command (INFO blocked_clients).",
        s.blocked_clients,
    );
    e.single(
        "mojim_kv_connections_received_total",
        Counter,
        "Connections accepted (INFO total_connections_received).",
        s.connections,
    );
    e.single(
        "mojim_kv_connections_rejected_total",
        Counter,
        "Connections closed at once because max_clients were connected (INFO rejected_connections).",
        s.rejected_connections,
    );
    e.family("mojim_kv_keys", Gauge, "Keys in each database (DBSIZE; INFO keyspace keys).");
    for (db, (keys, _)) in s.dbs.iter().enumerate() {
        e.sample(&[("db", &db.to_string())], *keys);
    }
    e.family(
        "mojim_kv_expiring_keys",
        Gauge,
        "Keys with a time to live in each database (INFO keyspace expires).",
    );
    for (db, (_, expires)) in s.dbs.iter().enumerate() {
        e.sample(&[("db", &db.to_string())], *expires);
    }
    e.single(
        "mojim_kv_expired_keys_total",
        Counter,
        "Keys removed because they expired (INFO expired_keys).",
        s.expired_keys,
    );
    e.single(
        "mojim_kv_region_used_bytes",
        Gauge,
        "Bytes of the region's heap holding entries (INFO used_memory).",
        s.used_bytes,
    );
    e.single(
        "mojim_kv_region_free_bytes",
        Gauge,
        "Bytes of the region's heap not holding entries (INFO maxmemory - used_memory).",
        s.heap_bytes.saturating_sub(s.used_bytes),
    );
    e.single(
        "mojim_kv_region_heap_bytes",
        Gauge,
        "Bytes of the region's heap (INFO maxmemory).",
        s.heap_bytes,
    );
    e.single("mojim_kv_region_size_bytes", Gauge, "Bytes of the region (INFO region_size).", s.region_bytes);
    e.single(
        "mojim_kv_region_used_peak_bytes",
        Gauge,
        "The most heap bytes in use at the end of a turn (INFO used_memory_peak).",
        s.used_peak_bytes,
    );
    e.single(
        "mojim_kv_groups_sent_total",
        Counter,
        "Groups sent to the mirror (INFO mojim_groups_sent).",
        s.groups,
    );
    e.family(
        "mojim_kv_group_commands",
        Histogram,
        "Commands run in the turn of each group sent (group commit: one group a turn), reads included.",
    );
    let b = &s.batches;
    e.histogram(&[], b.below.iter().enumerate().map(|(k, n)| ((1u64 << k) as f64, *n)), b.sum, b.count);
    e.single(
        "mojim_kv_auth_failures_total",
        Counter,
        "AUTH attempts with a wrong user or password (INFO acl_access_denied_auth).",
        s.auth_failures,
    );
    e.single(
        "mojim_kv_protocol_errors_total",
        Counter,
        "Clients closed for breaking the protocol or a limit (INFO mojim_protocol_errors).",
        s.protocol_errors,
    );
    e.single(
        "mojim_kv_net_input_bytes_total",
        Counter,
        "Bytes read from clients (INFO total_net_input_bytes).",
        s.net_input_bytes,
    );
    e.single(
        "mojim_kv_net_output_bytes_total",
        Counter,
        "Bytes written to clients (INFO total_net_output_bytes).",
        s.net_output_bytes,
    );
    e.single(
        "mojim_kv_uptime_seconds",
        Gauge,
        "Seconds since the server started (INFO uptime_in_seconds).",
        s.uptime_s,
    );
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_fall_in_their_power_of_two() {
        let mut b = BatchSizes::default();
        for n in [1, 2, 3, 4, 5, 4096, 4097] {
            b.record(n);
        }
        assert_eq!(&b.below[..4], &[1, 2, 4, 5], "<=1, <=2, <=4, <=8");
        assert_eq!(b.below[12], 6, "all but 4097 are at most 4096");
        assert_eq!((b.sum, b.count), (1 + 2 + 3 + 4 + 5 + 4096 + 4097, 7));
    }

    #[test]
    fn constant_labels_come_first_on_every_sample() {
        let mut s = Snapshot { dbs: vec![(3, 1)], ..Snapshot::default() };
        s.batches.record(2);
        let shard = [("shard".to_owned(), "ab12".to_owned())];
        let page = render(Some(&s), true, &Replication::default(), true, &shard);
        let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(samples.len() > 30, "{page}");
        for l in samples {
            assert!(l.contains("{shard=\"ab12\""), "{l}");
        }
        assert!(page.contains("mojim_kv_keys{shard=\"ab12\",db=\"0\"} 3\n"), "{page}");
        assert!(page.contains("mojim_kv_group_commands_bucket{shard=\"ab12\",le=\"1\"} 0\n"), "{page}");
        let plain = render(Some(&s), true, &Replication::default(), true, &[]);
        assert!(!plain.contains("shard="), "{plain}");
    }

    #[test]
    fn a_snapshot_is_taken_after_the_request() {
        let s = Scrape::new().unwrap();
        assert_eq!(s.wanted(), None, "nothing asked yet");
        let t = {
            let s = s.clone();
            std::thread::spawn(move || {
                // The command thread: answers once asked.
                loop {
                    if let Some(n) = s.wanted() {
                        s.publish(n, Snapshot { clients: 7, ..Snapshot::default() });
                        return;
                    }
                    std::thread::yield_now();
                }
            })
        };
        let (snap, fresh) = s.snapshot();
        t.join().unwrap();
        assert!(fresh);
        assert_eq!(snap.unwrap().clients, 7);
        assert_eq!(s.wanted(), None, "answered");
        let page = render(Some(&Snapshot::default()), false, &Replication::default(), false, &[]);
        assert!(page.contains("mojim_kv_snapshot_fresh 0\n"), "{page}");
        assert!(page.contains("mojim_kv_mirror_state{state=\"none\",mirror=\"\",mode=\"\"} 0\n"), "{page}");
    }
}
