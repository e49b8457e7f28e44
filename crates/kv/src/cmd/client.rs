//! `CLIENT`: what clients learn of their connection and of the others, as Redis 7.0 answers
//! (CLIENT LIST and CLIENT INFO print every field Redis prints, which client libraries parse),
//! and what they may change: names, library names, replies off, killing connections, pausing.

use super::args::{int, is, Args};
use super::{show, Cx, Session, SYNTAX};
use crate::resp::{Proto, Reply};
use crate::store::Mem;
use std::fmt::Write as _;

/// What the server knows of a connection beyond its session, for CLIENT LIST.
#[derive(Clone, Debug, Default)]
pub struct Conn {
    /// The socket's descriptor.
    pub fd: i32,
    /// The server's end of the connection.
    pub laddr: std::rc::Rc<str>,
    /// Seconds since it connected.
    pub age_s: u64,
    /// Seconds since its last command.
    pub idle_s: u64,
    /// Bytes read and not yet run, and free room in its input buffer.
    pub qbuf: usize,
    /// Free room in its input buffer.
    pub qbuf_free: usize,
    /// Reply bytes waiting.
    pub omem: usize,
    /// It is parked by a blocking command.
    pub blocked: bool,
}

/// What a client asked of its replies (`CLIENT REPLY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Replies {
    /// Every reply is sent.
    #[default]
    On,
    /// No reply is sent until `CLIENT REPLY ON`.
    Off,
    /// The next command's reply is not sent.
    Skip,
}

/// A `CLIENT KILL` filter.
#[derive(Clone, Debug, Default)]
pub struct KillFilter {
    /// `ID`.
    pub id: Option<u64>,
    /// `ADDR` (or the old form's address).
    pub addr: Option<String>,
    /// `LADDR`.
    pub laddr: Option<String>,
    /// `USER`.
    pub user: Option<String>,
    /// `SKIPME` (default yes).
    pub skip_me: bool,
    /// `TYPE pubsub` (true) or `TYPE normal` (false): clients with subscriptions, or without.
    pub pubsub: Option<bool>,
}

impl KillFilter {
    /// Whether it selects the client of `s` and `c` (`me`: the client killing).
    pub fn selects(&self, s: &Session, c: &Conn, me: u64) -> bool {
        (!self.skip_me || s.id != me)
            && self.id.is_none_or(|id| id == s.id)
            && self.addr.as_ref().is_none_or(|a| *a == s.addr)
            && self.laddr.as_deref().is_none_or(|a| a == &*c.laddr)
            && self.user.as_ref().is_none_or(|u| *u == s.user)
            && self.pubsub.is_none_or(|p| p == s.subs.any())
    }
}

/// A client's CLIENT LIST line (no newline), with every field Redis 7.0 prints.
pub fn line(s: &Session, c: &Conn) -> String {
    let name = s.name.as_deref().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
    let (multi, multi_mem) = s.multi.as_ref().map_or((-1, 0), |m| (m.queue.len() as i64, m.bytes));
    let mut flags = String::new();
    if s.subs.any() {
        flags.push('P');
    }
    if s.multi.is_some() {
        flags.push('x');
    }
    if s.monitor {
        flags.push('O');
    }
    if c.blocked {
        flags.push('b');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let resp = if s.proto == Proto::Resp3 { 3 } else { 2 };
    let mut l = String::with_capacity(256);
    let _ = write!(
        l,
        "id={} addr={} laddr={} fd={} name={name} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} \
         multi={multi} qbuf={} qbuf-free={} argv-mem=0 multi-mem={multi_mem} rbs={} rbp={} obl=0 oll=0 \
         omem={} tot-mem={} events=r cmd={} user={} redir=-1 resp={resp}",
        s.id,
        s.addr,
        c.laddr,
        c.fd,
        c.age_s,
        c.idle_s,
        s.db,
        s.subs.channels,
        s.subs.patterns,
        s.subs.shard,
        c.qbuf,
        c.qbuf_free,
        c.qbuf + c.qbuf_free,
        c.qbuf + c.qbuf_free,
        c.omem,
        c.qbuf + c.qbuf_free + c.omem + multi_mem,
        s.last_cmd.to_ascii_lowercase(),
        s.user,
    );
    if let Some(n) = &s.lib_name {
        let _ = write!(l, " lib-name={n}");
    }
    if let Some(v) = &s.lib_ver {
        let _ = write!(l, " lib-ver={v}");
    }
    l
}

/// Whether the ACL user `name` exists (an unreadable record: no user does).
fn user_exists<M: Mem>(cx: &mut Cx<M>, name: &[u8]) -> bool {
    cx.settings.acl.sync(cx.store).is_ok() && cx.settings.acl.user(name).is_some()
}

fn parse_kill(s: &Session, a: &Args) -> Result<KillFilter, String> {
    let mut f = KillFilter { skip_me: true, ..KillFilter::default() };
    if a.len() == 3 {
        // The old form: CLIENT KILL addr:port, which kills that one even if it is this one.
        f.addr = Some(String::from_utf8_lossy(a.get(2)).into_owned());
        f.skip_me = false;
        return Ok(f);
    }
    if a.len() < 4 || !a.len().is_multiple_of(2) {
        return Err(SYNTAX.into());
    }
    for i in (2..a.len()).step_by(2) {
        let (k, v) = (a.get(i), String::from_utf8_lossy(a.get(i + 1)).into_owned());
        match () {
            _ if is(k, "ID") => match v.parse::<u64>() {
                Ok(id) if id > 0 => f.id = Some(id),
                _ => return Err("ERR client-id should be greater than 0".into()),
            },
            _ if is(k, "ADDR") => f.addr = Some(v),
            _ if is(k, "LADDR") => f.laddr = Some(v),
            _ if is(k, "USER") => f.user = Some(v),
            _ if is(k, "TYPE") => {
                if !["normal", "master", "replica", "slave", "pubsub"]
                    .contains(&v.to_ascii_lowercase().as_str())
                {
                    return Err(format!("ERR Unknown client type '{v}'"));
                }
                // Every client here is a normal one or, subscribed, a pubsub one.
                match v.to_ascii_lowercase().as_str() {
                    "normal" => f.pubsub = Some(false),
                    "pubsub" => f.pubsub = Some(true),
                    _ => f.id = Some(0),
                }
            }
            _ if is(k, "SKIPME") => match () {
                _ if v.eq_ignore_ascii_case("yes") => f.skip_me = true,
                _ if v.eq_ignore_ascii_case("no") => f.skip_me = false,
                _ => return Err(SYNTAX.into()),
            },
            _ => return Err(SYNTAX.into()),
        }
    }
    let _ = s;
    Ok(f)
}

/// `CLIENT ...`.
pub(super) fn client<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) {
    let sub = a.get(1);
    let n = a.len();
    match () {
        _ if is(sub, "SETNAME") && n == 3 => {
            let name = a.get(2);
            if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                r.error("ERR Client names cannot contain spaces, newlines or special characters.");
            } else {
                s.name = (!name.is_empty()).then(|| name.to_vec());
                r.ok();
            }
        }
        _ if is(sub, "GETNAME") && n == 2 => match &s.name {
            Some(name) => r.bulk(name),
            None => r.null(),
        },
        _ if is(sub, "ID") && n == 2 => r.int(s.id as i64),
        _ if is(sub, "UNBLOCK") && (n == 3 || n == 4) => {
            let error = match n {
                4 if is(a.get(3), "ERROR") => true,
                4 if !is(a.get(3), "TIMEOUT") => {
                    return r.error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
                }
                _ => false,
            };
            match int(a.get(2)) {
                Some(id) => r.int(i64::from(id >= 0 && cx.host.unblock(id as u64, error))),
                None => r.error("ERR value is not an integer or out of range"),
            }
        }
        _ if is(sub, "INFO") && n == 2 => {
            let me = cx.host.my_conn();
            r.bulk(format!("{}\n", line(s, &me)).as_bytes());
        }
        _ if is(sub, "LIST") => {
            // CLIENT LIST [TYPE normal|...] [ID id ...]
            let mut ids: Option<Vec<u64>> = None;
            let mut i = 2;
            // TYPE normal or pubsub: whether it has subscriptions; master or replica: none.
            let mut kind: Option<Option<bool>> = Some(None);
            while i < n {
                if is(a.get(i), "TYPE") && i + 1 < n {
                    let t = String::from_utf8_lossy(a.get(i + 1)).to_ascii_lowercase();
                    if !["normal", "master", "replica", "slave", "pubsub"].contains(&t.as_str()) {
                        return r.error(&format!("ERR Unknown client type '{t}'"));
                    }
                    kind = match t.as_str() {
                        "normal" => Some(Some(false)),
                        "pubsub" => Some(Some(true)),
                        _ => None,
                    };
                    i += 2;
                } else if is(a.get(i), "ID") && i + 1 < n {
                    let mut v = Vec::new();
                    for x in a.from(i + 1) {
                        match int(x) {
                            Some(id) if id > 0 => v.push(id as u64),
                            _ => return r.error("ERR Invalid client ID"),
                        }
                    }
                    ids = Some(v);
                    i = n;
                } else {
                    return r.error(SYNTAX);
                }
            }
            let mut text = String::new();
            if let Some(pubsub) = kind {
                let mut lines: Vec<(u64, String)> = Vec::new();
                let me = cx.host.my_conn();
                let wanted = |o: &Session| pubsub.is_none_or(|p| p == o.subs.any());
                if wanted(s) {
                    lines.push((s.id, line(s, &me)));
                }
                cx.host.other_clients(&mut |o, c| {
                    if wanted(o) {
                        lines.push((o.id, line(o, c)))
                    }
                });
                lines.sort_by_key(|l| l.0);
                for (id, l) in lines {
                    if ids.as_ref().is_none_or(|v| v.contains(&id)) {
                        text.push_str(&l);
                        text.push('\n');
                    }
                }
            }
            r.bulk(text.as_bytes());
        }
        _ if is(sub, "KILL") => match parse_kill(s, a) {
            Err(e) => r.error(&e),
            Ok(f) if f.user.as_ref().is_some_and(|u| !user_exists(cx, u.as_bytes())) => r.error(&format!(
                "ERR No such user '{}'",
                show(f.user.as_deref().unwrap_or("").as_bytes(), 128)
            )),
            Ok(f) => {
                let mut victims = Vec::new();
                let me = cx.host.my_conn();
                if f.selects(s, &me, s.id) {
                    victims.push(s.id);
                }
                cx.host.other_clients(&mut |o, c| {
                    if f.selects(o, c, s.id) {
                        victims.push(o.id)
                    }
                });
                cx.host.kill_clients(&victims);
                if n == 3 {
                    if victims.is_empty() {
                        r.error("ERR No such client");
                    } else {
                        r.ok();
                    }
                } else {
                    r.int(victims.len() as i64);
                }
            }
        },
        _ if is(sub, "PAUSE") && (n == 3 || n == 4) => {
            let Some(ms) = int(a.get(2)).filter(|&v| v >= 0) else {
                return r.error("ERR timeout is not an integer or out of range");
            };
            let all = match a.from(3).next() {
                None => true,
                Some(m) if is(m, "ALL") => true,
                Some(m) if is(m, "WRITE") => false,
                Some(_) => return r.error(SYNTAX),
            };
            cx.host.pause(cx.now_ms.saturating_add(ms as u64), all);
            r.ok();
        }
        _ if is(sub, "UNPAUSE") && n == 2 => {
            cx.host.pause(0, false);
            r.ok();
        }
        _ if is(sub, "SETINFO") && n == 4 => {
            let v = String::from_utf8_lossy(a.get(3)).into_owned();
            if v.chars().any(|c| !('!'..='~').contains(&c)) {
                return r.error(&format!(
                    "ERR {} cannot contain spaces, newlines or special characters.",
                    show(a.get(2), 32)
                ));
            }
            match () {
                _ if is(a.get(2), "LIB-NAME") => s.lib_name = (!v.is_empty()).then_some(v),
                _ if is(a.get(2), "LIB-VER") => s.lib_ver = (!v.is_empty()).then_some(v),
                _ => return r.error(&format!("ERR Unrecognized option '{}'", show(a.get(2), 32))),
            }
            r.ok();
        }
        // There is no client eviction, and no key access tracking to spare: both are honest no-ops.
        _ if (is(sub, "NO-EVICT") || is(sub, "NO-TOUCH")) && n == 3 => {
            if is(a.get(2), "ON") || is(a.get(2), "OFF") {
                r.ok()
            } else {
                r.error(SYNTAX)
            }
        }
        _ if is(sub, "REPLY") && n == 3 => match () {
            _ if is(a.get(2), "ON") => {
                s.replies = Replies::On;
                r.ok();
            }
            // No reply, not even to this command.
            _ if is(a.get(2), "OFF") => s.replies = Replies::Off,
            _ if is(a.get(2), "SKIP") => s.replies = Replies::Skip,
            _ => r.error(SYNTAX),
        },
        _ if is(sub, "GETREDIR") && n == 2 => r.int(-1),
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            show(sub, 64)
        )),
    }
}
