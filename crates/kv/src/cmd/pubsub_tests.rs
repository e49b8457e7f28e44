//! Pub/sub commands and keyspace events against a store in the heap and the server's own
//! registry (`server/pubsub.rs`), for several sessions: replies decoded and compared with
//! Redis's, and the messages each command queued read from the registry's outbox.

use super::pubsub::SubKind;
use super::*;
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use crate::server::pubsub::{MessageKind, Registry, Sub};
use crate::store::VecMem;
use std::cell::{Cell, RefCell};

/// A host whose subscriptions are a real registry; `me` is the client running the command.
struct PubSubHost {
    registry: RefCell<Registry>,
    me: Cell<Sub>,
    pause: Cell<(u64, bool)>,
}

impl Host for PubSubHost {
    fn replication(&self) -> Replication {
        Replication::default()
    }
    fn connected_clients(&self) -> usize {
        1
    }
    fn listen_addr(&self) -> String {
        "127.0.0.1:6379".into()
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn sentinel(&self) -> Sentinel {
        Sentinel::default()
    }
    fn authenticate(&self, _client: &str, _user: &[u8], _password: &[u8]) -> Auth {
        Auth::NoPassword
    }
    fn fixed_setting(&self, _name: &str) -> String {
        String::new()
    }
    fn reset_stats(&self) {}
    fn my_conn(&self) -> client::Conn {
        client::Conn::default()
    }
    fn other_clients(&self, _f: &mut dyn FnMut(&Session, &client::Conn)) {}
    fn kill_clients(&self, _ids: &[u64]) {}
    fn pause(&self, until_ms: u64, all: bool) {
        self.pause.set((until_ms, all));
    }
    fn paused(&self, now_ms: u64, write: bool) -> bool {
        let (until, all) = self.pause.get();
        now_ms < until && (all || write)
    }
    fn monitor(&self) -> bool {
        self.registry.borrow_mut().add_monitor(self.me.get());
        true
    }
    fn has_monitors(&self) -> bool {
        self.registry.borrow().has_monitors()
    }
    fn feed_monitors(&self, line: &[u8]) {
        self.registry.borrow_mut().feed_monitors(line)
    }
    fn subscribe(&self, kind: SubKind, name: &[u8]) -> bool {
        self.registry.borrow_mut().subscribe(self.me.get(), kind, name)
    }
    fn unsubscribe(&self, kind: SubKind, name: &[u8]) -> bool {
        self.registry.borrow_mut().unsubscribe(self.me.get().id, kind, name)
    }
    fn subscriptions(&self, kind: SubKind) -> Vec<Vec<u8>> {
        self.registry.borrow().names_of(self.me.get().id, kind)
    }
    fn publish(&self, channel: &[u8], message: &[u8], sharded: bool) -> usize {
        self.registry.borrow_mut().publish(channel, message, sharded)
    }
    fn pubsub_names(&self, kind: SubKind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        self.registry.borrow().names(kind, pattern)
    }
    fn pubsub_numsub(&self, kind: SubKind, name: &[u8]) -> usize {
        self.registry.borrow().numsub(kind, name)
    }
    fn pubsub_counts(&self) -> (usize, usize, usize) {
        self.registry.borrow().counts()
    }
    fn published(&self) -> usize {
        self.registry.borrow().queued()
    }
    fn unpublish(&self, mark: usize) {
        self.registry.borrow_mut().unpublish(mark)
    }
}

struct Harness {
    host: PubSubHost,
    settings: Settings,
    watches: Watches,
    store: Store<VecMem>,
    sessions: Vec<Session>,
    now_ms: u64,
}

/// A message as a subscriber would read it: (to, kind, pattern, channel, payload).
type Msg = (u64, &'static str, String, String, String);

impl Harness {
    fn new(clients: usize) -> Harness {
        Harness {
            host: PubSubHost {
                registry: RefCell::new(Registry::new(1 << 20)),
                me: Cell::new(Sub { slot: 0, id: 0 }),
                pause: Cell::new((0, false)),
            },
            settings: Settings::default(),
            watches: Watches::default(),
            store: Store::open(VecMem::new(4 << 20), 1024).unwrap(),
            sessions: (0..clients).map(|i| Session::new(i as u64, format!("c{i}"), true)).collect(),
            now_ms: 1_000_000,
        }
    }

    /// Client `c` runs one command: its replies (several for SUBSCRIBE and its kin).
    fn run(&mut self, c: usize, args: &[&str]) -> Vec<Value> {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        self.host.me.set(Sub { slot: c, id: c as u64 });
        let mut out = Vec::new();
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
            now_ms: self.now_ms,
            max_ranges: 1024,
            max_group_bytes: 1 << 30,
            output_limit: 1 << 30,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut Default::default(),
            telemetry: &mut Default::default(),
            cluster: None,
        };
        let o = execute(&mut cx, &mut self.sessions[c], &Args::Parsed { parser: &p, buf: &req }, &mut out)
            .unwrap();
        if o == Outcome::Paused {
            // Not run: no reply (the server runs it again once the pause is over).
            return Vec::new();
        }
        assert_eq!(o, Outcome::Done, "{args:?}");
        self.store.seal(1024).unwrap();
        let mut v = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let (x, n) = decode(&out[at..], &Limits::default()).unwrap().expect("whole replies");
            v.push(x);
            at += n;
        }
        v
    }

    /// Client `c`'s one reply to `args`.
    fn cmd(&mut self, c: usize, args: &[&str]) -> Value {
        let mut v = self.run(c, args);
        assert_eq!(v.len(), 1, "one reply to {args:?}: {v:?}");
        v.remove(0)
    }

    /// The messages queued since last asked.
    fn messages(&mut self) -> Vec<Msg> {
        let mut v = Vec::new();
        self.host.registry.borrow_mut().take_all(&mut v);
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        v.into_iter()
            .map(|m| {
                let kind = match m.kind {
                    MessageKind::Message => "message",
                    MessageKind::PMessage => "pmessage",
                    MessageKind::SMessage => "smessage",
                    MessageKind::Cut => "cut",
                    MessageKind::Monitor => "monitor",
                };
                (m.to.id, kind, m.pattern.as_deref().map(s).unwrap_or_default(), s(&m.channel), s(&m.payload))
            })
            .collect()
    }
}

fn b(s: &str) -> Value {
    Value::bulk(s)
}

fn i(n: i64) -> Value {
    Value::Int(n)
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn arr(v: Vec<Value>) -> Value {
    Value::Array(v)
}

/// A confirmation as RESP2 shows it.
fn conf(word: &str, name: Option<&str>, n: i64) -> Value {
    arr(vec![b(word), name.map_or(Value::Null, b), i(n)])
}

fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn subscribe_and_unsubscribe_confirm_each_name_with_the_count() {
    let mut h = Harness::new(2);
    assert_eq!(
        h.run(0, &["SUBSCRIBE", "a", "b", "a"]),
        [conf("subscribe", Some("a"), 1), conf("subscribe", Some("b"), 2), conf("subscribe", Some("a"), 2)]
    );
    assert_eq!(h.run(0, &["PSUBSCRIBE", "p*"]), [conf("psubscribe", Some("p*"), 3)]);
    assert_eq!(
        h.run(0, &["SSUBSCRIBE", "s"]),
        [conf("ssubscribe", Some("s"), 1)],
        "shard channels count apart"
    );
    assert_eq!(h.sessions[0].subs, pubsub::SubCounts { channels: 2, patterns: 1, shard: 1 });
    assert_eq!(h.run(0, &["UNSUBSCRIBE", "nope"]), [conf("unsubscribe", Some("nope"), 3)]);
    // Without arguments: every channel, in the order subscribed.
    assert_eq!(
        h.run(0, &["UNSUBSCRIBE"]),
        [conf("unsubscribe", Some("a"), 2), conf("unsubscribe", Some("b"), 1)]
    );
    assert_eq!(h.run(0, &["UNSUBSCRIBE"]), [conf("unsubscribe", None, 1)], "none left: one reply, a null");
    assert_eq!(h.run(0, &["PUNSUBSCRIBE"]), [conf("punsubscribe", Some("p*"), 0)]);
    assert_eq!(h.run(0, &["SUNSUBSCRIBE"]), [conf("sunsubscribe", Some("s"), 0)]);
    assert!(!h.sessions[0].subs.any());
    // A client that never subscribed is answered too.
    assert_eq!(h.run(1, &["PUNSUBSCRIBE"]), [conf("punsubscribe", None, 0)]);
    assert_eq!(h.host.registry.borrow().counts(), (0, 0, 0));
}

#[test]
fn resp3_confirmations_and_pushes_and_resp2_subscribed_mode() {
    let mut h = Harness::new(2);
    h.cmd(1, &["HELLO", "3"]);
    assert_eq!(
        h.run(1, &["SUBSCRIBE", "c"]),
        [Value::Push(vec![b("subscribe"), b("c"), i(1)])],
        "a push in RESP3"
    );
    // RESP3: anything goes while subscribed.
    assert_eq!(h.cmd(1, &["SET", "k", "v"]), ok());
    assert_eq!(h.cmd(1, &["PING"]), Value::Simple(b"PONG".to_vec()));
    // RESP2: only the pub/sub commands, PING, QUIT and RESET, with Redis's words.
    h.run(0, &["SUBSCRIBE", "c"]);
    assert_eq!(
        err(&h.cmd(0, &["GET", "k"])),
        "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in \
         this context"
    );
    assert!(err(&h.cmd(0, &["CLIENT", "LIST"])).contains("'client|list'"));
    assert!(err(&h.cmd(0, &["PUBLISH", "c", "x"])).contains("'publish'"));
    assert_eq!(h.cmd(0, &["PING"]), arr(vec![b("pong"), b("")]));
    assert_eq!(h.cmd(0, &["PING", "hi"]), arr(vec![b("pong"), b("hi")]));
    assert!(err(&h.cmd(0, &["PING", "a", "b"])).contains("wrong number of arguments"));
    assert_eq!(h.run(0, &["SUBSCRIBE", "d"]), [conf("subscribe", Some("d"), 2)]);
    assert!(err(&h.cmd(0, &["NOSUCH"])).starts_with("ERR unknown command"), "unknown first, as Redis");
    assert_eq!(h.cmd(2 - 1, &["PUBLISH", "c", "hello"]), i(2));
    assert_eq!(
        h.messages(),
        [
            (1, "message", String::new(), "c".into(), "hello".into()),
            (0, "message", String::new(), "c".into(), "hello".into())
        ]
    );
    h.run(0, &["UNSUBSCRIBE"]);
    assert_eq!(h.cmd(0, &["PING"]), Value::Simple(b"PONG".to_vec()), "out of subscribed mode");
    assert_eq!(h.cmd(0, &["GET", "k"]), b("v"));
}

#[test]
fn confirmations_go_whatever_client_reply_says() {
    let mut h = Harness::new(1);
    assert!(h.run(0, &["CLIENT", "REPLY", "OFF"]).is_empty());
    assert_eq!(h.run(0, &["SUBSCRIBE", "c"]), [conf("subscribe", Some("c"), 1)]);
    assert!(h.run(0, &["PING"]).is_empty());
    assert_eq!(h.run(0, &["PSUBSCRIBE", "c*"]), [conf("psubscribe", Some("c*"), 2)]);
    h.run(0, &["CLIENT", "REPLY", "ON"]);
    h.run(0, &["UNSUBSCRIBE"]);
    h.run(0, &["PUNSUBSCRIBE"]);
    assert!(h.run(0, &["CLIENT", "REPLY", "SKIP"]).is_empty());
    assert_eq!(h.run(0, &["SSUBSCRIBE", "s"]), [conf("ssubscribe", Some("s"), 1)]);
    assert_eq!(h.run(0, &["SUNSUBSCRIBE"]), [conf("sunsubscribe", Some("s"), 0)], "the skip was used up");
}

#[test]
fn publish_reaches_channels_patterns_and_shards_and_pubsub_reports_them() {
    let mut h = Harness::new(4);
    h.run(0, &["SUBSCRIBE", "news.tech"]);
    h.run(1, &["PSUBSCRIBE", "news.*", "*.tech"]);
    h.run(2, &["SSUBSCRIBE", "news.tech"]);
    assert_eq!(h.cmd(3, &["PUBLISH", "news.tech", "x"]), i(3));
    let m = h.messages();
    assert_eq!(m[0], (0, "message", String::new(), "news.tech".into(), "x".into()));
    assert_eq!(m[1], (1, "pmessage", "news.*".into(), "news.tech".into(), "x".into()));
    assert_eq!(m[2], (1, "pmessage", "*.tech".into(), "news.tech".into(), "x".into()));
    assert!(err(&h.cmd(0, &["SPUBLISH", "news.tech", "y"])).contains("'spublish'"));
    assert_eq!(h.cmd(3, &["SPUBLISH", "news.tech", "y"]), i(1));
    assert_eq!(h.messages(), [(2, "smessage", String::new(), "news.tech".into(), "y".into())]);
    assert_eq!(h.run(2, &["SUNSUBSCRIBE"]).len(), 1);
    assert_eq!(h.cmd(3, &["SPUBLISH", "news.tech", "y"]), i(0));
    assert_eq!(h.cmd(3, &["PUBLISH", "nothing", "y"]), i(0));
    assert_eq!(
        h.cmd(3, &["PUBSUB", "NUMSUB", "news.tech", "other"]),
        arr(vec![b("news.tech"), i(1), b("other"), i(0)])
    );
    assert_eq!(h.cmd(3, &["PUBSUB", "NUMPAT"]), i(2));
    assert_eq!(h.cmd(3, &["PUBSUB", "CHANNELS"]), arr(vec![b("news.tech")]));
    assert_eq!(h.cmd(3, &["PUBSUB", "CHANNELS", "x*"]), arr(vec![]));
    assert_eq!(h.cmd(3, &["PUBSUB", "SHARDCHANNELS"]), arr(vec![]));
    assert_eq!(h.cmd(3, &["PUBSUB", "SHARDNUMSUB", "news.tech"]), arr(vec![b("news.tech"), i(0)]));
    assert_eq!(err(&h.cmd(3, &["PUBSUB", "NOPE"])), "ERR unknown subcommand 'NOPE'. Try PUBSUB HELP.");
    assert_eq!(
        err(&h.cmd(3, &["PUBSUB", "NUMPAT", "x"])),
        "ERR wrong number of arguments for 'pubsub|numpat' command"
    );
    assert_eq!(
        err(&h.cmd(3, &["PUBSUB", "channels", "a", "b"])),
        "ERR unknown subcommand or wrong number of arguments for 'channels'. Try PUBSUB HELP."
    );
    let Value::Array(help) = h.cmd(3, &["PUBSUB", "HELP"]) else { panic!() };
    assert_eq!(help.len(), 14);
}

#[test]
fn ssubscribe_is_refused_inside_exec_and_subscribe_is_not() {
    let mut h = Harness::new(1);
    h.cmd(0, &["MULTI"]);
    h.cmd(0, &["SSUBSCRIBE", "s"]);
    h.cmd(0, &["SUBSCRIBE", "c"]);
    let Value::Array(v) = h.cmd(0, &["EXEC"]) else { panic!() };
    assert_eq!(err(&v[0]), "ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client");
    assert_eq!(v[1], conf("subscribe", Some("c"), 1));
}

#[test]
fn keyspace_events_follow_the_flags_and_name_what_redis_names() {
    let mut h = Harness::new(2);
    h.run(1, &["PSUBSCRIBE", "*"]);
    h.cmd(0, &["SET", "quiet", "v"]);
    assert!(h.messages().is_empty(), "no class on");
    assert_eq!(h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]), ok());
    assert_eq!(
        h.cmd(0, &["CONFIG", "GET", "notify-keyspace-events"]),
        arr(vec![b("notify-keyspace-events"), b("AKE")])
    );
    let ev =
        |h: &mut Harness| -> Vec<(String, String)> { h.messages().into_iter().map(|m| (m.3, m.4)).collect() };
    h.cmd(0, &["SET", "foo", "bar", "EX", "100"]);
    assert_eq!(
        ev(&mut h),
        [
            ("__keyspace@0__:foo".to_string(), "set".to_string()),
            ("__keyevent@0__:set".into(), "foo".into()),
            ("__keyspace@0__:foo".into(), "expire".into()),
            ("__keyevent@0__:expire".into(), "foo".into())
        ]
    );
    h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "Kgl$h"]);
    h.cmd(0, &["SELECT", "3"]);
    h.cmd(0, &["RPUSH", "l", "a", "b"]);
    h.cmd(0, &["LPOP", "l", "5"]);
    h.cmd(0, &["HSET", "h", "f", "1"]);
    h.cmd(0, &["HINCRBY", "h", "f", "2"]);
    h.cmd(0, &["HDEL", "h", "f", "g"]);
    h.cmd(0, &["INCR", "n"]);
    h.cmd(0, &["RENAME", "n", "m"]);
    h.cmd(0, &["EXPIRE", "m", "-1"]);
    h.cmd(0, &["DEL", "nothing"]);
    let names: Vec<String> = ev(&mut h).into_iter().map(|(c, e)| format!("{c} {e}")).collect();
    assert_eq!(
        names,
        [
            "__keyspace@3__:l rpush",
            "__keyspace@3__:l lpop",
            "__keyspace@3__:l del",
            "__keyspace@3__:h hset",
            "__keyspace@3__:h hincrby",
            "__keyspace@3__:h hdel",
            "__keyspace@3__:h del",
            "__keyspace@3__:n incrby",
            "__keyspace@3__:n rename_from",
            "__keyspace@3__:m rename_to",
            "__keyspace@3__:m del",
        ]
    );
    // A class left out is not published; a refused command publishes nothing.
    h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "Kl"]);
    h.cmd(0, &["SET", "s", "1"]);
    assert!(err(&h.cmd(0, &["LPUSH", "s", "x"])).starts_with("WRONGTYPE"));
    assert!(h.messages().is_empty());
    assert!(err(&h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "KEq"]))
        .ends_with("Invalid event class character. Use 'Ag$lshzxeKEtmdn'."));
}

#[test]
fn an_undone_command_raises_nothing_and_a_transaction_raises_in_order_once_applied() {
    let mut h = Harness::new(2);
    h.run(1, &["PSUBSCRIBE", "__keyevent@*"]);
    h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "EA"]);
    h.cmd(0, &["MULTI"]);
    h.cmd(0, &["SET", "a", "1"]);
    h.cmd(0, &["LPUSH", "b", "x"]);
    h.cmd(0, &["PUBLISH", "__keyevent@0__:custom", "c"]);
    h.cmd(0, &["DEL", "a"]);
    assert!(h.messages().is_empty(), "queued, not run");
    h.cmd(0, &["EXEC"]);
    let m: Vec<(String, String)> = h.messages().into_iter().map(|m| (m.3, m.4)).collect();
    let m: Vec<String> = m.iter().map(|(c, p)| format!("{c} {p}")).collect();
    assert_eq!(
        m,
        ["__keyevent@0__:set a", "__keyevent@0__:lpush b", "__keyevent@0__:custom c", "__keyevent@0__:del a"]
    );
    // Fill the heap: the SET that does not fit is undone, and raised nothing.
    let big = "x".repeat(1 << 20);
    let mut n = 0;
    loop {
        let r = h.cmd(0, &["SET", &format!("k{n}"), &big]);
        if r != ok() {
            assert!(err(&r).starts_with("OOM"), "{r:?}");
            break;
        }
        n += 1;
    }
    let m = h.messages();
    assert_eq!(m.len(), n, "one event per SET that stayed: {m:?}");
    h.cmd(0, &["MULTI"]);
    h.cmd(0, &["DEL", "b"]);
    h.cmd(0, &["SET", "again", &big]);
    assert!(err(&h.cmd(0, &["EXEC"])).starts_with("OOM"));
    assert!(h.messages().is_empty(), "an undone transaction raised nothing");
    assert_eq!(h.cmd(0, &["EXISTS", "b"]), i(1));
}

#[test]
fn new_keymiss_and_lazy_expired_are_raised_around_commands() {
    let mut h = Harness::new(2);
    h.run(1, &["PSUBSCRIBE", "__keyevent@*"]);
    h.cmd(0, &["CONFIG", "SET", "notify-keyspace-events", "Enmx"]);
    assert_eq!(
        h.cmd(0, &["CONFIG", "GET", "notify-keyspace-events"]),
        arr(vec![b("notify-keyspace-events"), b("xnEm")])
    );
    h.cmd(0, &["SET", "foo", "bar"]);
    h.cmd(0, &["SET", "foo", "baz"]);
    h.cmd(0, &["GET", "nope"]);
    h.cmd(0, &["PSETEX", "short", "100", "v"]);
    h.now_ms += 200;
    assert_eq!(h.cmd(0, &["EXISTS", "short"]), i(0));
    assert_eq!(h.store.keys(), 1, "the expired key was removed as it was named");
    let m: Vec<String> = h.messages().into_iter().map(|m| format!("{} {}", m.3, m.4)).collect();
    assert_eq!(
        m,
        [
            "__keyevent@0__:new foo",
            "__keyevent@0__:keymiss nope",
            "__keyevent@0__:new short",
            "__keyevent@0__:expired short",
            "__keyevent@0__:keymiss short",
        ]
    );
}

#[test]
fn reset_leaves_every_subscription_and_the_connection_state() {
    let mut h = Harness::new(2);
    h.cmd(0, &["HELLO", "3"]);
    h.cmd(0, &["SELECT", "2"]);
    h.cmd(0, &["CLIENT", "SETNAME", "me"]);
    h.run(0, &["SUBSCRIBE", "a", "b"]);
    h.run(0, &["PSUBSCRIBE", "p*"]);
    h.run(0, &["SSUBSCRIBE", "s"]);
    h.cmd(0, &["MULTI"]);
    assert_eq!(h.cmd(0, &["RESET"]), Value::Simple(b"RESET".to_vec()), "run, not queued");
    let s = &h.sessions[0];
    assert!(
        !s.subs.any()
            && s.multi.is_none()
            && s.db == 0
            && s.name.is_none()
            && s.proto == crate::resp::Proto::Resp2
    );
    assert_eq!(h.host.registry.borrow().counts(), (0, 0, 0));
    assert_eq!(h.cmd(1, &["PUBLISH", "a", "x"]), i(0));
    // RESET is allowed in RESP2 subscribed mode, and leaves it.
    h.run(0, &["SUBSCRIBE", "c"]);
    assert_eq!(h.cmd(0, &["RESET"]), Value::Simple(b"RESET".to_vec()));
    assert_eq!(h.cmd(0, &["GET", "x"]), Value::Null);
}

#[test]
fn client_list_shows_subscriptions_and_types() {
    let mut h = Harness::new(1);
    h.cmd(0, &["HELLO", "3"]);
    h.run(0, &["SUBSCRIBE", "a", "b"]);
    h.run(0, &["PSUBSCRIBE", "p*"]);
    let Value::Bulk(l) = h.cmd(0, &["CLIENT", "INFO"]) else { panic!() };
    let l = String::from_utf8(l).unwrap();
    assert!(l.contains(" flags=P ") && l.contains(" sub=2 psub=1 ssub=0 "), "{l}");
    let Value::Bulk(l) = h.cmd(0, &["CLIENT", "LIST", "TYPE", "pubsub"]) else { panic!() };
    assert!(!l.is_empty());
    let Value::Bulk(l) = h.cmd(0, &["CLIENT", "LIST", "TYPE", "normal"]) else { panic!() };
    assert!(l.is_empty(), "a subscribed client is not a normal one");
}

#[test]
fn client_pause_write_holds_publish_back_as_redis_does() {
    let mut h = Harness::new(3);
    h.run(1, &["SUBSCRIBE", "c"]);
    h.cmd(0, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    assert!(h.run(0, &["PUBLISH", "c", "x"]).is_empty(), "held back");
    assert!(h.run(0, &["SPUBLISH", "c", "x"]).is_empty(), "held back");
    h.cmd(0, &["MULTI"]);
    h.cmd(0, &["PUBLISH", "c", "x"]);
    assert!(h.run(0, &["EXEC"]).is_empty(), "a transaction that publishes is held back");
    assert_eq!(h.cmd(2, &["PUBSUB", "NUMSUB", "c"]), arr(vec![b("c"), i(1)]), "reads go on");
    assert!(h.messages().is_empty());
    h.cmd(2, &["CLIENT", "UNPAUSE"]);
    assert_eq!(h.cmd(0, &["EXEC"]), arr(vec![i(1)]));
    assert_eq!(h.messages().len(), 1);
}

#[test]
fn monitors_get_each_command_run_after_as_redis_shows_it_but_not_admin_ones_or_refused_ones() {
    let mut h = Harness::new(3);
    assert_eq!(h.cmd(0, &["MONITOR"]), ok());
    assert_eq!(h.cmd(2, &["MONITOR"]), ok());
    let Value::Bulk(me) = h.cmd(2, &["CLIENT", "INFO"]) else { panic!("CLIENT INFO") };
    assert!(String::from_utf8_lossy(&me).contains(" flags=O "), "{}", String::from_utf8_lossy(&me));
    h.cmd(1, &["SELECT", "2"]);
    h.cmd(1, &["set", "k", "a \"b\"\n"]);
    // Refused before it ran (arity), an admin command, a password: not shown.
    assert!(err(&h.cmd(1, &["GET"])).contains("wrong number"));
    h.cmd(1, &["CONFIG", "GET", "port"]);
    h.cmd(1, &["AUTH", "secret"]);
    // A command that ran and failed is shown.
    assert!(err(&h.cmd(1, &["INCR", "k"])).contains("not an integer"));
    let msgs = h.messages();
    let lines: Vec<(u64, String)> = msgs
        .iter()
        .map(|(to, kind, _, _, payload)| {
            assert_eq!(*kind, "monitor");
            // Unix seconds and microseconds first: the rest is fixed.
            let (time, rest) = payload.split_once(' ').unwrap();
            let (s, us) = time.split_once('.').unwrap();
            assert!(s.parse::<u64>().unwrap() > 1_600_000_000 && us.len() == 6, "{payload}");
            (*to, rest.to_string())
        })
        .collect();
    let want = |line: &str| [(0, line.to_string()), (2, line.to_string())];
    let mut expected = Vec::new();
    // After it ran, as Redis 7.0 feeds monitors: the database it selected.
    expected.extend(want(r#"[2 c1] "SELECT" "2""#));
    expected.extend(want(r#"[2 c1] "set" "k" "a \"b\"\n""#));
    expected.extend(want(r#"[2 c1] "INCR" "k""#));
    assert_eq!(lines, expected);
    // Inside a transaction MONITOR is refused, as Redis refuses it.
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["MONITOR"]);
    let v = h.cmd(1, &["EXEC"]);
    assert_eq!(v, arr(vec![Value::Error(b"ERR MONITOR isn't allowed for DENY BLOCKING client".to_vec())]));
}
