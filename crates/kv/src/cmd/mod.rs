//! The commands: a table of what `mojim kv` answers (name, arity, flags, keys, as `COMMAND`
//! reports them), and their execution against a store, sans I/O: a command takes its
//! arguments and appends its reply. Transactions (`MULTI`/`EXEC`) queue and run here too.
//!
//! Each top-level command runs from a savepoint: one that cannot complete (the heap is full, or
//! it is larger than a group may be) is rolled back, store and reply alike, and answered with
//! an error; one that would fit an empty batch asks to be run again in one ([`Outcome::Retry`]).

pub mod acl;
pub mod args;
pub mod blocking;
pub mod client;
mod cluster;
mod cluster_stage;
mod coll_scan;
mod config;
pub mod errorstats;
#[cfg(test)]
mod family_harness;
pub mod glob;
pub mod hashes;
mod keys;
mod lists;
#[cfg(test)]
mod lists_tests;
mod memory;
#[cfg(test)]
mod memory_tests;
pub mod notify;
pub mod observe;
pub mod pubsub;
#[cfg(test)]
mod pubsub_tests;
mod rand;
pub mod rdb;
mod redirect;
pub mod scripting;
mod server;
mod set_value;
mod sets;
mod sort;
mod spec;
mod strings;
#[cfg(test)]
mod tests;
pub mod watch;
mod zsets;

pub use args::{now_ms, Args};
pub use blocking::Wait;
pub use config::{Encodings, Settings};
pub use scripting::Scripts;
pub use spec::{command_list, find_spec, Group, Spec, SPECS};
pub use watch::Watches;

use crate::resp::{Proto, Reply};
use crate::store::{Mem, Store, StoreError};
pub use errorstats::ErrorStats;

/// `-WRONGTYPE`.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A number that is not one.
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
/// An option that is not one.
pub const SYNTAX: &str = "ERR syntax error";

/// What the server around the commands knows: replication, clients, its address.
pub trait Host {
    /// The replication state (INFO, WAIT, ROLE).
    fn replication(&self) -> Replication;
    /// Clients connected now.
    fn connected_clients(&self) -> usize;
    /// The address clients connect to.
    fn listen_addr(&self) -> String;
    /// Whether clients may connect in the clear (false when only `[kv] tls_listen` serves:
    /// `CONFIG GET port` is then 0, as in Redis).
    fn plaintext(&self) -> bool {
        true
    }
    /// Counters for INFO.
    fn stats(&self) -> Stats;
    /// The server's run id: 40 hex digits drawn when it starts (INFO's `run_id`).
    fn run_id(&self) -> String {
        "0".repeat(40)
    }
    /// The Sentinel master name and the addresses of the servers that answer for it (the
    /// current primary's first), for the `SENTINEL` subset.
    fn sentinel(&self) -> Sentinel;
    /// Checks `user`'s `password` (`AUTH`, `HELLO ... AUTH`) for the client at `client`, and
    /// counts and logs a failure.
    fn authenticate(&self, client: &str, user: &[u8], password: &[u8]) -> Auth;
    /// Whether `[kv] password` is set (it is then the `default` user's password).
    fn has_password(&self) -> bool {
        false
    }
    /// Counts and logs a failed `AUTH` that [`Host::authenticate`] did not see (another
    /// user's, checked against the ACL users).
    fn auth_failed(&self, _client: &str, _user: &[u8]) {}
    /// The value of a setting fixed at start-up, by its Redis name (`protected-mode`,
    /// `requirepass`, `maxclients`, `proto-max-bulk-len`, and the `tls-*` ones).
    fn fixed_setting(&self, name: &str) -> String;
    /// Resets the counters `INFO stats` shows (`CONFIG RESETSTAT`).
    fn reset_stats(&self);
    /// The connection of the client running the command.
    fn my_conn(&self) -> client::Conn;
    /// Calls `f` with every other client's session and connection.
    fn other_clients(&self, f: &mut dyn FnMut(&Session, &client::Conn));
    /// Closes these clients once the command is done (`CLIENT KILL`).
    fn kill_clients(&self, ids: &[u64]);
    /// Holds commands back until `until_ms` (Unix milliseconds; 0: no more), every command or
    /// only writes (`CLIENT PAUSE`, `UNPAUSE`).
    fn pause(&self, until_ms: u64, all: bool);
    /// Whether a command (a write when `write`) must wait for a pause to end.
    fn paused(&self, now_ms: u64, write: bool) -> bool;
    /// `CLIENT UNBLOCK`: asks that client `id`, if a blocking command parked it, be answered
    /// now (a null, as a timeout, or the `UNBLOCKED` error); whether it was parked.
    fn unblock(&self, _id: u64, _error: bool) -> bool {
        false
    }
    /// The scripting engine (`EVAL`, `FUNCTION`): `None` where the host keeps none.
    fn scripts(&self) -> Option<&std::cell::RefCell<Scripts>> {
        None
    }
    /// While a script runs past its time limit: reads what the other clients sent and answers
    /// each complete request with `answer` (`scripting/busy.rs`), writing the replies at once.
    fn serve_busy(&self, _answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> scripting::Answered) {}
    /// Whether other clients have replies not yet sent (they wait for the running batch).
    fn others_waiting(&self) -> bool {
        false
    }

    // Pub/sub (`pubsub.rs`): the server holds the subscriptions (`server/pubsub.rs`). The
    // defaults are a host without any: nothing is subscribed, a message reaches no one.
    /// Subscribes the client running the command to `name` (a channel, a pattern or a shard
    /// channel, by `kind`); whether it was not subscribed to it already.
    fn subscribe(&self, _kind: pubsub::SubKind, _name: &[u8]) -> bool {
        false
    }
    /// Unsubscribes the client running the command from `name`; whether it was subscribed.
    fn unsubscribe(&self, _kind: pubsub::SubKind, _name: &[u8]) -> bool {
        false
    }
    /// What the client running the command subscribes to, of `kind`, in the order it did.
    fn subscriptions(&self, _kind: pubsub::SubKind) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// What client `id` subscribes to, of `kind`.
    fn subscriptions_of(&self, _id: u64, _kind: pubsub::SubKind) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// Queues `message` on `channel` (`sharded`: a shard channel) for its subscribers, written
    /// into their output once the command is done; how many they are.
    fn publish(&self, _channel: &[u8], _message: &[u8], _sharded: bool) -> usize {
        0
    }
    /// Names of `kind` with subscribers (those `pattern` matches), sorted (`PUBSUB CHANNELS`).
    fn pubsub_names(&self, _kind: pubsub::SubKind, _pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// Subscribers of `name` (`PUBSUB NUMSUB`).
    fn pubsub_numsub(&self, _kind: pubsub::SubKind, _name: &[u8]) -> usize {
        0
    }
    /// Makes the client running the command a monitor (`MONITOR`): every command run after
    /// is sent to it, as [`Host::feed_monitors`] gets it; false where the host cannot.
    fn monitor(&self) -> bool {
        false
    }
    /// Whether a client monitors the commands.
    fn has_monitors(&self) -> bool {
        false
    }
    /// Queues `line` for every monitor (written into their output once the command is done,
    /// dropped if the command is undone).
    fn feed_monitors(&self, _line: &[u8]) {}
    /// Channels, patterns and shard channels with subscribers.
    fn pubsub_counts(&self) -> (usize, usize, usize) {
        (0, 0, 0)
    }
    /// A mark of the messages queued so far, for [`Host::unpublish`].
    fn published(&self) -> usize {
        0
    }
    /// Drops the messages queued since `mark`: their command was undone.
    fn unpublish(&self, _mark: usize) {}
}

/// What a password check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// The right user and password, or the `default` user with none configured.
    Accepted,
    /// Another user or password.
    Refused,
    /// `AUTH <password>` while no password is configured.
    NoPassword,
}

/// `-NOAUTH`: a command before the client has authenticated.
pub const NOAUTH: &str = "NOAUTH Authentication required.";
/// `-WRONGPASS`: a failed `AUTH`.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// The replication state.
#[derive(Clone, Debug, Default)]
pub struct Replication {
    /// `sync`, `async`, ... or `unreplicated`.
    pub mode: String,
    /// The mirror's address ("" when unreplicated).
    pub mirror: String,
    /// `online`, `lost`, `degraded`, or `none`.
    pub state: String,
    /// Groups sent and not yet acknowledged.
    pub lag_groups: u64,
    /// Sequence number of the last group acknowledged.
    pub acked_seq: u64,
    /// Replicas that hold every acknowledged write now (what `WAIT` answers).
    pub durable_replicas: i64,
    /// The epoch.
    pub epoch: u64,
}

/// Counters for INFO's stats section.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Seconds since start.
    pub uptime_s: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Commands run.
    pub commands: u64,
    /// Groups sent (batches with writes).
    pub groups: u64,
    /// Clients closed for breaking the protocol.
    pub protocol_errors: u64,
    /// Failed `AUTH` attempts.
    pub auth_failures: u64,
    /// Clients closed for passing `[kv] output_limit`.
    pub output_limit_closes: u64,
    /// Keys removed because they expired.
    pub expired_keys: u64,
    /// Removed values freed in the background (`lazyfreed_objects`).
    pub lazyfreed_objects: u64,
    /// Clients parked by a blocking command now.
    pub blocked_clients: u64,
    /// Connections closed at once because `[kv] max_clients` were connected.
    pub rejected_connections: u64,
    /// Bytes read from clients (over TLS: the plaintext).
    pub net_input_bytes: u64,
    /// Bytes written to clients (over TLS: the plaintext).
    pub net_output_bytes: u64,
    /// Commands a second, the mean of the last samples (`server/instant.rs`).
    pub ops_per_sec: u64,
    /// KiB read a second, likewise.
    pub input_kbps: f64,
    /// KiB written a second, likewise.
    pub output_kbps: f64,
    /// The most heap bytes in use at the end of a turn since the start or the last reset.
    pub used_memory_peak: u64,
}

/// The Sentinel view: the master's name and address.
#[derive(Clone, Debug, Default)]
pub struct Sentinel {
    /// The name clients ask for (`[kv] sentinel_name`).
    pub name: String,
    /// host and port of the current primary's `mojim kv`.
    pub master: (String, u16),
    /// The same over TLS, named to clients connected over TLS (`None`: the server has no TLS
    /// listener, or `[kv] announce` names one address for all).
    pub master_tls: Option<(String, u16)>,
    /// Every server answering Sentinel queries for this name, host and port.
    pub sentinels: Vec<(String, u16)>,
    /// Whether this server may act as the master now: it has its mirror (or needs none), and
    /// it knows of no newer epoch (a fence, or a lease lost under etcd). When it may not, it
    /// names no master, and reports itself down, so that clients look for the new one.
    pub serving: bool,
}

/// Most bytes of commands one transaction may queue (a transaction larger than this could not
/// be one group anyway).
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// A transaction being queued.
#[derive(Default, Debug)]
pub struct Multi {
    /// Commands queued.
    pub queue: Vec<Vec<Vec<u8>>>,
    /// Their bytes (with 16 per argument for its keeping).
    pub bytes: usize,
    /// A command was refused while queueing: `EXEC` aborts.
    pub failed: bool,
}

/// One connection's state.
#[derive(Debug)]
pub struct Session {
    /// Its id (`CLIENT ID`).
    pub id: u64,
    /// The peer's address.
    pub addr: String,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// RESP2 until `HELLO 3`.
    pub proto: Proto,
    /// `Some` between `MULTI` and `EXEC`/`DISCARD`.
    pub multi: Option<Multi>,
    /// The database selected (`SELECT`).
    pub db: usize,
    /// It may run commands: it gave the password, or none is needed.
    pub authenticated: bool,
    /// The ACL user it runs as (`default` until `AUTH`).
    pub user: String,
    /// Whether its first command has run (a connection is logged in as `default` without
    /// `AUTH` only while default takes any password, which the first command checks).
    pub started: bool,
    /// The last command it ran (CLIENT LIST's `cmd`).
    pub last_cmd: &'static str,
    /// When it last ran one, in Unix milliseconds.
    pub last_ms: u64,
    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER`.
    pub lib_name: Option<String>,
    /// See `lib_name`.
    pub lib_ver: Option<String>,
    /// `CLIENT REPLY`.
    pub replies: client::Replies,
    /// Blocking commands answer at once, as their non-blocking forms (inside `EXEC`).
    pub deny_blocking: bool,
    /// What it subscribes to (`pubsub.rs`).
    pub subs: pubsub::SubCounts,
    /// It is a script's, running the script's commands (`scripting/run.rs`).
    pub in_script: bool,
    /// It ran `MONITOR` (CLIENT LIST's flag `O`).
    pub monitor: bool,
    /// Its watched keys are forgotten before its next command: its transaction was discarded
    /// while a script was busy (`scripting/busy.rs`, which cannot reach the watches).
    pub unwatch: bool,
    /// Whether the client connected over TLS (`[kv] tls_listen`).
    pub tls: bool,
    /// Cluster mode: it sent `ASKING`, for its next command (or its transaction): a slot being
    /// moved here is served to it.
    pub asking: bool,
    /// Cluster mode: `READONLY` (kept for the clients that ask; every shard's node is its
    /// primary, which serves reads and writes alike).
    pub readonly: bool,
}

impl Session {
    /// A new connection's; `authenticated` when no password is needed.
    pub fn new(id: u64, addr: String, authenticated: bool) -> Session {
        Session {
            id,
            addr,
            name: None,
            proto: Proto::Resp2,
            multi: None,
            db: 0,
            authenticated,
            user: "default".into(),
            started: false,
            last_cmd: "NULL",
            last_ms: 0,
            lib_name: None,
            lib_ver: None,
            replies: client::Replies::On,
            deny_blocking: false,
            subs: pubsub::SubCounts::default(),
            in_script: false,
            monitor: false,
            unwatch: false,
            tls: false,
            asking: false,
            readonly: false,
        }
    }
}

/// What the caller does after a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Go on.
    Done,
    /// Send the replies, then close the connection (`QUIT`).
    Close,
    /// The command was undone and its reply dropped: seal and send the batch, then run it
    /// again in an empty one.
    Retry,
    /// The command's reply would have passed the output limit: it was undone and answered
    /// with an error; send the replies, then close the connection.
    OverLimit,
    /// Clients are paused (`CLIENT PAUSE`): the command did not run; run it again once the pause
    /// is over.
    Paused,
    /// A blocking command found none of its keys ready: it changed nothing and answered
    /// nothing; park the client and run the request again when a key is written
    /// (`blocking.rs`).
    Block(Wait),
    /// A script passed its time limit while other clients' replies waited in its batch (they
    /// could not be sent before it ends): it was undone and answered nothing; seal the batch,
    /// send every reply in flight, then run it again first in an empty batch
    /// (`scripting/busy.rs`).
    Alone,
}

/// What commands run against.
///
/// Keyspace events (`notify.rs`): a command that changed a key calls
/// `cx.notify(notify::CLASS, "event", key)` once the change is made (`cx.notify_in(db, ...)`
/// for a key of another database), with the class and event name Redis uses for that command
/// (`notify::LIST, "lpush"`; `notify::GENERIC, "del"` for a key the command emptied and so
/// deleted). It costs one test of the flags while the class is off; events of a command that is
/// then undone are dropped. `new`, `keymiss` and lazily `expired` keys are raised around every
/// command, not by the families.
pub struct Cx<'a, M: Mem> {
    /// The store.
    pub store: &'a mut Store<M>,
    /// The server.
    pub host: &'a dyn Host,
    /// Now, in Unix milliseconds (one reading per turn).
    pub now_ms: u64,
    /// Most ranges in a group (`[limits] max_ranges`).
    pub max_ranges: usize,
    /// Most bytes a batch may store (a group must fit one lane's log).
    pub max_group_bytes: u64,
    /// Most bytes the client's output buffer may hold (`[kv] output_limit`).
    pub output_limit: usize,
    /// Set when a command that reads the keyspace (or a transaction) has run: the read barrier
    /// is for such batches.
    pub read_keys: bool,
    /// What `CONFIG SET` changes (the encodings' thresholds among them).
    pub settings: &'a mut Settings,
    /// Databases clients may select (`[kv] databases`, at most what the store holds).
    pub databases: usize,
    /// What clients `WATCH`.
    pub watches: &'a mut Watches,
    /// Error replies sent, in all and per code (`INFO errorstats`).
    pub errors: &'a mut ErrorStats,
    /// Per command counts, latency histograms, the slow log (`observe/`).
    pub telemetry: &'a mut observe::Telemetry,
    /// Cluster mode: the topology commands are redirected by; `None`: a standalone server.
    pub cluster: Option<&'a crate::cluster::view::CachedView>,
}

impl<M: Mem> Cx<'_, M> {
    /// Whether the batch so far leaves room for another command (else the caller seals
    /// first): [`Store::batch_has_room`].
    pub fn batch_has_room(&self) -> bool {
        self.store.batch_has_room(self.max_group_bytes, self.max_ranges)
    }

    /// Databases clients may select: `[kv] databases`, or fewer if the store holds fewer.
    pub fn databases(&self) -> usize {
        self.databases.min(self.store.databases()).max(1)
    }

    /// Checks that `n` more bytes of reply keep the client's output under its limit: a reply
    /// that would pass it is never built (it could be far larger than the request).
    pub fn reply_room(&self, r: &Reply, n: usize) -> Result<(), StoreError> {
        if r.buf.len().saturating_add(n) > self.output_limit {
            return Err(StoreError::OutputLimit(self.output_limit));
        }
        Ok(())
    }

    fn check_group(&mut self) -> Result<(), StoreError> {
        let bytes = self.store.group_bytes(self.max_ranges);
        if bytes > self.max_group_bytes {
            return Err(StoreError::TooLarge(format!(
                "the command changes {bytes} bytes, more than one atomic group may carry ({}, half a lane's \
                 log): split it, or raise [mirror] log_capacity",
                self.max_group_bytes
            )));
        }
        Ok(())
    }

    /// Refuses, before it is made, a change of at least `bytes` more bytes that would take the
    /// group past its limit (the check after the command would refuse it, once the work was
    /// done: a ZUNIONSTORE of a million members took seconds to be refused).
    pub fn check_room(&self, bytes: u64) -> Result<(), StoreError> {
        let total = self.store.group_bytes(self.max_ranges).saturating_add(bytes);
        if total > self.max_group_bytes {
            return Err(StoreError::TooLarge(format!(
                "the command would change at least {total} bytes, more than one atomic group may carry \
                 ({}, half a lane's log): split it, or raise [mirror] log_capacity",
                self.max_group_bytes
            )));
        }
        Ok(())
    }
}

/// Redis's answer to an unknown command: its name (128 bytes at most) and its first arguments,
/// while the list is shorter than 128 bytes (each argument cut to what is left of them), the
/// bytes as they were sent.
fn unknown(args: &Args, r: &mut Reply) {
    // As C's "%.*s": at most so many bytes, and none from a NUL byte on.
    let c_str =
        |b: &[u8], max: usize| -> Vec<u8> { b.iter().take(max).take_while(|&&c| c != 0).copied().collect() };
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(&c_str(args.get(0), 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    let mut list: Vec<u8> = Vec::new();
    for a in args.from(1) {
        if list.len() >= 128 {
            break;
        }
        let room = 128 - list.len();
        list.push(b'\'');
        list.extend_from_slice(&c_str(a, room));
        list.extend_from_slice(b"' ");
    }
    msg.extend_from_slice(&list);
    r.error_bytes(&msg);
}

/// At most `max` bytes of `b`, for a message.
pub fn show(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}

/// Runs one command from a client: queues it inside a transaction, else executes it from a
/// savepoint. Store errors that are not the command's fault are returned: the store is then
/// unusable. Error replies are counted in `cx.errors` (a transaction's, one per command
/// that failed).
pub fn execute<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    args: &Args,
    out: &mut Vec<u8>,
) -> Result<Outcome, StoreError> {
    let mark = out.len();
    let start = std::time::Instant::now();
    let mut call = Call::None;
    let o = execute_one(cx, s, args, out, &mut call)?;
    let failed = out.get(mark) == Some(&b'-');
    if failed {
        cx.errors.count(&out[mark..]);
    }
    // A command that did not run yet (paused, parked, to be run again) is counted when it does.
    let ran = matches!(o, Outcome::Done | Outcome::Close | Outcome::OverLimit);
    let ending = match call {
        Call::Rejected(spec) => Some((spec, observe::Ending::Rejected)),
        Call::Ran(spec) if ran && failed => Some((spec, observe::Ending::Failed)),
        Call::Ran(spec) if ran => Some((spec, observe::Ending::Ok)),
        _ => None,
    };
    if let Some((spec, ending)) = ending {
        observe::record(cx, s, spec, args, start.elapsed().as_nanos() as u64, ending);
    }
    // ASKING holds for the next command that completes (or the transaction it starts).
    if s.asking && ran && s.multi.is_none() && !matches!(call, Call::Ran(sp) if sp.name == "ASKING") {
        s.asking = false;
    }
    Ok(o)
}

/// What became of a call, for `observe::record`.
enum Call {
    /// Not a command, or queued in a transaction: nothing to count.
    None,
    /// Refused before it ran.
    Rejected(&'static Spec),
    /// Run.
    Ran(&'static Spec),
}

fn execute_one<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    args: &Args,
    out: &mut Vec<u8>,
    call: &mut Call,
) -> Result<Outcome, StoreError> {
    let mut name_buf = [0u8; 32];
    let spec = args::upper(args.get(0), &mut name_buf).and_then(find_spec);
    let mut r = Reply { buf: out, proto: s.proto };
    let Some(spec) = spec else {
        if let Some(m) = &mut s.multi {
            m.failed = true;
        }
        unknown(args, &mut r);
        return Ok(Outcome::Done);
    };
    *call = Call::Rejected(spec);
    // A region without ACL changes: the server's own rule stands (no `[kv] password`, no AUTH).
    if !std::mem::replace(&mut s.started, true)
        && s.authenticated
        && !s.in_script
        && cx.store.acl_block() != 0
    {
        s.authenticated = acl::default_needs_no_password(cx)?;
    }
    if !s.authenticated && !spec.flags.contains(&"no_auth") {
        if let Some(m) = &mut s.multi {
            m.failed = true;
        }
        r.error(NOAUTH);
        return Ok(Outcome::Done);
    }
    let n = args.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        if let Some(m) = &mut s.multi {
            m.failed = true;
        }
        r.error(&format!("ERR wrong number of arguments for '{}' command", spec.name.to_ascii_lowercase()));
        return Ok(Outcome::Done);
    }
    if let Err(e) = spec::check_subcommand(spec.name, args.len(), (args.len() > 1).then(|| args.get(1))) {
        if let Some(m) = &mut s.multi {
            m.failed = true;
        }
        r.error(&e);
        return Ok(Outcome::Done);
    }
    if s.authenticated {
        cx.settings.acl.sync(cx.store)?;
        if let Err(d) = acl::check(&cx.settings.acl, s, spec, args) {
            let context = if s.multi.is_some() { "multi" } else { "toplevel" };
            acl::log_refusal(&mut cx.settings.acl, s, &d, args, context, cx.now_ms);
            if let Some(m) = &mut s.multi {
                m.failed = true;
            }
            r.error(&d.message());
            return Ok(Outcome::Done);
        }
    }
    // Cluster mode: a command whose keys another shard serves, or that no shard may serve, is
    // answered with the redirect (queued in a transaction, it makes EXEC fail; at EXEC, the
    // transaction is discarded). A script's own commands run where the script runs.
    if let Some(view) = cx.cluster.filter(|_| !s.in_script) {
        let route = redirect::check(cx, view, s, spec, args)?;
        if let Some(e) = route.error() {
            if spec.name == "EXEC" {
                s.multi = None;
                cx.watches.unwatch(s.id);
            } else if let Some(m) = &mut s.multi {
                m.failed = true;
            }
            r.error(&e);
            return Ok(Outcome::Done);
        }
    }
    // A RESP2 client with subscriptions may run only pub/sub commands, PING, QUIT and RESET.
    if s.subs.any() && s.proto == Proto::Resp2 && !pubsub::allowed_when_subscribed(spec.name) {
        if let Some(m) = &mut s.multi {
            m.failed = true;
        }
        r.error(&pubsub::refused_when_subscribed(spec, args));
        return Ok(Outcome::Done);
    }
    if let Some(m) = &mut s.multi {
        if !matches!(spec.name, "EXEC" | "DISCARD" | "MULTI" | "QUIT" | "WATCH" | "RESET") {
            let bytes: usize = args.from(0).map(|a| a.len() + 16).sum();
            if m.bytes + bytes > MAX_QUEUED_BYTES {
                m.failed = true;
                r.error(&format!(
                    "ERR the transaction's queued commands pass {MAX_QUEUED_BYTES} bytes: split it into smaller ones"
                ));
                return Ok(Outcome::Done);
            }
            m.bytes += bytes;
            m.queue.push(args.to_owned_vec());
            *call = Call::None;
            r.simple(b"QUEUED");
            return Ok(Outcome::Done);
        }
    }
    // A pause holds commands back, before they run: writes (and PUBLISH, which Redis pauses
    // with them: `may_replicate`) only, or every one.
    let pausable = |sp: &Spec| sp.flags.iter().any(|f| *f == "write" || *f == "may_replicate");
    let write = pausable(spec)
        || (spec.name == "EXEC"
            && s.multi.as_ref().is_some_and(|m| {
                m.queue.iter().any(|c| {
                    let mut b = [0u8; 32];
                    args::upper(&c[0], &mut b).and_then(find_spec).is_some_and(pausable)
                })
            }));
    if cx.host.paused(cx.now_ms, write) {
        *call = Call::None;
        return Ok(Outcome::Paused);
    }
    *call = Call::Ran(spec);
    s.last_cmd = spec.name;
    s.last_ms = cx.now_ms;
    let before = s.replies;
    let mark = out.len();
    let o = run_top(cx, s, spec, args, out)?;
    // CLIENT REPLY OFF: no reply; SKIP: none for the next command. Pushes (the confirmations of
    // SUBSCRIBE and its kin) go whatever it says.
    use client::Replies;
    let drop = !pubsub::replies_are_pushes(spec.name) || out.get(mark) == Some(&b'-');
    match (before, s.replies) {
        (Replies::Off, Replies::Off) if drop => out.truncate(mark),
        (Replies::Skip, now) => {
            if drop {
                out.truncate(mark);
            }
            if now == Replies::Skip {
                s.replies = Replies::On;
            }
        }
        _ => {}
    }
    Ok(o)
}

fn run_top<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    args: &Args,
    out: &mut Vec<u8>,
) -> Result<Outcome, StoreError> {
    cx.read_keys |= spec.flags.contains(&"readonly") || spec.name == "EXEC";
    cx.store.select(s.db.min(cx.databases() - 1));
    let empty = !cx.store.dirty();
    let sp = cx.store.savepoint();
    let published = cx.host.published();
    let mark = out.len();
    let r = match spec.name {
        // EXEC checks its group itself, so that it can keep its transaction for a retry.
        "EXEC" => exec(cx, s, out),
        _ => dispatch(cx, s, spec, args, out).and_then(|o| cx.check_group().map(|()| o)),
    };
    match r {
        // A script asks to run alone: undone, to run again.
        Ok(Outcome::Alone) => {
            cx.watches.discard();
            cx.store.rollback_to(&sp)?;
            out.truncate(mark);
            Ok(Outcome::Alone)
        }
        Ok(o) => {
            cx.watches.commit();
            Ok(o)
        }
        Err(e) if e.is_fatal() => Err(e),
        Err(e) => {
            cx.watches.discard();
            cx.host.unpublish(published);
            cx.store.rollback_to(&sp)?;
            out.truncate(mark);
            // Too large for what the batch has left, or the heap is short of blocks the batch
            // has freed (they join their lists when it is sealed): alone it may fit.
            if matches!(e, StoreError::TooLarge(_) | StoreError::Full { .. }) && !empty {
                return Ok(Outcome::Retry);
            }
            if spec.name == "EXEC" {
                s.multi = None;
            }
            let mut r = Reply { buf: out, proto: s.proto };
            refuse(&e, &mut r);
            Ok(if matches!(e, StoreError::OutputLimit(_)) { Outcome::OverLimit } else { Outcome::Done })
        }
    }
}

fn refuse(e: &StoreError, r: &mut Reply) {
    match e {
        StoreError::Full { .. } => r.error(&format!("OOM command not allowed: {e}")),
        _ => r.error(&format!("ERR {e}")),
    }
}

/// Runs a command (not queueing it), its reply appended to `out`.
fn dispatch<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    a: &Args,
    out: &mut Vec<u8>,
) -> Result<Outcome, StoreError> {
    if std::mem::take(&mut s.unwatch) {
        cx.watches.unwatch(s.id);
    }
    // Keyspace events of no one command (notify.rs); `None` unless their classes are on.
    let around = notify::before(cx, spec, a)?;
    let mut r = Reply { buf: out, proto: s.proto };
    let r = &mut r;
    let stores = cx.store.stores();
    match spec.name {
        "EXEC" => unreachable!("EXEC runs from run_top, never queued or nested"),
        "MULTI" => match s.multi {
            Some(_) => r.error("ERR MULTI calls can not be nested"),
            None => {
                s.multi = Some(Multi::default());
                r.ok();
            }
        },
        "DISCARD" => match s.multi.take() {
            Some(_) => {
                cx.watches.unwatch(s.id);
                r.ok()
            }
            None => r.error("ERR DISCARD without MULTI"),
        },
        "WATCH" if s.multi.is_some() => r.error("ERR WATCH inside MULTI is not allowed"),
        "WATCH" => {
            for k in a.from(1) {
                cx.watches.watch(s.id, s.db, k);
            }
            r.ok();
        }
        "UNWATCH" => {
            cx.watches.unwatch(s.id);
            r.ok();
        }
        "QUIT" => {
            r.ok();
            return Ok(Outcome::Close);
        }
        _ => match spec.group {
            Group::Tx => unreachable!("{} is run above", spec.name),
            Group::Strings => strings::run(cx, spec, a, r)?,
            Group::Keys => keys::run(cx, s, spec, a, r)?,
            Group::Hashes => hashes::run(cx, spec, a, r)?,
            Group::Server => server::run(cx, s, spec, a, r)?,
            Group::Sort => sort::run(cx, s, spec, a, r)?,
            Group::Scripts => {
                let o = scripting::run(cx, s, spec, a, r)?;
                if !matches!(o, Outcome::Done) {
                    return Ok(o);
                }
            }
            Group::PubSub => pubsub::run(cx, s, spec, a, r)?,
            Group::Lists => {
                // A blocking command that found nothing parks the client, having changed nothing.
                let o = lists::run(cx, s, spec, a, r)?;
                if !matches!(o, Outcome::Done) {
                    return Ok(o);
                }
            }
            Group::Sets => sets::run(cx, spec, a, r)?,
            Group::Memory => memory::run(cx, spec, a, r)?,
            Group::Cluster => cluster::run(cx, s, spec, a, r)?,
            Group::Zsets => {
                let o = zsets::run(cx, s, spec, a, r)?;
                if !matches!(o, Outcome::Done) {
                    return Ok(o);
                }
            }
        },
    }
    if let Some(b) = around {
        notify::after(cx, spec, a, b)?;
    }
    // A write that changed something touches the keys it names, for the clients that watch
    // them (one refused, or that found nothing to do, does not); ZRANGESTORE and BITOP only
    // their destination, as Redis (their sources are read). COPY (in the database it copies
    // to), SORT ... STORE, DEL and UNLINK (the keys they delete), the pops of several keys (the
    // key they pop) and the set commands touch the keys they change themselves.
    let touches_itself =
        matches!(spec.name, "COPY" | "SORT" | "DEL" | "UNLINK" | "BLPOP" | "BRPOP" | "BZPOPMIN" | "BZPOPMAX")
            || spec.group == Group::Sets;
    if cx.watches.any() && spec.flags.contains(&"write") && cx.store.stores() != stores && !touches_itself {
        let only_first = matches!(spec.name, "ZRANGESTORE" | "BITOP");
        for k in key_args(spec, a).take(if only_first { 1 } else { usize::MAX }) {
            cx.watches.touch(s.db, k);
        }
    }
    Ok(Outcome::Done)
}

/// The key arguments of a command, as its table entry places them (first, last, step; a
/// negative last counts from the end).
pub fn key_args<'a>(spec: &Spec, a: &'a Args) -> impl Iterator<Item = &'a [u8]> + 'a {
    let n = a.len() as i32;
    let last = if spec.last_key < 0 { n + spec.last_key } else { spec.last_key.min(n - 1) };
    let (first, step) = (spec.first_key, spec.step.max(1));
    let idx: Vec<usize> = if first <= 0 {
        Vec::new()
    } else {
        (first..=last).step_by(step as usize).map(|i| i as usize).collect()
    };
    idx.into_iter().map(move |i| a.get(i))
}

/// `EXEC`: the queued commands, in order, in this batch (so in one group), all or nothing. A
/// command's own error (a wrong type, a bad number) is its reply and the others run, as in
/// Redis; a store error (the heap is full, the transaction is larger than a group may carry)
/// undoes the whole transaction, which the caller answers with that one error. The transaction
/// is put back on error, so that a retry in an empty batch runs it again.
fn exec<M: Mem>(cx: &mut Cx<M>, s: &mut Session, out: &mut Vec<u8>) -> Result<Outcome, StoreError> {
    let mut r = Reply { buf: out, proto: s.proto };
    let Some(m) = s.multi.take() else {
        r.error("ERR EXEC without MULTI");
        return Ok(Outcome::Done);
    };
    if m.failed {
        cx.watches.unwatch(s.id);
        r.error("EXECABORT Transaction discarded because of previous errors.");
        return Ok(Outcome::Done);
    }
    // A watched key was touched since WATCH: the transaction does not run.
    if cx.watches.is_dirty(s.id) {
        cx.watches.unwatch(s.id);
        r.null_array();
        return Ok(Outcome::Done);
    }
    r.array(m.queue.len());
    let mut close = false;
    // A blocking command in a transaction answers at once, as its non-blocking form.
    let deny = std::mem::replace(&mut s.deny_blocking, true);
    let mut run = || -> Result<(), StoreError> {
        for cmd in &m.queue {
            let a = Args::Owned(cmd);
            let mut name_buf = [0u8; 32];
            let spec =
                args::upper(a.get(0), &mut name_buf).and_then(find_spec).expect("queued commands are known");
            // A SELECT in the transaction changes the database of the commands after it.
            cx.store.select(s.db.min(cx.databases() - 1));
            let m0 = out.len();
            // The rights may have changed since the command was queued (an ACL SETUSER before).
            cx.settings.acl.sync(cx.store)?;
            if let Err(d) = acl::check(&cx.settings.acl, s, spec, &a) {
                acl::log_refusal(&mut cx.settings.acl, s, &d, &a, "multi", cx.now_ms);
                let reason = match d {
                    acl::Denied::Command(_) => "no permission to execute the command or subcommand",
                    acl::Denied::Key(_) => "no permission to touch the specified keys",
                    acl::Denied::Channel(_) => {
                        "no permission to access one of the channels used as arguments"
                    }
                };
                let mut r = Reply { buf: out, proto: s.proto };
                r.error(&format!(
                    "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC \
                     call. This command is no longer allowed for the following reason: {reason}"
                ));
                cx.errors.count(&out[m0..]);
                observe::record(cx, s, spec, &a, 0, observe::Ending::Rejected);
                continue;
            }
            let start = std::time::Instant::now();
            close |= dispatch(cx, s, spec, &a, out)? == Outcome::Close;
            let failed = out.get(m0) == Some(&b'-');
            if failed {
                cx.errors.count(&out[m0..]);
            }
            let ending = if failed { observe::Ending::Failed } else { observe::Ending::Ok };
            observe::record(cx, s, spec, &a, start.elapsed().as_nanos() as u64, ending);
        }
        cx.check_group()
    };
    let ran = run();
    s.deny_blocking = deny;
    match ran {
        Ok(()) => {
            cx.watches.unwatch(s.id);
            Ok(if close { Outcome::Close } else { Outcome::Done })
        }
        Err(e) => {
            s.multi = Some(m);
            Err(e)
        }
    }
}
