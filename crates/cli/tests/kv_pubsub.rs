//! Pub/sub in `mojim kv` with real clients on sockets: RESP2 subscribers (patterns, shard
//! channels, the replies of UNSUBSCRIBE without arguments, subscribed mode's rules), RESP3
//! subscribers (pushes, any command), a subscriber that does not read closed past `[kv]
//! output_limit` while the publisher and the other subscribers go on, hostile input from
//! subscribed clients, and keyspace events for the commands that raise them (SET, DEL, EXPIRE,
//! keys that expire, LPUSH, HSET, a transaction). Each test runs a mirror and `mojim kv` as
//! child processes.

mod common;

use common::edit_kv;
use common::kv::{wait_for, KvCluster, Resp};
use mojim_kv::resp::Value;

fn b(s: &str) -> Value {
    Value::bulk(s)
}

fn i(n: i64) -> Value {
    Value::Int(n)
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

/// A RESP2 pub/sub reply: an array of these.
fn arr(v: &[Value]) -> Value {
    Value::Array(v.to_vec())
}

/// The same as a RESP3 push.
fn push(v: &[Value]) -> Value {
    Value::Push(v.to_vec())
}

fn send(c: &mut Resp, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.send(&a);
}

/// The next `n` replies.
fn replies(c: &mut Resp, n: usize) -> Vec<Value> {
    (0..n).map(|_| c.read().expect("a reply")).collect()
}

/// INFO's `field` (a number).
fn info(c: &mut Resp, field: &str) -> u64 {
    let Value::Bulk(text) = c.cmd(&["INFO", "stats"]) else { panic!("INFO answers a bulk string") };
    let text = String::from_utf8(text).expect("utf-8");
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).expect("the field");
    line.trim().parse().expect("a number")
}

#[test]
fn resp2_subscribers_get_channels_patterns_and_shards_and_only_pubsub_commands_run() {
    let k = KvCluster::new("kv-pubsub-resp2", 16 << 20);
    let mut sub = k.client();
    let mut pat = k.client();
    let mut publisher = k.client();
    send(&mut sub, &["SUBSCRIBE", "chan1", "chan2", "chan1"]);
    assert_eq!(
        replies(&mut sub, 3),
        [
            arr(&[b("subscribe"), b("chan1"), i(1)]),
            arr(&[b("subscribe"), b("chan2"), i(2)]),
            arr(&[b("subscribe"), b("chan1"), i(2)])
        ]
    );
    send(&mut pat, &["PSUBSCRIBE", "chan*", "other.*"]);
    assert_eq!(replies(&mut pat, 2)[1], arr(&[b("psubscribe"), b("other.*"), i(2)]));
    assert_eq!(publisher.cmd(&["PUBLISH", "chan1", "hello"]), i(2));
    assert_eq!(publisher.cmd(&["PUBLISH", "nobody", "x"]), i(0));
    assert_eq!(sub.read(), Some(arr(&[b("message"), b("chan1"), b("hello")])));
    assert_eq!(pat.read(), Some(arr(&[b("pmessage"), b("chan*"), b("chan1"), b("hello")])));
    assert_eq!(
        publisher.cmd(&["PUBSUB", "NUMSUB", "chan1", "chan2", "x"]),
        arr(&[b("chan1"), i(1), b("chan2"), i(1), b("x"), i(0)])
    );
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMPAT"]), i(2));
    assert_eq!(publisher.cmd(&["PUBSUB", "CHANNELS", "chan*"]), arr(&[b("chan1"), b("chan2")]));
    // Subscribed (RESP2): other commands are refused with Redis's words, PING answers an array.
    assert_eq!(
        sub.cmd(&["GET", "k"]),
        Value::Error(
            b"ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are \
              allowed in this context"
                .to_vec()
        )
    );
    assert_eq!(sub.cmd(&["PING"]), arr(&[b("pong"), b("")]));
    // Without arguments: a reply for each channel, the count going down.
    send(&mut sub, &["UNSUBSCRIBE"]);
    let mut got = replies(&mut sub, 2);
    got.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(got, [arr(&[b("unsubscribe"), b("chan1"), i(1)]), arr(&[b("unsubscribe"), b("chan2"), i(0)])]);
    send(&mut sub, &["UNSUBSCRIBE"]);
    assert_eq!(sub.read(), Some(arr(&[b("unsubscribe"), Value::Null, i(0)])), "nothing left: one reply");
    assert_eq!(sub.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()), "out of subscribed mode");
    assert_eq!(sub.cmd(&["SET", "k", "v"]), ok());
    // Shard channels are their own namespace.
    send(&mut sub, &["SSUBSCRIBE", "chan1"]);
    assert_eq!(sub.read(), Some(arr(&[b("ssubscribe"), b("chan1"), i(1)])));
    assert_eq!(publisher.cmd(&["SPUBLISH", "chan1", "s"]), i(1));
    assert_eq!(sub.read(), Some(arr(&[b("smessage"), b("chan1"), b("s")])));
    assert_eq!(publisher.cmd(&["PUBSUB", "SHARDNUMSUB", "chan1"]), arr(&[b("chan1"), i(1)]));
    // CLIENT LIST sees it; RESET leaves everything.
    let Value::Bulk(list) = publisher.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]) else { panic!() };
    let list = String::from_utf8(list).unwrap();
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("flags=P ") && list.contains("sub=0 psub=0 ssub=1"), "{list}");
    assert_eq!(sub.cmd(&["RESET"]), Value::Simple(b"RESET".to_vec()));
    assert_eq!(publisher.cmd(&["SPUBLISH", "chan1", "s"]), i(0));
    let Value::Bulk(stats) = publisher.cmd(&["INFO", "stats"]) else { panic!() };
    let stats = String::from_utf8(stats).unwrap();
    assert!(
        stats.contains("pubsub_channels:0\r\npubsub_patterns:2\r\npubsubshard_channels:0\r\n"),
        "{stats}"
    );
}

#[test]
fn resp3_subscribers_get_pushes_between_their_replies_and_may_run_anything() {
    let k = KvCluster::new("kv-pubsub-resp3", 16 << 20);
    let mut c = k.client();
    let mut other = k.client();
    let Value::Map(_) = c.cmd(&["HELLO", "3"]) else { panic!("HELLO 3 answers a map") };
    send(&mut c, &["SUBSCRIBE", "news"]);
    assert_eq!(c.read(), Some(push(&[b("subscribe"), b("news"), i(1)])));
    assert_eq!(c.cmd(&["SET", "k", "v"]), ok(), "any command, while subscribed");
    assert_eq!(other.cmd(&["PUBLISH", "news", "one"]), i(1));
    assert_eq!(c.read(), Some(push(&[b("message"), b("news"), b("one")])));
    // Its own message follows its reply.
    send(&mut c, &["PUBLISH", "news", "mine"]);
    send(&mut c, &["GET", "k"]);
    assert_eq!(replies(&mut c, 3), [i(1), push(&[b("message"), b("news"), b("mine")]), b("v")]);
    // Keyspace events to itself, after the EXEC's reply (never inside it).
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "E$"]), ok());
    send(&mut c, &["PSUBSCRIBE", "__keyevent@0__:*"]);
    assert_eq!(c.read(), Some(push(&[b("psubscribe"), b("__keyevent@0__:*"), i(2)])));
    send(&mut c, &["MULTI"]);
    send(&mut c, &["SET", "a", "1"]);
    send(&mut c, &["INCR", "a"]);
    send(&mut c, &["EXEC"]);
    let got = replies(&mut c, 6);
    assert_eq!(got[3], Value::Array(vec![ok(), i(2)]));
    assert_eq!(got[4], push(&[b("pmessage"), b("__keyevent@0__:*"), b("__keyevent@0__:set"), b("a")]));
    assert_eq!(got[5], push(&[b("pmessage"), b("__keyevent@0__:*"), b("__keyevent@0__:incrby"), b("a")]));
    // CLIENT REPLY OFF silences replies, not pushes.
    send(&mut c, &["CLIENT", "REPLY", "OFF"]);
    send(&mut c, &["SET", "quiet", "1"]);
    assert_eq!(other.cmd(&["PUBLISH", "news", "two"]), i(1));
    assert_eq!(
        replies(&mut c, 2),
        [
            push(&[b("pmessage"), b("__keyevent@0__:*"), b("__keyevent@0__:set"), b("quiet")]),
            push(&[b("message"), b("news"), b("two")])
        ]
    );
}

#[test]
fn a_subscriber_that_does_not_read_is_closed_past_the_output_limit_and_the_others_go_on() {
    let k = KvCluster::with("kv-pubsub-slow", 64 << 20, |f| {
        edit_kv(f, |k| {
            k.max_bulk = "1MiB".into();
            k.output_limit = "2MiB".into();
        });
    });
    let mut slow = k.client();
    send(&mut slow, &["SUBSCRIBE", "firehose"]);
    assert_eq!(slow.read(), Some(arr(&[b("subscribe"), b("firehose"), i(1)])));
    // A subscriber that reads everything, in a thread of its own.
    let mut fast = k.client();
    send(&mut fast, &["SUBSCRIBE", "firehose"]);
    assert_eq!(fast.read(), Some(arr(&[b("subscribe"), b("firehose"), i(1)])));
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        loop {
            match fast.read() {
                Some(Value::Array(v)) if v.len() == 3 && v[2] == b("stop") => return n,
                Some(Value::Array(v)) if v.len() == 3 => n += 1,
                other => panic!("the reading subscriber got {other:?}"),
            }
        }
    });
    // 16 KiB messages, 32 at a time (well within the reader's limit), until the slow
    // subscriber is gone (bounded: a few MiB of socket buffers and 2 MiB of output are passed
    // long before 256 MiB).
    let mut publisher = k.client();
    let message = "m".repeat(16 << 10);
    let mut sent = 0u64;
    loop {
        for _ in 0..32 {
            send(&mut publisher, &["PUBLISH", "firehose", &message]);
        }
        let got = replies(&mut publisher, 32);
        sent += 32;
        if got.last() == Some(&i(1)) {
            break;
        }
        assert!(got.iter().all(|r| *r == i(2) || *r == i(1)), "{got:?}");
        assert!(sent < 16384, "the subscriber that does not read was never closed");
    }
    assert_eq!(info(&mut publisher, "client_output_limit_disconnections"), 1);
    assert_eq!(publisher.cmd(&["PUBSUB", "NUMSUB", "firehose"]), arr(&[b("firehose"), i(1)]));
    // Its connection is closed (after whatever the kernel had of it).
    assert!(slow.closed());
    // The publisher goes on, and the reading subscriber got every message.
    assert_eq!(publisher.cmd(&["PUBLISH", "firehose", "stop"]), i(1));
    assert_eq!(reader.join().expect("the reader"), sent);
    assert_eq!(publisher.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}

#[test]
fn hostile_input_from_subscribed_clients_ends_that_connection_at_most() {
    let k = KvCluster::new("kv-pubsub-hostile", 64 << 20);
    let mut publisher = k.client();
    // 100 000 channels in one SUBSCRIBE: each confirmed, then all left at once.
    let names: Vec<String> = (0..100_000).map(|n| format!("c{n}")).collect();
    let mut many = k.client();
    let mut args: Vec<&[u8]> = vec![b"SUBSCRIBE"];
    args.extend(names.iter().map(|n| n.as_bytes()));
    many.send(&args);
    let last = (0..names.len()).map(|_| many.read().expect("a confirmation")).last();
    assert_eq!(last, Some(arr(&[b("subscribe"), b("c99999"), i(100_000)])));
    assert_eq!(publisher.cmd(&["PUBLISH", "c500", "x"]), i(1));
    assert_eq!(many.read(), Some(arr(&[b("message"), b("c500"), b("x")])));
    send(&mut many, &["UNSUBSCRIBE"]);
    let last = (0..names.len()).map(|_| many.read().expect("a confirmation")).last();
    assert_eq!(last.map(|v| matches!(&v, Value::Array(a) if a[2] == i(0))), Some(true));
    // Binary names and patterns, a pattern that backtracks, an empty channel.
    let mut odd = k.client();
    odd.send(&[b"PSUBSCRIBE", b"\x00\xff*", b"*a*a*a*a*a*a*a*a*a*a*a*b", b"[", b"\\"]);
    assert_eq!(replies(&mut odd, 4)[3], arr(&[b("psubscribe"), b("\\"), i(4)]));
    let long = "a".repeat(100_000);
    assert_eq!(publisher.cmd(&["PUBLISH", &long, "x"]), i(0));
    publisher.send(&[b"PUBLISH", b"\x00\xffzz", b"bin"]);
    assert_eq!(publisher.read(), Some(i(1)));
    assert_eq!(
        odd.read(),
        Some(Value::Array(vec![
            b("pmessage"),
            Value::bulk(b"\x00\xff*"),
            Value::bulk(b"\x00\xffzz"),
            b("bin")
        ]))
    );
    assert_eq!(publisher.cmd(&["PUBLISH", "", ""]), i(0));
    // A protocol error while subscribed closes that client alone, and its subscriptions go.
    let mut broken = k.client();
    send(&mut broken, &["SUBSCRIBE", "gone"]);
    assert_eq!(broken.read(), Some(arr(&[b("subscribe"), b("gone"), i(1)])));
    broken.send_raw(b"*1\r\n$x\r\n").expect("send");
    let Some(Value::Error(e)) = broken.read() else { panic!("a protocol error") };
    assert!(String::from_utf8_lossy(&e).starts_with("ERR Protocol error"), "{e:?}");
    assert!(broken.closed());
    wait_for("the broken client's subscription to go", || {
        (publisher.cmd(&["PUBSUB", "NUMSUB", "gone"]) == arr(&[b("gone"), i(0)])).then_some(())
    });
    // A subscriber that hangs up while messages are on their way.
    let mut leaver = k.client();
    send(&mut leaver, &["SUBSCRIBE", "busy"]);
    assert_eq!(leaver.read(), Some(arr(&[b("subscribe"), b("busy"), i(1)])));
    for _ in 0..100 {
        send(&mut publisher, &["PUBLISH", "busy", "x"]);
    }
    drop(leaver);
    let _ = replies(&mut publisher, 100);
    wait_for("the leaver's subscription to go", || {
        (publisher.cmd(&["PUBLISH", "busy", "x"]) == i(0)).then_some(())
    });
    // Refused in subscribed mode: a command that would have changed something changes nothing.
    send(&mut odd, &["SET", "k", "v"]);
    assert!(matches!(odd.read(), Some(Value::Error(_))));
    assert_eq!(publisher.cmd(&["EXISTS", "k"]), i(0));
    assert_eq!(publisher.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}

#[test]
fn keyspace_events_for_writes_and_keys_that_expire() {
    let k = KvCluster::new("kv-pubsub-keyspace", 16 << 20);
    let mut c = k.client();
    let mut listener = k.client();
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]), ok());
    send(&mut listener, &["PSUBSCRIBE", "__key*@0__:*"]);
    assert_eq!(listener.read(), Some(arr(&[b("psubscribe"), b("__key*@0__:*"), i(1)])));
    // Each event twice: on the key's channel (the event's name) and the event's (the key).
    let mut next = |key: &str, event: &str| {
        assert_eq!(
            listener.read(),
            Some(arr(&[b("pmessage"), b("__key*@0__:*"), b(&format!("__keyspace@0__:{key}")), b(event)]))
        );
        assert_eq!(
            listener.read(),
            Some(arr(&[b("pmessage"), b("__key*@0__:*"), b(&format!("__keyevent@0__:{event}")), b(key)]))
        );
    };
    assert_eq!(c.cmd(&["SET", "s", "1"]), ok());
    next("s", "set");
    assert_eq!(c.cmd(&["EXPIRE", "s", "100"]), i(1));
    next("s", "expire");
    assert_eq!(c.cmd(&["DEL", "s", "nothing"]), i(1));
    next("s", "del");
    assert_eq!(c.cmd(&["LPUSH", "l", "a", "b"]), i(2));
    next("l", "lpush");
    assert_eq!(c.cmd(&["HSET", "h", "f", "v"]), i(1));
    next("h", "hset");
    // A transaction's events, in order, once it applied.
    send(&mut c, &["MULTI"]);
    send(&mut c, &["RPOP", "l"]);
    send(&mut c, &["RPOP", "l"]);
    send(&mut c, &["HDEL", "h", "f"]);
    send(&mut c, &["EXEC"]);
    assert_eq!(replies(&mut c, 5)[4], Value::Array(vec![b("a"), b("b"), i(1)]));
    next("l", "rpop");
    next("l", "rpop");
    next("l", "del");
    next("h", "hdel");
    next("h", "del");
    // A command that fails raises nothing: the next event is the SET's.
    assert!(matches!(c.cmd(&["LPUSH", "h2", "x"]), Value::Int(1)));
    next("h2", "lpush");
    assert!(matches!(c.cmd(&["HSET", "h2", "f", "v"]), Value::Error(_)));
    // A key that expires, found by the active pass.
    assert_eq!(c.cmd(&["SET", "t", "1", "PX", "50"]), ok());
    next("t", "set");
    next("t", "expire");
    next("t", "expired");
    // One named by a command after it expired goes as it is named.
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Ex"]), ok());
    send(&mut c, &["SET", "u", "1", "PX", "1"]);
    send(&mut c, &["GET", "u"]);
    assert_eq!(c.read(), Some(ok()));
    let got = c.read().expect("GET's reply");
    assert!(got == Value::Null || got == b("1"), "{got:?}");
    assert_eq!(
        listener.read(),
        Some(arr(&[b("pmessage"), b("__key*@0__:*"), b("__keyevent@0__:expired"), b("u")]))
    );
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "notify-keyspace-events"]),
        arr(&[b("notify-keyspace-events"), b("xE")])
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "notify-keyspace-events", ""]), ok());
    assert_eq!(c.cmd(&["SET", "quiet", "1"]), ok());
    assert_eq!(c.cmd(&["PUBLISH", "__keyspace@0__:marker", "m"]), i(1));
    assert_eq!(
        listener.read(),
        Some(arr(&[b("pmessage"), b("__key*@0__:*"), b("__keyspace@0__:marker"), b("m")])),
        "no event once the classes are off"
    );
}
