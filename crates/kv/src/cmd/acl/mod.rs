//! Redis 7.0's ACLs: users (`user.rs`), the categories of every command (`cats.rs`), the
//! users' record in the region (`record.rs`, `store/acl.rs`), the `ACL` command, the check
//! each command passes before it runs or is queued, and `AUTH` per user.
//!
//! The users live in the region: [`Acl`] is the server's copy of the record, read again
//! whenever the record's block is no longer the one it was read from (a change undone with its
//! command, or made by a transaction), and every change writes the whole record, in the
//! command's batch.
//!
//! `[kv] password` is the `default` user's password: while it is set, `AUTH default` takes it
//! and only it, and `ACL SETUSER default` may not change default's passwords (it may change
//! everything else); without it, default's passwords are what the region holds (`nopass` at
//! first).

mod cats;
pub mod record;
pub mod user;

use super::args::{int, Args};
use super::pubsub::SubKind;
use super::{show, Auth, Cx, Host, Session, Spec};
use crate::resp::Reply;
use crate::store::{Mem, StoreError};
use std::collections::VecDeque;
pub use user::User;

/// Most users the region may hold, and most rules one `ACL SETUSER` may give.
pub const MAX_USERS: usize = 10_000;
/// See [`MAX_USERS`].
pub const MAX_RULES: usize = 100_000;

/// One refusal `ACL LOG` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Times it happened (a repeat within 60 s adds to the entry).
    pub count: u64,
    /// `command`, `key`, `channel` or `auth`.
    pub reason: &'static str,
    /// `toplevel`, `multi` or `lua`.
    pub context: &'static str,
    /// The command, key, channel or command name refused.
    pub object: Vec<u8>,
    /// The user.
    pub username: Vec<u8>,
    /// When, in Unix milliseconds (last time).
    pub ms: u64,
    /// The client, as `CLIENT INFO` shows it.
    pub client: String,
}

/// The server's copy of the users, and the log of refusals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    users: Vec<User>,
    /// The record's block they were read from (`u64::MAX`: not read yet).
    from: u64,
    /// Refusals, newest first.
    pub log: VecDeque<LogEntry>,
    /// `acllog-max-len`.
    pub log_max: usize,
}

impl Default for Acl {
    fn default() -> Self {
        Acl { users: vec![User::default_user()], from: u64::MAX, log: VecDeque::new(), log_max: 128 }
    }
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// The command (its full name).
    Command(String),
    /// A key (argument index).
    Key(usize),
    /// A channel (argument index).
    Channel(usize),
}

impl Denied {
    /// The reply, as Redis 7.0 writes it.
    pub fn message(&self) -> String {
        match self {
            Denied::Command(c) => format!("NOPERM this user has no permissions to run the '{c}' command"),
            Denied::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments".into()
            }
            Denied::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
        }
    }
}

impl Acl {
    /// Reads the users again if the region's record is not the one they came from.
    pub fn sync<M: Mem>(&mut self, store: &crate::store::Store<M>) -> Result<(), StoreError> {
        let block = store.acl_block();
        if block == self.from {
            return Ok(());
        }
        self.users = match store.acl_record()? {
            None => vec![User::default_user()],
            Some(rec) => record::decode(&rec).map_err(StoreError::Corrupt)?,
        };
        self.from = block;
        Ok(())
    }

    fn save<M: Mem>(&mut self, store: &mut crate::store::Store<M>) -> Result<(), StoreError> {
        store.set_acl_record(&record::encode(&self.users))?;
        self.from = store.acl_block();
        Ok(())
    }

    /// The user named `name`.
    pub fn user(&self, name: &[u8]) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// Adds a refusal to the log.
    pub fn add_log(&mut self, mut e: LogEntry) {
        if let Some(i) = self.log.iter().take(10).position(|o| {
            o.reason == e.reason
                && o.context == e.context
                && o.object == e.object
                && o.username == e.username
                && e.ms.abs_diff(o.ms) <= 60_000
        }) {
            let old = self.log.remove(i).expect("found");
            e.count = old.count + 1;
        }
        self.log.push_front(e);
        self.log.truncate(self.log_max);
    }
}

/// Checks that the session's user may run `spec` with `a`: the command, its keys, its channels.
/// Commands that need no authentication (AUTH, HELLO, QUIT) are not checked, as in Redis: a user
/// without `+auth` can still authenticate as another.
pub fn check(acl: &Acl, s: &Session, spec: &Spec, a: &Args) -> Result<(), Denied> {
    if spec.flags.contains(&"no_auth") {
        return Ok(());
    }
    let Some(u) = acl.user(s.user.as_bytes()) else {
        return Err(Denied::Command(spec.name.to_ascii_lowercase()));
    };
    let lower = spec.name.to_ascii_lowercase();
    let sub = (a.len() > 1).then(|| a.get(1));
    let mut id = user::id_of(lower.as_bytes()).ok_or_else(|| Denied::Command(lower.clone()))?;
    let cmd = &user::CMDS[id];
    if let Some(sub) = sub.filter(|_| !cmd.subs.is_empty()) {
        let full = [lower.as_bytes(), b"|", sub].concat();
        if let Some(sid) = user::id_of(&full) {
            id = sid;
        }
    }
    if !u.may_run(id, sub) {
        return Err(Denied::Command(user::CMDS[id].full.clone()));
    }
    // A shard channel sits where a key would (for a cluster's slot) but is not a key: Redis flags
    // it `not_key`, and only the channel rules below apply to it.
    let channels_only = matches!(spec.name, "SPUBLISH" | "SSUBSCRIBE" | "SUNSUBSCRIBE");
    if !u.allkeys && !channels_only {
        let write = spec.flags.contains(&"write");
        let read = spec.flags.contains(&"readonly");
        let mut keys = Vec::new();
        let _ = super::server::movable_keys(spec.name, a, &mut keys);
        for (i, k) in key_positions(spec, a).into_iter().chain(positions_of(a, &keys)) {
            if !u.may_key(k, read, write) {
                return Err(Denied::Key(i));
            }
        }
    }
    if !u.allchannels {
        let (from, pattern) = match spec.name {
            "PUBLISH" | "SPUBLISH" => (1, false),
            "SUBSCRIBE" | "SSUBSCRIBE" => (1, false),
            "PSUBSCRIBE" => (1, true),
            _ => (0, false),
        };
        if from > 0 {
            let to = if spec.name.ends_with("PUBLISH") { 2 } else { a.len() };
            for i in from..to {
                if !u.may_channel(a.get(i), pattern) {
                    return Err(Denied::Channel(i));
                }
            }
        }
    }
    Ok(())
}

fn key_positions<'a>(spec: &Spec, a: &'a Args) -> Vec<(usize, &'a [u8])> {
    let n = a.len() as i32;
    if spec.first_key <= 0 {
        return Vec::new();
    }
    let last = if spec.last_key < 0 { n + spec.last_key } else { spec.last_key.min(n - 1) };
    (spec.first_key..=last)
        .step_by(spec.step.max(1) as usize)
        .map(|i| (i as usize, a.get(i as usize)))
        .collect()
}

fn positions_of<'a>(a: &'a Args, keys: &[&'a [u8]]) -> Vec<(usize, &'a [u8])> {
    keys.iter()
        .map(|k| {
            let i = (1..a.len()).find(|&i| std::ptr::eq(a.get(i).as_ptr(), k.as_ptr())).unwrap_or(0);
            (i, *k)
        })
        .collect()
}

/// The categories of a command or subcommand (its lower-case full name) as `COMMAND INFO`
/// lists them (`@read`, ...), in Redis's order.
pub fn categories(full: &str) -> Vec<String> {
    let Some(id) = user::id_of(full.as_bytes()) else { return Vec::new() };
    let c = user::CMDS[id].cats;
    cats::NAMES.iter().enumerate().filter(|(i, _)| c & (1 << i) != 0).map(|(_, n)| format!("@{n}")).collect()
}

/// The commands and subcommands `mojim kv` runs of category `name` (without `@`, any case),
/// lower case, in the order `ACL CAT` lists them; `None` for an unknown category.
pub fn commands_of(name: &[u8]) -> Option<Vec<&'static str>> {
    let c = cats::index(name)?;
    Some(user::CMDS.iter().filter(|x| x.runs && x.cats & (1 << c) != 0).map(|x| x.full.as_str()).collect())
}

/// Records a refusal in the log.
pub fn log_refusal(acl: &mut Acl, s: &Session, d: &Denied, a: &Args, context: &'static str, now_ms: u64) {
    let (reason, object) = match d {
        Denied::Command(c) => ("command", c.as_bytes().to_vec()),
        Denied::Key(i) => ("key", a.get(*i).to_vec()),
        Denied::Channel(i) => ("channel", a.get(*i).to_vec()),
    };
    acl.add_log(LogEntry {
        count: 1,
        reason,
        context,
        object,
        username: s.user.as_bytes().to_vec(),
        ms: now_ms,
        client: format!("id={} addr={} user={}", s.id, s.addr, s.user),
    });
}

/// Checks `user`'s `password`: the `default` user takes `[kv] password` while it is set.
pub fn authenticate<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    user: &[u8],
    password: &[u8],
    cmd: &[u8],
) -> Result<Auth, StoreError> {
    cx.settings.acl.sync(cx.store)?;
    let configured = cx.host.has_password();
    let found = cx.settings.acl.user(user).cloned();
    let ok = match &found {
        Some(u) if user == b"default" && configured => {
            u.on && cx.host.authenticate(&s.addr, user, password) == Auth::Accepted
        }
        Some(u) => u.on && u.password_ok(password),
        None => false,
    };
    if ok {
        return Ok(Auth::Accepted);
    }
    // The host counted a failure of the configured password itself.
    if !(configured && user == b"default") {
        cx.host.auth_failed(&s.addr, user);
    }
    cx.settings.acl.add_log(LogEntry {
        count: 1,
        reason: "auth",
        context: if s.multi.is_some() { "multi" } else { "toplevel" },
        // The command as the client wrote it (`AUTH`, `hello`), as Redis logs it.
        object: cmd.to_vec(),
        username: user.to_vec(),
        ms: cx.now_ms,
        client: format!("id={} addr={} user={}", s.id, s.addr, s.user),
    });
    Ok(Auth::Refused)
}

/// Whether a new connection is logged in as `default` without `AUTH`: default is on and takes
/// any password, and no `[kv] password` is set.
pub fn default_needs_no_password<M: Mem>(cx: &mut Cx<M>) -> Result<bool, StoreError> {
    if cx.host.has_password() {
        return Ok(false);
    }
    cx.settings.acl.sync(cx.store)?;
    Ok(cx.settings.acl.user(b"default").is_some_and(|u| u.on && u.nopass))
}

/// Closes, once the command is done, the clients logged in as `name` that may no longer be:
/// every one when the user is gone (`now` is `None`), otherwise those subscribed to a channel
/// or a pattern its channel rules no longer allow, as Redis 7.0 does.
fn kill_affected(host: &dyn Host, s: &Session, name: &[u8], now: Option<&User>) {
    let out_of_rights = |id: u64, mine: bool| -> bool {
        let Some(u) = now else { return true };
        if u.allchannels {
            return false;
        }
        [(SubKind::Channel, false), (SubKind::Shard, false), (SubKind::Pattern, true)].into_iter().any(
            |(k, p)| {
                let names = if mine { host.subscriptions(k) } else { host.subscriptions_of(id, k) };
                names.iter().any(|n| !u.may_channel(n, p))
            },
        )
    };
    let mut victims = Vec::new();
    if s.user.as_bytes() == name && (now.is_none() || s.subs.any()) && out_of_rights(s.id, true) {
        victims.push(s.id);
    }
    host.other_clients(&mut |o, _| {
        if o.user.as_bytes() == name && (now.is_none() || o.subs.any()) && out_of_rights(o.id, false) {
            victims.push(o.id);
        }
    });
    if !victims.is_empty() {
        host.kill_clients(&victims);
    }
}

fn valid_name(n: &[u8]) -> bool {
    !n.iter().any(|&c| c == b' ' || c == 0)
}

/// `ACL ...`.
pub fn run<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    cx.settings.acl.sync(cx.store)?;
    let sub = a.get(1).to_ascii_uppercase();
    let acl = &mut cx.settings.acl;
    match sub.as_slice() {
        b"WHOAMI" => r.bulk(s.user.as_bytes()),
        b"USERS" => {
            let mut names: Vec<&Vec<u8>> = acl.users.iter().map(|u| &u.name).collect();
            names.sort();
            r.array(names.len());
            for n in names {
                r.bulk(n);
            }
        }
        b"LIST" => {
            let mut us: Vec<&User> = acl.users.iter().collect();
            us.sort_by(|x, y| x.name.cmp(&y.name));
            r.array(us.len());
            for u in us {
                let line = [b"user ".as_slice(), &u.name, b" ", &u.describe()].concat();
                r.bulk(&line);
            }
        }
        b"GETUSER" => match acl.user(a.get(2)) {
            None => r.null(),
            Some(u) => {
                r.map(6);
                r.bulk(b"flags");
                let f = u.flags();
                r.array(f.len());
                for x in f {
                    r.bulk(x.as_bytes());
                }
                r.bulk(b"passwords");
                let p = u.password_hexes();
                r.array(p.len());
                for x in p {
                    r.bulk(x.as_bytes());
                }
                r.bulk(b"commands");
                r.bulk(u.describe_commands().as_bytes());
                r.bulk(b"keys");
                r.bulk(&u.describe_keys());
                r.bulk(b"channels");
                r.bulk(&u.describe_channels());
                r.bulk(b"selectors");
                r.array(0);
            }
        },
        b"SETUSER" => {
            let name = a.get(2);
            if !valid_name(name) {
                r.error("ERR Usernames can't contain spaces or null characters");
                return Ok(());
            }
            if a.len() - 3 > MAX_RULES {
                r.error(&format!("ERR ACL SETUSER takes at most {MAX_RULES} rules at once"));
                return Ok(());
            }
            let existing = acl.users.iter().position(|u| u.name == name);
            if existing.is_none() && acl.users.len() >= MAX_USERS {
                r.error(&format!("ERR the server holds {MAX_USERS} users, the most it may: delete some"));
                return Ok(());
            }
            let mut u = existing.map(|i| acl.users[i].clone()).unwrap_or_else(|| User::new(name));
            let configured = cx.host.has_password();
            for rule in a.from(3) {
                let l = rule.to_ascii_lowercase();
                if configured
                    && name == b"default"
                    && (matches!(l.as_slice(), b"nopass" | b"resetpass" | b"reset")
                        || matches!(l.first(), Some(b'>' | b'<' | b'#' | b'!')))
                {
                    r.error(&format!(
                    "ERR Error in ACL SETUSER modifier '{}': the default user's password is [kv] password \
                     (MOJIM_KV_PASSWORD): change it there",
                    show(rule, 128)
                ));
                    return Ok(());
                };
                if let Err(e) = u.apply(rule) {
                    r.error(&format!("ERR Error in ACL SETUSER modifier '{}': {e}", show(rule, 128)));
                    return Ok(());
                }
            }
            kill_affected(cx.host, s, name, Some(&u));
            match existing {
                Some(i) => acl.users[i] = u,
                None => acl.users.push(u),
            }
            acl.save(cx.store)?;
            r.ok();
        }
        b"DELUSER" => {
            let mut n = 0;
            for name in a.from(2) {
                if name == b"default" {
                    r.error("ERR The 'default' user cannot be removed");
                    return Ok(());
                }
            }
            for name in a.from(2) {
                if let Some(i) = acl.users.iter().position(|u| u.name == name) {
                    acl.users.remove(i);
                    kill_affected(cx.host, s, name, None);
                    n += 1;
                }
            }
            if n > 0 {
                acl.save(cx.store)?;
            }
            r.int(n);
        }
        b"CAT" if a.len() == 2 => {
            r.array(cats::NAMES.len());
            for c in cats::NAMES {
                r.bulk(c.as_bytes());
            }
        }
        b"CAT" if a.len() > 3 => {
            r.error("ERR unknown subcommand or wrong number of arguments for 'CAT'. Try ACL HELP.")
        }
        b"CAT" => match cats::index(a.get(2)) {
            None => r.error(&format!("ERR Unknown category '{}'", show(a.get(2), 64))),
            Some(_) => {
                let names = commands_of(a.get(2)).unwrap_or_default();
                r.array(names.len());
                for n in names {
                    r.bulk(n.as_bytes());
                }
            }
        },
        b"GENPASS" => {
            let bits = if a.len() > 2 {
                match int(a.get(2)) {
                    Some(b) if b > 0 && b <= 4096 => b as usize,
                    _ => {
                        r.error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096");
                        return Ok(());
                    }
                }
            } else {
                256
            };
            let mut bytes = vec![0u8; bits.div_ceil(8)];
            mojim_transport::random::fill(&mut bytes);
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            r.bulk(&hex.as_bytes()[..bits.div_ceil(4)]);
        }
        b"LOG" => {
            if a.len() > 2 && a.get(2).eq_ignore_ascii_case(b"RESET") {
                acl.log.clear();
                r.ok();
                return Ok(());
            }
            let count = if a.len() > 2 {
                match int(a.get(2)) {
                    Some(c) if c >= 0 => c as usize,
                    _ => {
                        r.error("ERR value is out of range, must be positive");
                        return Ok(());
                    }
                }
            } else {
                10
            };
            let n = count.min(acl.log.len());
            r.array(n);
            for e in acl.log.iter().take(n) {
                r.map(7);
                r.bulk(b"count");
                r.int(e.count as i64);
                r.bulk(b"reason");
                r.bulk(e.reason.as_bytes());
                r.bulk(b"context");
                r.bulk(e.context.as_bytes());
                r.bulk(b"object");
                r.bulk(&e.object);
                r.bulk(b"username");
                r.bulk(&e.username);
                r.bulk(b"age-seconds");
                let age = cx.now_ms.saturating_sub(e.ms) as f64 / 1000.0;
                r.bulk(format!("{age}").as_bytes());
                r.bulk(b"client-info");
                r.bulk(e.client.as_bytes());
            }
        }
        b"DRYRUN" => {
            let Some(u) = acl.user(a.get(2)) else {
                r.error(&format!("ERR User '{}' not found", show(a.get(2), 128)));
                return Ok(());
            };
            let mut b = [0u8; 32];
            let Some(spec) = super::args::upper(a.get(3), &mut b).and_then(super::find_spec) else {
                r.error(&format!("ERR Command '{}' not found", show(a.get(3), 128)));
                return Ok(());
            };
            let n = a.len() as i32 - 3;
            if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
                r.error(&format!(
                    "ERR wrong number of arguments for '{}' command",
                    spec.name.to_ascii_lowercase()
                ));
                return Ok(());
            }
            let argv: Vec<Vec<u8>> = a.from(3).map(|x| x.to_vec()).collect();
            let sub = Args::Owned(&argv);
            let mut fake = Session::new(0, String::new(), true);
            fake.user = String::from_utf8_lossy(&u.name).into_owned();
            match check(acl, &fake, spec, &sub) {
                Ok(()) => r.ok(),
                Err(d) => {
                    let what = match &d {
                        Denied::Command(c) => {
                            format!("This user has no permissions to run the '{c}' command")
                        }
                        Denied::Key(i) => format!(
                            "This user has no permissions to access the '{}' key",
                            show(sub.get(*i), 128)
                        ),
                        Denied::Channel(i) => format!(
                            "This user has no permissions to access the '{}' channel",
                            show(sub.get(*i), 128)
                        ),
                    };
                    r.bulk(what.as_bytes());
                }
            }
        }
        b"LOAD" | b"SAVE" => r.error(
            "ERR This Redis instance is not configured to use an ACL file: mojim kv keeps its users in the \
             region, and ACL SETUSER and ACL DELUSER change them there, replicated to the mirror",
        ),
        b"HELP" => {
            let lines = [
                "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CAT [<category>]",
                "DELUSER <username> [<username> ...]",
                "DRYRUN <username> <command> [<arg> ...]",
                "GETUSER <username>",
                "LIST",
                "USERS",
                "SETUSER <username> <attribs> ...",
                "GENPASS [<bits>]",
                "LOG [<count> | RESET]",
                "WHOAMI",
                "LOAD, SAVE: refused (the users live in the region)",
                "HELP",
            ];
            r.help(&lines);
        }
        _ => r.error(&format!("ERR unknown subcommand '{}'. Try ACL HELP.", show(a.get(1), 128))),
    }
    Ok(())
}
