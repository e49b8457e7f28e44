//! Pub/sub commands: SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE SSUBSCRIBE SUNSUBSCRIBE
//! PUBLISH SPUBLISH PUBSUB, and RESET (which, among the rest of a connection's state, leaves
//! every subscription).
//!
//! The server holds the subscriptions (`server/pubsub.rs`) and lends them to the commands
//! through [`Host`]; a client's counts are kept in its session too (`CLIENT LIST`'s `sub`,
//! `psub`, `ssub`, and the rule below). A message is queued when published and written into the
//! subscribers' output once the command is done (dropped if the command is undone), and goes out
//! with the batch's replies. Messages are neither persisted nor replicated, as in Redis: a
//! subscriber connected when a message is published gets it, no one else ever does.
//!
//! As in Redis:
//! - a RESP2 client with subscriptions may only run (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING
//!   (answered `["pong", arg]`), QUIT and RESET; a RESP3 client may run anything;
//! - the confirmations of (P|S)(UN)SUBSCRIBE and the messages are pushes (`>` in RESP3, arrays
//!   in RESP2), sent even while `CLIENT REPLY` is `OFF` or `SKIP`;
//! - `UNSUBSCRIBE` without arguments leaves every channel, one confirmation each (one with a null
//!   channel if there was none); a confirmation's count is the client's channels and patterns
//!   (its shard channels for `SSUBSCRIBE`/`SUNSUBSCRIBE`).

use super::args::{is, Args};
use super::spec::{spec, Group, Spec, ALL, NO, ONE};
use super::{show, Cx, Host, Session};
use crate::resp::{Proto, Reply};
use crate::store::{Mem, StoreError};

/// The three namespaces of subscriptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubKind {
    /// `SUBSCRIBE`: a channel, by name.
    Channel,
    /// `PSUBSCRIBE`: every channel a glob pattern matches.
    Pattern,
    /// `SSUBSCRIBE`: a shard channel (a namespace of its own; one shard here).
    Shard,
}

impl SubKind {
    fn words(self) -> (&'static [u8], &'static [u8]) {
        match self {
            SubKind::Channel => (b"subscribe", b"unsubscribe"),
            SubKind::Pattern => (b"psubscribe", b"punsubscribe"),
            SubKind::Shard => (b"ssubscribe", b"sunsubscribe"),
        }
    }
}

/// How many names of each kind a client subscribes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubCounts {
    /// Channels (`SUBSCRIBE`).
    pub channels: usize,
    /// Patterns (`PSUBSCRIBE`).
    pub patterns: usize,
    /// Shard channels (`SSUBSCRIBE`).
    pub shard: usize,
}

impl SubCounts {
    /// Whether it subscribes to anything (Redis's `CLIENT_PUBSUB` flag).
    pub fn any(&self) -> bool {
        self.channels + self.patterns + self.shard > 0
    }

    fn of(&mut self, kind: SubKind) -> &mut usize {
        match kind {
            SubKind::Channel => &mut self.channels,
            SubKind::Pattern => &mut self.patterns,
            SubKind::Shard => &mut self.shard,
        }
    }

    /// The count a confirmation reports.
    fn reported(&self, kind: SubKind) -> i64 {
        match kind {
            SubKind::Shard => self.shard as i64,
            _ => (self.channels + self.patterns) as i64,
        }
    }
}

const SUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];
const PUBLISH: &[&str] = &["pubsub", "loading", "stale", "fast", "may_replicate"];

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("PSUBSCRIBE", -2, SUB, NO, Group::PubSub),
    spec("PUBLISH", 3, PUBLISH, NO, Group::PubSub),
    spec("PUBSUB", -2, &[], NO, Group::PubSub),
    spec("PUNSUBSCRIBE", -1, SUB, NO, Group::PubSub),
    spec("RESET", 1, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], NO, Group::PubSub),
    spec("SPUBLISH", 3, PUBLISH, ONE, Group::PubSub),
    spec("SSUBSCRIBE", -2, SUB, ALL, Group::PubSub),
    spec("SUBSCRIBE", -2, SUB, NO, Group::PubSub),
    spec("SUNSUBSCRIBE", -1, SUB, ALL, Group::PubSub),
    spec("UNSUBSCRIBE", -1, SUB, NO, Group::PubSub),
];

/// `PUBSUB`'s subcommands with Redis 7.0's arities (for `spec::SUBCOMMANDS`).
pub(super) const PUBSUB_SUBCOMMANDS: &[(&str, i32)] = &[
    ("channels", -2),
    ("help", 2),
    ("numpat", 2),
    ("numsub", -2),
    ("shardchannels", -2),
    ("shardnumsub", -2),
];

/// Whether a RESP2 client with subscriptions may run `name`.
pub fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "SUBSCRIBE"
            | "PSUBSCRIBE"
            | "SSUBSCRIBE"
            | "UNSUBSCRIBE"
            | "PUNSUBSCRIBE"
            | "SUNSUBSCRIBE"
            | "PING"
            | "QUIT"
            | "RESET"
    )
}

/// Redis's refusal of another command from a RESP2 client with subscriptions: it names the
/// command in lower case (`name|subcommand` for a container command).
pub fn refused_when_subscribed(spec: &Spec, a: &Args) -> String {
    let mut fullname = spec.name.to_ascii_lowercase();
    if a.len() > 1 && super::spec::SUBCOMMANDS.iter().any(|(c, _)| *c == spec.name) {
        fullname.push('|');
        fullname.push_str(&String::from_utf8_lossy(a.get(1)).to_ascii_lowercase());
    }
    format!(
        "ERR Can't execute '{fullname}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are \
         allowed in this context"
    )
}

/// Whether `name`'s replies are pushes (sent whatever `CLIENT REPLY` says).
pub fn replies_are_pushes(name: &str) -> bool {
    matches!(
        name,
        "SUBSCRIBE" | "PSUBSCRIBE" | "SSUBSCRIBE" | "UNSUBSCRIBE" | "PUNSUBSCRIBE" | "SUNSUBSCRIBE"
    )
}

/// Bytes of a confirmation of `name`, at most.
fn confirmation_len(name: &[u8]) -> usize {
    name.len() + 64
}

fn confirm(r: &mut Reply, word: &[u8], name: Option<&[u8]>, count: i64) {
    r.push(3);
    r.bulk(word);
    match name {
        Some(n) => r.bulk(n),
        None => r.null(),
    }
    r.int(count);
}

fn subscribe<M: Mem>(
    cx: &Cx<M>,
    s: &mut Session,
    kind: SubKind,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    // Inside EXEC (the only place a client cannot block, here) Redis refuses SSUBSCRIBE but
    // lets SUBSCRIBE and PSUBSCRIBE through, for compatibility.
    if kind == SubKind::Shard && s.deny_blocking {
        r.error("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client");
        return Ok(());
    }
    // The whole reply is checked before anything changes: subscriptions are not in the store,
    // and an undone command could not take them back.
    cx.reply_room(r, a.from(1).map(confirmation_len).sum())?;
    for name in a.from(1) {
        if cx.host.subscribe(kind, name) {
            *s.subs.of(kind) += 1;
        }
        confirm(r, kind.words().0, Some(name), s.subs.reported(kind));
    }
    Ok(())
}

fn unsubscribe<M: Mem>(
    cx: &Cx<M>,
    s: &mut Session,
    kind: SubKind,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let word = kind.words().1;
    if a.len() > 1 {
        cx.reply_room(r, a.from(1).map(confirmation_len).sum())?;
        for name in a.from(1) {
            if cx.host.unsubscribe(kind, name) {
                *s.subs.of(kind) -= 1;
            }
            confirm(r, word, Some(name), s.subs.reported(kind));
        }
        return Ok(());
    }
    let names = cx.host.subscriptions(kind);
    if names.is_empty() {
        confirm(r, word, None, s.subs.reported(kind));
        return Ok(());
    }
    cx.reply_room(r, names.iter().map(|n| confirmation_len(n)).sum())?;
    for name in &names {
        if cx.host.unsubscribe(kind, name) {
            *s.subs.of(kind) -= 1;
        }
        confirm(r, word, Some(name), s.subs.reported(kind));
    }
    Ok(())
}

/// Leaves every subscription, without a reply (`RESET`, a client going away).
pub fn leave_all(host: &dyn Host, s: &mut Session) {
    for kind in [SubKind::Channel, SubKind::Pattern, SubKind::Shard] {
        for name in host.subscriptions(kind) {
            host.unsubscribe(kind, &name);
        }
    }
    s.subs = SubCounts::default();
}

fn pubsub<M: Mem>(cx: &Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let sub = a.get(1);
    let n = a.len();
    let names = |r: &mut Reply, kind: SubKind| -> Result<(), StoreError> {
        let names = cx.host.pubsub_names(kind, (n == 3).then(|| a.get(2)));
        cx.reply_room(r, names.iter().map(|n| n.len() + 16).sum())?;
        r.array(names.len());
        for name in names {
            r.bulk(&name);
        }
        Ok(())
    };
    let numsub = |r: &mut Reply, kind: SubKind| {
        r.array(2 * (n - 2));
        for name in a.from(2) {
            r.bulk(name);
            r.int(cx.host.pubsub_numsub(kind, name) as i64);
        }
    };
    match () {
        _ if is(sub, "HELP") && n == 2 => {
            let lines = [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Prints this help.",
            ];
            r.help(&lines);
        }
        _ if is(sub, "CHANNELS") && n <= 3 => names(r, SubKind::Channel)?,
        _ if is(sub, "SHARDCHANNELS") && n <= 3 => names(r, SubKind::Shard)?,
        _ if is(sub, "NUMSUB") => numsub(r, SubKind::Channel),
        _ if is(sub, "SHARDNUMSUB") => numsub(r, SubKind::Shard),
        _ if is(sub, "NUMPAT") && n == 2 => r.int(cx.host.pubsub_counts().1 as i64),
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            show(sub, 128)
        )),
    }
    Ok(())
}

/// `RESET`: the connection as new: no transaction or watched keys, no subscriptions, database
/// 0, RESP2, no name, replies on, and not authenticated if a password is needed.
fn reset<M: Mem>(cx: &mut Cx<M>, s: &mut Session, r: &mut Reply) {
    s.multi = None;
    cx.watches.unwatch(s.id);
    leave_all(cx.host, s);
    s.db = 0;
    s.proto = Proto::Resp2;
    r.proto = Proto::Resp2;
    s.name = None;
    s.replies = super::client::Replies::On;
    s.asking = false;
    s.readonly = false;
    s.authenticated = cx.host.fixed_setting("requirepass").is_empty();
    r.simple(b"RESET");
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    match spec.name {
        "SUBSCRIBE" => subscribe(cx, s, SubKind::Channel, a, r)?,
        "PSUBSCRIBE" => subscribe(cx, s, SubKind::Pattern, a, r)?,
        "SSUBSCRIBE" => subscribe(cx, s, SubKind::Shard, a, r)?,
        "UNSUBSCRIBE" => unsubscribe(cx, s, SubKind::Channel, a, r)?,
        "PUNSUBSCRIBE" => unsubscribe(cx, s, SubKind::Pattern, a, r)?,
        "SUNSUBSCRIBE" => unsubscribe(cx, s, SubKind::Shard, a, r)?,
        "PUBLISH" => r.int(cx.host.publish(a.get(1), a.get(2), false) as i64),
        "SPUBLISH" => r.int(cx.host.publish(a.get(1), a.get(2), true) as i64),
        "PUBSUB" => pubsub(cx, a, r)?,
        "RESET" => reset(cx, s, r),
        other => unreachable!("{other} is not a pub/sub command"),
    }
    Ok(())
}
