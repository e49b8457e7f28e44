//! Keyspace events (`notify-keyspace-events`, Redis's flag letters): after a command changed a
//! key, a message on `__keyspace@<db>__:<key>` whose payload is the event's name, and one on
//! `__keyevent@<db>__:<event>` whose payload is the key, for the classes `CONFIG SET` turned on,
//! with the names Redis gives them.
//!
//! A command family calls [`Cx::notify`] (class, event, key) once its change is made, for the
//! commands Redis notifies for. Events go through the host as `PUBLISH` does: queued, dropped
//! if the command is then undone (a rollback, `-OOM`), delivered once it completed (a
//! transaction's after it applied, in order). The events that do not belong to one command are
//! raised around every command by [`before`] and [`after`]: `keymiss` (a read of a key that is
//! not there), `expired` (a command names a key that has expired: it is removed first, as
//! Redis's lazy expiry does; the active pass raises it too, `server/mod.rs`), and `new` (a key
//! that did not exist exists after the command; raised after the command's own events, where
//! Redis raises it before them).
//!
//! With no class on, or no one subscribed, nothing is built: one test of the flags per call.

use super::spec::{Group, Spec};
use super::{key_args, Args, Cx, Host};
use crate::store::{Mem, StoreError};

/// `K`: `__keyspace@<db>__:<key>` messages.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: `__keyevent@<db>__:<event>` messages.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: generic commands (`DEL`, `EXPIRE`, `RENAME`, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: keys that expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: keys evicted (never: mojim kv evicts nothing).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: reads of keys that are not there (not part of `A`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events (none here).
pub const MODULE: u32 = 1 << 13;
/// `n`: keys created (not part of `A`).
pub const NEW: u32 = 1 << 14;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The classes raised around commands rather than by them.
const AROUND: u32 = KEY_MISS | EXPIRED | NEW;

/// Redis's message for a letter that is not a class.
pub const BAD_CLASS: &str = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.";

/// The flags of a `notify-keyspace-events` value; `None` if a letter is not a class.
pub fn parse(s: &[u8]) -> Option<u32> {
    s.iter().try_fold(0, |f, &c| {
        Some(
            f | match c {
                b'A' => ALL,
                b'g' => GENERIC,
                b'$' => STRING,
                b'l' => LIST,
                b's' => SET,
                b'h' => HASH,
                b'z' => ZSET,
                b'x' => EXPIRED,
                b'e' => EVICTED,
                b'K' => KEYSPACE,
                b'E' => KEYEVENT,
                b't' => STREAM,
                b'm' => KEY_MISS,
                b'd' => MODULE,
                b'n' => NEW,
                _ => return None,
            },
        )
    })
}

/// The value `CONFIG GET notify-keyspace-events` answers, as Redis writes it.
pub fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (f, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & f != 0 {
                s.push(c);
            }
        }
    }
    for (f, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

impl<M: Mem> Cx<'_, M> {
    /// Raises keyspace event `event` (Redis's name for it) of `class` for `key` of the
    /// selected database: what a command calls once it has changed the key. Costs one test of
    /// the flags when the class is off.
    #[inline]
    pub fn notify(&self, class: u32, event: &str, key: &[u8]) {
        let on = self.settings.notify_keyspace_events;
        if on & class != 0 && on & (KEYSPACE | KEYEVENT) != 0 {
            publish(self.host, on, self.store.selected(), event, key);
        }
    }

    /// [`Cx::notify`] for a key of database `db` (`MOVE`, `COPY ... DB`).
    #[inline]
    pub fn notify_in(&self, db: usize, class: u32, event: &str, key: &[u8]) {
        let on = self.settings.notify_keyspace_events;
        if on & class != 0 && on & (KEYSPACE | KEYEVENT) != 0 {
            publish(self.host, on, db, event, key);
        }
    }
}

#[cold]
fn publish(host: &dyn Host, on: u32, db: usize, event: &str, key: &[u8]) {
    let (channels, patterns, _) = host.pubsub_counts();
    if channels + patterns == 0 {
        return;
    }
    messages(on, db, event, key, |channel, payload| {
        host.publish(channel, payload, false);
    });
}

/// Calls `f(channel, payload)` for the messages of keyspace event `event` on `key` of database
/// `db`, as `on` (the flags) asks: the `__keyspace@` one, then the `__keyevent@` one.
pub fn messages(on: u32, db: usize, event: &str, key: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
    let mut channel = Vec::with_capacity(32 + key.len().max(event.len()));
    if on & KEYSPACE != 0 {
        channel.extend_from_slice(format!("__keyspace@{db}__:").as_bytes());
        channel.extend_from_slice(key);
        f(&channel, event.as_bytes());
    }
    if on & KEYEVENT != 0 {
        channel.clear();
        channel.extend_from_slice(format!("__keyevent@{db}__:{event}").as_bytes());
        f(&channel, key);
    }
}

/// What [`before`] saw: which key arguments existed (for `new`).
pub(super) struct Before {
    existed: Vec<bool>,
}

/// Before a command runs, when `keymiss`, `expired` or `new` events are on and someone
/// subscribes: removes the expired keys it names (raising `expired`), raises `keymiss` for
/// those a read command names that are not there, and notes which exist. `None` otherwise (the
/// hot path: one test of the flags).
pub(super) fn before<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args) -> Result<Option<Before>, StoreError> {
    let on = cx.settings.notify_keyspace_events;
    if on & AROUND == 0 || on & (KEYSPACE | KEYEVENT) == 0 || spec.group == Group::PubSub {
        return Ok(None);
    }
    let (channels, patterns, _) = cx.host.pubsub_counts();
    if channels + patterns == 0 {
        return Ok(None);
    }
    let read = spec.flags.contains(&"readonly");
    let mut existed = Vec::new();
    for k in key_args(spec, a) {
        let mut there = false;
        if let Some(f) = cx.store.find(k)? {
            if !f.head.expired(cx.now_ms) {
                there = true;
            } else if on & EXPIRED != 0 {
                // Redis's lazy expiry: the key goes before the command sees it.
                cx.store.remove(&f)?;
                cx.watches.touch(cx.store.selected(), k);
                cx.notify(EXPIRED, "expired", k);
            }
        }
        if !there && read {
            cx.notify(KEY_MISS, "keymiss", k);
        }
        existed.push(there);
    }
    Ok(Some(Before { existed }))
}

/// After a command ran: `new` for each key argument it created.
pub(super) fn after<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args, b: Before) -> Result<(), StoreError> {
    if cx.settings.notify_keyspace_events & NEW == 0 {
        return Ok(());
    }
    for (k, existed) in key_args(spec, a).zip(b.existed) {
        if !existed && cx.store.get(k, cx.now_ms)?.is_some() {
            cx.notify(NEW, "new", k);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_written_as_redis_does() {
        assert_eq!(parse(b"gKE").map(format).as_deref(), Some("gKE"));
        assert_eq!(parse(b"$lshzxeKE").map(format).as_deref(), Some("$lshzxeKE"));
        assert_eq!(parse(b"KA").map(format).as_deref(), Some("AK"));
        assert_eq!(parse(b"EA").map(format).as_deref(), Some("AE"));
        assert_eq!(parse(b"Enm").map(format).as_deref(), Some("nEm"));
        assert_eq!(parse(b"").map(format).as_deref(), Some(""));
        assert_eq!(parse(b"KEq"), None);
        assert_eq!(parse(b"A"), Some(ALL));
        assert_eq!(ALL & (KEY_MISS | NEW), 0);
    }
}
