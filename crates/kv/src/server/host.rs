//! What the commands learn of the server: the primary's replication state, the clients, the
//! counters, the Sentinel view.

use super::blocking::Waits;
use super::busy::BusyIo;
use super::client::Client;
use super::pubsub::{Registry, Sub};
use crate::cmd::client::Conn;
use crate::cmd::pubsub::SubKind;
use crate::cmd::scripting::Answered;
use crate::cmd::{Args, Auth, Host, Replication, Scripts, Sentinel, Session, Stats};
use crate::options::{split_host_port, KvOptions};
use crate::resp::Reply;
use mojim::{Mode, Primary, PrimaryStatus};
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// The host of one turn's commands.
pub struct ServerHost<'a> {
    pub primary: &'a Primary,
    pub opts: &'a KvOptions,
    pub listen: &'a str,
    /// The TLS listener's address ("" when none).
    pub tls_listen: &'a str,
    pub clients: usize,
    pub stats: Stats,
    pub run_id: &'a str,
    pub auth: &'a AuthLog,
    /// Set by `CONFIG RESETSTAT`: the server resets its counters after the command.
    pub reset: &'a Cell<bool>,
    /// The clients but the one running the command (before and after it in the server's list;
    /// a busy script's hook reads and answers them).
    pub others: RefCell<[&'a mut [Option<Client>]; 2]>,
    /// The connection of the client running the command.
    pub me: Conn,
    /// Clients `CLIENT KILL` asked to close.
    pub kill: &'a RefCell<Vec<u64>>,
    /// `CLIENT PAUSE`: until when (Unix ms; 0: none) and whether every command waits.
    pub pause: &'a Cell<(u64, bool)>,
    /// The parked clients (`CLIENT UNBLOCK` asks for one to be answered).
    pub waits: &'a RefCell<Waits>,
    /// Scripts and functions.
    pub scripts: &'a RefCell<Scripts>,
    /// What a busy script's hook needs to serve the other clients.
    pub busy: BusyIo<'a>,
    /// Pub/sub's subscriptions and outbox.
    pub pubsub: &'a RefCell<Registry>,
    /// The client running the command, as a subscriber.
    pub me_sub: Sub,
}

/// Failed `AUTH` attempts: counted, and logged with the client's address, at most one line a
/// second (a client guessing passwords cannot flood the log; the line says how many it
/// stands for).
#[derive(Default)]
pub struct AuthLog {
    pub failures: Cell<u64>,
    last_line: Cell<Option<Instant>>,
    unlogged: Cell<u64>,
}

impl AuthLog {
    fn failed(&self, client: &str, user: &[u8]) {
        self.failures.set(self.failures.get() + 1);
        self.unlogged.set(self.unlogged.get() + 1);
        let now = Instant::now();
        if self.last_line.get().is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        self.last_line.set(Some(now));
        let user = String::from_utf8_lossy(&user[..user.len().min(64)]).into_owned();
        tracing::warn!(client, user, failures = self.unlogged.get(), "AUTH failed: wrong user or password");
        self.unlogged.set(0);
    }
}

impl Host for ServerHost<'_> {
    fn replication(&self) -> Replication {
        replication(&self.primary.status(), self.primary.mode())
    }

    fn connected_clients(&self) -> usize {
        self.clients
    }

    fn listen_addr(&self) -> String {
        self.listen.to_string()
    }

    fn plaintext(&self) -> bool {
        !self.busy.listeners.plain_addr.is_empty()
    }

    fn stats(&self) -> Stats {
        self.stats.clone()
    }

    fn run_id(&self) -> String {
        self.run_id.to_string()
    }

    fn authenticate(&self, client: &str, user: &[u8], password: &[u8]) -> Auth {
        let Some(p) = &self.opts.password else { return Auth::NoPassword };
        // Both checks run whatever the user, so the time says nothing of which was wrong.
        let (user_ok, pass_ok) = (user == b"default", p.matches(password));
        if user_ok && pass_ok {
            return Auth::Accepted;
        }
        self.auth.failed(client, user);
        Auth::Refused
    }

    fn has_password(&self) -> bool {
        self.opts.password.is_some()
    }

    fn auth_failed(&self, client: &str, user: &[u8]) {
        self.auth.failed(client, user);
    }

    fn fixed_setting(&self, name: &str) -> String {
        let o = self.opts;
        match name {
            "protected-mode" => if o.protected_mode { "yes" } else { "no" }.into(),
            "requirepass" => o.password.as_ref().map(|p| p.reveal()).unwrap_or_default(),
            "maxclients" => o.max_clients.to_string(),
            "proto-max-bulk-len" => o.limits.max_bulk.to_string(),
            "tls-port" => {
                let a = &self.busy.listeners.tls_addr;
                a.rsplit_once(':').map_or("0", |(_, p)| p).to_string()
            }
            "tls-cert-file" => o.tls.as_ref().map(|t| t.cert_file.display().to_string()).unwrap_or_default(),
            "tls-key-file" => o.tls.as_ref().map(|t| t.key_file.display().to_string()).unwrap_or_default(),
            "tls-ca-cert-file" => {
                o.tls.as_ref().map(|t| t.ca_cert_file.display().to_string()).unwrap_or_default()
            }
            "tls-auth-clients" => o.tls.as_ref().map_or("yes", |t| t.auth_clients.name()).into(),
            "tls-protocols" => o.tls.as_ref().map_or("TLSv1.2 TLSv1.3".into(), |t| t.protocols.clone()),
            _ => String::new(),
        }
    }

    fn reset_stats(&self) {
        self.reset.set(true);
    }

    fn my_conn(&self) -> Conn {
        self.me.clone()
    }

    fn other_clients(&self, f: &mut dyn FnMut(&Session, &Conn)) {
        let now_ms = crate::cmd::now_ms();
        for c in self.others.borrow().iter().flat_map(|s| s.iter()).flatten() {
            f(&c.session, &c.conn(now_ms));
        }
    }

    fn kill_clients(&self, ids: &[u64]) {
        self.kill.borrow_mut().extend_from_slice(ids);
    }

    fn pause(&self, until_ms: u64, all: bool) {
        self.pause.set((until_ms, all));
    }

    fn paused(&self, now_ms: u64, write: bool) -> bool {
        let (until, all) = self.pause.get();
        now_ms < until && (all || write)
    }

    fn scripts(&self) -> Option<&RefCell<Scripts>> {
        Some(self.scripts)
    }

    fn serve_busy(&self, answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> Answered) {
        self.busy.serve(&self.others, answer);
    }

    fn others_waiting(&self) -> bool {
        self.others.borrow().iter().flat_map(|s| s.iter()).flatten().any(|c| c.out.len() != c.releasable)
    }

    fn unblock(&self, id: u64, error: bool) -> bool {
        self.waits.borrow_mut().request_unblock(id, error)
    }

    fn subscribe(&self, kind: SubKind, name: &[u8]) -> bool {
        self.pubsub.borrow_mut().subscribe(self.me_sub, kind, name)
    }

    fn unsubscribe(&self, kind: SubKind, name: &[u8]) -> bool {
        self.pubsub.borrow_mut().unsubscribe(self.me_sub.id, kind, name)
    }

    fn subscriptions(&self, kind: SubKind) -> Vec<Vec<u8>> {
        self.pubsub.borrow().names_of(self.me_sub.id, kind)
    }

    fn subscriptions_of(&self, id: u64, kind: SubKind) -> Vec<Vec<u8>> {
        self.pubsub.borrow().names_of(id, kind)
    }

    fn publish(&self, channel: &[u8], message: &[u8], sharded: bool) -> usize {
        self.pubsub.borrow_mut().publish(channel, message, sharded)
    }

    fn pubsub_names(&self, kind: SubKind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        self.pubsub.borrow().names(kind, pattern)
    }

    fn pubsub_numsub(&self, kind: SubKind, name: &[u8]) -> usize {
        self.pubsub.borrow().numsub(kind, name)
    }

    fn monitor(&self) -> bool {
        self.pubsub.borrow_mut().add_monitor(self.me_sub);
        true
    }

    fn has_monitors(&self) -> bool {
        self.pubsub.borrow().has_monitors()
    }

    fn feed_monitors(&self, line: &[u8]) {
        self.pubsub.borrow_mut().feed_monitors(line)
    }

    fn pubsub_counts(&self) -> (usize, usize, usize) {
        self.pubsub.borrow().counts()
    }

    fn published(&self) -> usize {
        self.pubsub.borrow().queued()
    }

    fn unpublish(&self, mark: usize) {
        self.pubsub.borrow_mut().unpublish(mark)
    }

    fn sentinel(&self) -> Sentinel {
        let me = if self.opts.announce.is_empty() { self.listen } else { &self.opts.announce };
        Sentinel {
            name: self.opts.sentinel_name.clone(),
            master: split_host_port(me).unwrap_or_default(),
            master_tls: split_host_port(self.tls_listen).filter(|_| self.opts.announce.is_empty()),
            sentinels: self.opts.sentinels.iter().filter_map(|s| split_host_port(s)).collect(),
            serving: not_serving(&self.primary.status(), self.primary.mode()).is_none(),
        }
    }
}

/// The replication state (`INFO replication`, the metrics) of a primary in `mode` whose status
/// is `st`.
pub fn replication(st: &PrimaryStatus, mode: Mode) -> Replication {
    let acked = st.acked_seq.iter().copied().max().unwrap_or(0);
    let sent = st.next_seq.saturating_sub(1);
    let state = if mode == Mode::Unreplicated {
        "none"
    } else if st.failed.is_some() && st.degraded {
        "degraded"
    } else if st.failed.is_some() {
        "lost"
    } else {
        "online"
    };
    let durable = i64::from(mode.waits_for_mirror() && state == "online");
    Replication {
        mode: mode.name().to_string(),
        mirror: if mode == Mode::Unreplicated { String::new() } else { st.mirror.clone() },
        state: state.to_string(),
        lag_groups: sent.saturating_sub(acked),
        acked_seq: acked,
        durable_replicas: durable,
        epoch: st.epoch,
    }
}

/// Why this server may not act as the master now (Sentinel reports it down, `/readyz` answers
/// 503), or `None` when it may: it has its mirror (or needs none, or serves without it by
/// choice, `on_mirror_loss = "degrade"`), and it knows of no newer epoch (a fence, or a lease
/// lost under etcd).
pub fn not_serving(st: &PrimaryStatus, mode: Mode) -> Option<String> {
    if let Some(m) = st.reconnect_error.as_deref().filter(|m| m.contains("fenced") || m.contains("(Epoch)")) {
        return Some(format!("replaced by a newer primary: {m}"));
    }
    if let Some(l) = st.lease.as_ref().and_then(|l| l.lost.as_ref()) {
        return Some(format!("its etcd lease was lost: {l}"));
    }
    if mode.waits_for_mirror() && st.failed.is_some() && !st.degraded {
        return Some(format!(
            "mirror {} lost ([primary] mode = \"{}\"): writes wait until it is back",
            st.mirror,
            mode.name()
        ));
    }
    None
}
