//! `mojim kv`'s ACL users live in the region: users made by `ACL SETUSER` (and removed by
//! `ACL DELUSER`) are there after `mojim kv` is killed with SIGKILL and restarted, and on the
//! promoted mirror; a user outside its rights is answered `-NOPERM` and changes nothing, alone
//! or in a transaction. The clients of a user killed by `CLIENT KILL USER`, or deleted, or
//! subscribed outside the user's new channel rules, are closed. A mirror, a backup and
//! `mojim kv` in child processes.

mod common;

use common::kv::{node, promote, start_kv, start_kv_on_promoted, KvCluster, Resp};
use common::Cluster;
use mojim_kv::resp::Value;

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

/// `ACL USERS` at `c`.
fn users(c: &mut Resp) -> Vec<String> {
    let Value::Array(v) = c.cmd(&["ACL", "USERS"]) else { panic!("ACL USERS") };
    v.iter()
        .map(|u| match u {
            Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("a user name: {other:?}"),
        })
        .collect()
}

/// Logs in as the administrator (`default`, whose password the test set), then checks what the
/// users are and that each keeps its rights, at the server on `addr`.
fn check_users(addr: &str, expect: &[&str], what: &str) {
    let mut anon = Resp::connect(addr);
    assert!(err(&anon.cmd(&["GET", "app:1"])).starts_with("NOAUTH"), "{what}: default's password was lost");
    let mut admin = Resp::connect(addr);
    assert_eq!(admin.cmd(&["AUTH", "default", "admin pw"]), ok(), "{what}");
    assert_eq!(users(&mut admin), expect, "{what}");
    assert_eq!(admin.cmd(&["GET", "app:1"]), Value::bulk("v1"), "{what}");

    let mut alice = Resp::connect(addr);
    assert!(err(&alice.cmd(&["AUTH", "alice", "wrong"])).starts_with("WRONGPASS"), "{what}");
    assert_eq!(alice.cmd(&["AUTH", "alice", "alice pw"]), ok(), "{what}");
    assert_eq!(alice.cmd(&["ACL", "WHOAMI"]), Value::bulk("alice"), "{what}");
    assert_eq!(alice.cmd(&["GET", "app:1"]), Value::bulk("v1"), "{what}");
    refused_and_unchanged(&mut alice, &mut admin, what);
}

/// `alice` (`~app:* +@all -@dangerous`) is refused what is outside her rights, and nothing
/// changes.
fn refused_and_unchanged(alice: &mut Resp, admin: &mut Resp, what: &str) {
    let Value::Int(before) = admin.cmd(&["DBSIZE"]) else { panic!("DBSIZE") };
    assert_eq!(
        err(&alice.cmd(&["SET", "other", "x"])),
        "NOPERM this user has no permissions to access one of the keys used as arguments",
        "{what}"
    );
    assert_eq!(
        err(&alice.cmd(&["FLUSHALL"])),
        "NOPERM this user has no permissions to run the 'flushall' command",
        "{what}"
    );
    assert_eq!(
        err(&alice.cmd(&["ACL", "SETUSER", "alice", "allkeys"])),
        "NOPERM this user has no permissions to run the 'acl|setuser' command",
        "{what}"
    );
    // In a transaction: refused when queued, the transaction aborted whole.
    assert_eq!(alice.cmd(&["MULTI"]), ok(), "{what}");
    assert_eq!(alice.cmd(&["SET", "app:2", "queued"]), Value::Simple(b"QUEUED".to_vec()), "{what}");
    assert!(err(&alice.cmd(&["DEL", "other", "app:1"])).starts_with("NOPERM"), "{what}");
    assert!(err(&alice.cmd(&["EXEC"])).starts_with("EXECABORT"), "{what}");
    assert_eq!(admin.cmd(&["DBSIZE"]), Value::Int(before), "{what}: a refused command changed the keys");
    assert_eq!(admin.cmd(&["GET", "app:2"]), Value::Null, "{what}");
    assert_eq!(admin.cmd(&["GET", "app:1"]), Value::bulk("v1"), "{what}");
    // RESP2: flags, passwords, commands, keys, channels, selectors, each a name then its value.
    let Value::Array(v) = admin.cmd(&["ACL", "GETUSER", "alice"]) else { panic!("ACL GETUSER") };
    assert_eq!(v[7], Value::bulk("~app:*"), "{what}: alice's keys changed");
}

#[test]
fn acl_users_survive_kill_9_and_the_promotion_of_the_mirror() {
    let c = Cluster::new("kv-acl", 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);

    let mut admin = Resp::connect(kv.addr());
    assert_eq!(admin.cmd(&["SET", "app:1", "v1"]), ok());
    for rule in [
        &["ACL", "SETUSER", "alice", "on", ">alice pw", "~app:*", "+@all", "-@dangerous"][..],
        &["ACL", "SETUSER", "reader", "on", ">reader pw", "%R~*", "+@read"],
        &["ACL", "SETUSER", "gone", "on", "nopass", "+@all"],
        // The last: no connection is logged in as default without AUTH from here on.
        &["ACL", "SETUSER", "default", ">admin pw"],
    ] {
        assert_eq!(admin.cmd(rule), ok(), "{rule:?}");
    }
    assert_eq!(admin.cmd(&["ACL", "DELUSER", "gone"]), Value::Int(1));
    check_users(kv.addr(), &["alice", "default", "reader"], "before the kill");

    // SIGKILL, then a restart on the same region.
    kv.kill();
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);
    check_users(kv.addr(), &["alice", "default", "reader"], "restarted after kill -9");
    let mut admin = Resp::connect(kv.addr());
    assert_eq!(admin.cmd(&["AUTH", "default", "admin pw"]), ok());
    assert_eq!(admin.cmd(&["ACL", "DELUSER", "reader"]), Value::Int(1));
    assert_eq!(admin.cmd(&["ACL", "SETUSER", "bob", "on", ">bob pw", "+ping"]), ok());

    // The primary's machine is lost: the mirror is promoted and mojim kv started there.
    kv.kill();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    check_users(promoted.addr(), &["alice", "bob", "default"], "promoted mirror");
    let mut bob = Resp::connect(promoted.addr());
    assert_eq!(bob.cmd(&["AUTH", "bob", "bob pw"]), ok());
    assert_eq!(bob.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(
        err(&bob.cmd(&["GET", "app:1"])),
        "NOPERM this user has no permissions to run the 'get' command"
    );
    let mut reader = Resp::connect(promoted.addr());
    assert!(err(&reader.cmd(&["AUTH", "reader", "reader pw"])).starts_with("WRONGPASS"));
    drop(mirror);
}

#[test]
fn clients_of_a_killed_or_deleted_user_or_outside_its_channels_are_closed() {
    let k = KvCluster::new("kv-acl-kill", 16 << 20);
    let mut admin = k.client();
    for u in ["ann", "ben", "cat"] {
        assert_eq!(admin.cmd(&["ACL", "SETUSER", u, "on", ">pw", "+@all", "~*", "&*"]), ok());
    }
    let login = |u: &str| {
        let mut c = k.client();
        assert_eq!(c.cmd(&["AUTH", u, "pw"]), ok());
        c
    };
    let (mut ann1, mut ann2, mut ben) = (login("ann"), login("ann"), login("ben"));
    assert_eq!(err(&admin.cmd(&["CLIENT", "KILL", "USER", "nosuch"])), "ERR No such user 'nosuch'");
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "USER", "ann"]), Value::Int(2));
    assert!(ann1.closed() && ann2.closed());
    assert_eq!(ben.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(admin.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));

    assert_eq!(admin.cmd(&["ACL", "DELUSER", "ben"]), Value::Int(1));
    assert!(ben.closed(), "a client of a deleted user stays connected");

    let (mut news, mut sports, mut plain) = (login("cat"), login("cat"), login("cat"));
    assert!(matches!(news.cmd(&["SUBSCRIBE", "news"]), Value::Array(_)));
    assert!(matches!(sports.cmd(&["PSUBSCRIBE", "sport*"]), Value::Array(_)));
    assert_eq!(admin.cmd(&["ACL", "SETUSER", "cat", "resetchannels", "&news"]), ok());
    assert!(sports.closed(), "a subscription outside the user's channels stays");
    assert_eq!(admin.cmd(&["PUBLISH", "news", "still here"]), Value::Int(1));
    let Some(Value::Array(m)) = news.read() else { panic!("the news subscriber got no message") };
    assert_eq!(m[2], Value::bulk("still here"));
    assert_eq!(plain.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}
