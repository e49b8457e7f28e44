//! Pub/sub's registry: who subscribes to what, and the messages published and not yet written
//! into their subscribers' output. The server owns it (in its heap: nothing of it is in the
//! region, nothing is replicated); the commands reach it through [`crate::cmd::Host`].
//!
//! Three namespaces, as in Redis: channels, patterns (glob patterns matched against the channel
//! a message is published on) and shard channels (`SSUBSCRIBE`; one shard here). Each name maps
//! to its subscribers in the order they subscribed, and each client to its names in the order
//! it subscribed to them (what `UNSUBSCRIBE` without arguments walks). Publishing walks the
//! channel's subscribers, then every pattern in the order it was first subscribed to: the cost
//! is Redis's (the subscribers reached, plus one glob match per pattern).
//!
//! A message is queued in the outbox when a command publishes it (`PUBLISH`, a keyspace event),
//! and the outbox is cut back to a mark when the command is undone: a rolled-back command
//! published nothing. The server writes what is left into the subscribers' output once the
//! command is done (`Server::deliver`), and closes a subscriber whose output would pass `[kv]
//! output_limit`. The outbox itself is bounded the same way: once the messages queued for one
//! subscriber pass the limit, the rest are dropped and it is marked to be closed, so that no
//! command (an `MSET` of many keys under many patterns) can make it grow past subscribers ·
//! limit.

use crate::cmd::glob::matches;
use crate::cmd::pubsub::SubKind;
use crate::resp::{Proto, Reply};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// A subscriber: a client's slot in the server's list, and its id (a slot is reused once its
/// client is gone; a message for an id no longer there is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sub {
    pub slot: usize,
    pub id: u64,
}

/// Names, each once, in the order they were added.
#[derive(Default, Debug)]
struct Ordered {
    next: u64,
    by_seq: BTreeMap<u64, Rc<[u8]>>,
    seq_of: HashMap<Rc<[u8]>, u64>,
}

impl Ordered {
    /// Adds `name` (shared with the registry's maps); whether it was not there.
    fn insert(&mut self, name: &Rc<[u8]>) -> bool {
        if self.seq_of.contains_key(&**name) {
            return false;
        }
        self.seq_of.insert(name.clone(), self.next);
        self.by_seq.insert(self.next, name.clone());
        self.next += 1;
        true
    }

    /// Removes `name`; whether it was there.
    fn remove(&mut self, name: &[u8]) -> bool {
        match self.seq_of.remove(name) {
            Some(seq) => {
                self.by_seq.remove(&seq);
                true
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.seq_of.len()
    }

    fn iter(&self) -> impl Iterator<Item = &Rc<[u8]>> {
        self.by_seq.values()
    }
}

/// What one client subscribes to, by kind.
#[derive(Default, Debug)]
struct Mine {
    names: [Ordered; 3],
}

/// The kind of a message, as its first element names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// `message`: to a channel's subscriber.
    Message,
    /// `pmessage`: to a pattern's subscriber (the pattern comes with it).
    PMessage,
    /// `smessage`: to a shard channel's subscriber.
    SMessage,
    /// Not a message: what was queued for this subscriber passed the output limit; it is to be
    /// closed.
    Cut,
    /// A command a client ran, to a `MONITOR` client: `+` and the payload (one line).
    Monitor,
}

/// A message on its way to one subscriber.
#[derive(Clone, Debug)]
pub struct Message {
    pub to: Sub,
    pub kind: MessageKind,
    /// The pattern that matched (`pmessage` only).
    pub pattern: Option<Rc<[u8]>>,
    pub channel: Rc<[u8]>,
    pub payload: Rc<[u8]>,
}

impl Message {
    /// Bytes [`Message::write`] appends (in either protocol: `>` and `*` take as many).
    pub fn encoded_len(&self) -> usize {
        fn bulk(n: usize) -> usize {
            1 + n.to_string().len() + 2 + n + 2
        }
        let word = match self.kind {
            MessageKind::Message => 7,
            MessageKind::SMessage | MessageKind::PMessage => 8,
            MessageKind::Cut => return 0,
            MessageKind::Monitor => return self.payload.len() + 3,
        };
        4 + bulk(word)
            + self.pattern.as_ref().map_or(0, |p| bulk(p.len()))
            + bulk(self.channel.len())
            + bulk(self.payload.len())
    }

    /// Appends the message as a push (RESP3) or an array (RESP2), as Redis sends it.
    pub fn write(&self, proto: Proto, out: &mut Vec<u8>) {
        let mut r = Reply { buf: out, proto };
        match self.kind {
            MessageKind::Message | MessageKind::SMessage => {
                r.push(3);
                r.bulk(if self.kind == MessageKind::Message { b"message" } else { b"smessage" });
            }
            MessageKind::PMessage => {
                r.push(4);
                r.bulk(b"pmessage");
                r.bulk(self.pattern.as_deref().unwrap_or_default());
            }
            MessageKind::Cut => return,
            MessageKind::Monitor => {
                r.buf.push(b'+');
                r.buf.extend_from_slice(&self.payload);
                r.buf.extend_from_slice(b"\r\n");
                return;
            }
        }
        r.bulk(&self.channel);
        r.bulk(&self.payload);
    }
}

/// The subscriptions and the outbox.
#[derive(Debug)]
pub struct Registry {
    /// `[kv] output_limit`: the most bytes queued for one subscriber.
    limit: usize,
    /// Bytes queued for each subscriber (by id), usize::MAX once cut.
    queued_bytes: HashMap<u64, usize>,
    /// Subscribers of each name, by kind (channels, patterns, shard channels).
    subscribers: [HashMap<Rc<[u8]>, Vec<Sub>>; 3],
    /// Patterns with subscribers, in the order each was first subscribed to.
    pattern_order: Ordered,
    /// Each subscribed client's names.
    clients: HashMap<u64, Mine>,
    /// Messages published and not yet delivered.
    outbox: Vec<Message>,
    /// Clients that ran `MONITOR`, in that order.
    monitors: Vec<Sub>,
}

fn index(kind: SubKind) -> usize {
    match kind {
        SubKind::Channel => 0,
        SubKind::Pattern => 1,
        SubKind::Shard => 2,
    }
}

impl Registry {
    /// An empty registry whose outbox holds at most `limit` bytes for one subscriber.
    pub fn new(limit: usize) -> Registry {
        Registry {
            limit,
            queued_bytes: HashMap::new(),
            subscribers: Default::default(),
            pattern_order: Ordered::default(),
            clients: HashMap::new(),
            outbox: Vec::new(),
            monitors: Vec::new(),
        }
    }

    /// Queues `m`, or, past the limit for its subscriber, a [`MessageKind::Cut`] (once).
    fn queue(&mut self, m: Message) {
        let cost = m.encoded_len().max(std::mem::size_of::<Message>());
        let q = self.queued_bytes.entry(m.to.id).or_insert(0);
        if *q == usize::MAX {
            return;
        }
        if q.saturating_add(cost) > self.limit {
            *q = usize::MAX;
            self.outbox.push(Message { kind: MessageKind::Cut, pattern: None, ..m });
            return;
        }
        *q += cost;
        self.outbox.push(m);
    }

    /// Counts the outbox's bytes by subscriber again (after it lost messages).
    fn recount(&mut self) {
        self.queued_bytes.clear();
        for m in &self.outbox {
            let q = self.queued_bytes.entry(m.to.id).or_insert(0);
            if m.kind == MessageKind::Cut {
                *q = usize::MAX;
            } else if *q != usize::MAX {
                *q += m.encoded_len().max(std::mem::size_of::<Message>());
            }
        }
    }

    /// Subscribes `who` to `name`; whether it was not subscribed already.
    pub fn subscribe(&mut self, who: Sub, kind: SubKind, name: &[u8]) -> bool {
        let k = index(kind);
        let map = &mut self.subscribers[k];
        let name: Rc<[u8]> = match map.get_key_value(name) {
            Some((n, _)) => n.clone(),
            None => Rc::from(name),
        };
        if !self.clients.entry(who.id).or_default().names[k].insert(&name) {
            return false;
        }
        let subs = map.entry(name.clone()).or_default();
        if subs.is_empty() && kind == SubKind::Pattern {
            self.pattern_order.insert(&name);
        }
        subs.push(who);
        true
    }

    /// Unsubscribes client `id` from `name`; whether it was subscribed.
    pub fn unsubscribe(&mut self, id: u64, kind: SubKind, name: &[u8]) -> bool {
        let k = index(kind);
        let Some(mine) = self.clients.get_mut(&id) else { return false };
        if !mine.names[k].remove(name) {
            return false;
        }
        if mine.names.iter().all(|n| n.len() == 0) {
            self.clients.remove(&id);
        }
        let map = &mut self.subscribers[k];
        let subs = map.get_mut(name).expect("a client's name has its subscribers");
        subs.retain(|s| s.id != id);
        if subs.is_empty() {
            map.remove(name);
            if kind == SubKind::Pattern {
                self.pattern_order.remove(name);
            }
        }
        true
    }

    /// What client `id` subscribes to, of `kind`, in the order it subscribed.
    pub fn names_of(&self, id: u64, kind: SubKind) -> Vec<Vec<u8>> {
        self.clients
            .get(&id)
            .map_or_else(Vec::new, |m| m.names[index(kind)].iter().map(|n| n.to_vec()).collect())
    }

    /// A client is gone: it subscribes to nothing any more (and nothing more is queued for
    /// it; what is queued is dropped when delivered, its id no longer in its slot).
    pub fn remove_client(&mut self, id: u64) {
        self.monitors.retain(|m| m.id != id);
        let Some(mine) = self.clients.get(&id) else { return };
        let all: Vec<(SubKind, Vec<u8>)> = [SubKind::Channel, SubKind::Pattern, SubKind::Shard]
            .into_iter()
            .flat_map(|kind| mine.names[index(kind)].iter().map(move |n| (kind, n.to_vec())))
            .collect();
        for (kind, name) in all {
            self.unsubscribe(id, kind, &name);
        }
    }

    /// Names of `kind` with subscribers (matching `pattern`), sorted.
    pub fn names(&self, kind: SubKind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = self.subscribers[index(kind)]
            .keys()
            .filter(|n| pattern.is_none_or(|p| matches(p, n)))
            .map(|n| n.to_vec())
            .collect();
        v.sort_unstable();
        v
    }

    /// Subscribers of `name` (patterns' not counted).
    pub fn numsub(&self, kind: SubKind, name: &[u8]) -> usize {
        self.subscribers[index(kind)].get(name).map_or(0, Vec::len)
    }

    /// Names with subscribers: channels, patterns, shard channels.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.subscribers[0].len(), self.subscribers[1].len(), self.subscribers[2].len())
    }

    /// Queues `payload` on `channel` for its subscribers (and, unless `sharded`, for those of
    /// the patterns it matches); how many they are.
    pub fn publish(&mut self, channel: &[u8], payload: &[u8], sharded: bool) -> usize {
        let k = if sharded { 2 } else { 0 };
        let direct = self.subscribers[k].get_key_value(channel);
        if direct.is_none() && (sharded || self.pattern_order.len() == 0) {
            return 0;
        }
        let channel: Rc<[u8]> = direct.map_or_else(|| Rc::from(channel), |(n, _)| n.clone());
        let payload: Rc<[u8]> = Rc::from(payload);
        let kind = if sharded { MessageKind::SMessage } else { MessageKind::Message };
        let mut to_send = Vec::new();
        for &to in direct.map(|(_, s)| s.as_slice()).unwrap_or_default() {
            to_send.push(Message {
                to,
                kind,
                pattern: None,
                channel: channel.clone(),
                payload: payload.clone(),
            });
        }
        if !sharded {
            for p in self.pattern_order.iter() {
                if !matches(p, &channel) {
                    continue;
                }
                for &to in &self.subscribers[1][p] {
                    to_send.push(Message {
                        to,
                        kind: MessageKind::PMessage,
                        pattern: Some(p.clone()),
                        channel: channel.clone(),
                        payload: payload.clone(),
                    });
                }
            }
        }
        let receivers = to_send.len();
        for m in to_send {
            self.queue(m);
        }
        receivers
    }

    /// Makes `who` a monitor: every command run from now on is sent to it (`MONITOR`).
    pub fn add_monitor(&mut self, who: Sub) {
        if !self.monitors.contains(&who) {
            self.monitors.push(who);
        }
    }

    /// Whether a client monitors the commands.
    pub fn has_monitors(&self) -> bool {
        !self.monitors.is_empty()
    }

    /// Queues `line` (a command as `MONITOR` shows it) for every monitor, within the same
    /// limit as messages.
    pub fn feed_monitors(&mut self, line: &[u8]) {
        let payload: Rc<[u8]> = Rc::from(line);
        let channel: Rc<[u8]> = Rc::from(&b""[..]);
        for to in self.monitors.clone() {
            self.queue(Message {
                to,
                kind: MessageKind::Monitor,
                pattern: None,
                channel: channel.clone(),
                payload: payload.clone(),
            });
        }
    }

    /// Messages queued so far: a mark to cut the outbox back to.
    pub fn queued(&self) -> usize {
        self.outbox.len()
    }

    /// Drops the messages queued since `mark` (their command was undone).
    pub fn unpublish(&mut self, mark: usize) {
        if mark < self.outbox.len() {
            self.outbox.truncate(mark);
            self.recount();
        }
    }

    /// Takes the messages queued since `mark` for client `id` (in order; the others stay).
    pub fn take_for(&mut self, mark: usize, id: u64, out: &mut Vec<Message>) {
        if mark >= self.outbox.len() || !self.outbox[mark..].iter().any(|m| m.to.id == id) {
            return;
        }
        let tail = self.outbox.split_off(mark);
        for m in tail {
            if m.to.id == id {
                out.push(m);
            } else {
                self.outbox.push(m);
            }
        }
        self.queued_bytes.remove(&id);
    }

    /// Takes every queued message, into `out` (emptied first; its allocation is reused).
    pub fn take_all(&mut self, out: &mut Vec<Message>) {
        out.clear();
        std::mem::swap(&mut self.outbox, out);
        self.queued_bytes.clear();
    }

    /// Whether a message waits to be delivered.
    pub fn has_queued(&self) -> bool {
        !self.outbox.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Sub = Sub { slot: 0, id: 10 };
    const B: Sub = Sub { slot: 1, id: 11 };

    /// (to, kind, pattern, channel, payload).
    type Seen = (u64, MessageKind, Option<Vec<u8>>, Vec<u8>, Vec<u8>);

    fn delivered(r: &mut Registry) -> Vec<Seen> {
        let mut v = Vec::new();
        r.take_all(&mut v);
        v.into_iter()
            .map(|m| (m.to.id, m.kind, m.pattern.map(|p| p.to_vec()), m.channel.to_vec(), m.payload.to_vec()))
            .collect()
    }

    #[test]
    fn channels_patterns_and_shards_reach_their_subscribers_in_order() {
        let mut r = Registry::new(usize::MAX);
        assert!(r.subscribe(A, SubKind::Channel, b"news"));
        assert!(!r.subscribe(A, SubKind::Channel, b"news"), "once");
        assert!(r.subscribe(B, SubKind::Channel, b"news"));
        assert!(r.subscribe(B, SubKind::Pattern, b"n*"));
        assert!(r.subscribe(A, SubKind::Pattern, b"*s"));
        assert!(r.subscribe(A, SubKind::Shard, b"news"));
        assert_eq!(r.publish(b"news", b"hi", false), 4);
        let m = delivered(&mut r);
        let kinds: Vec<(u64, MessageKind)> = m.iter().map(|x| (x.0, x.1)).collect();
        assert_eq!(
            kinds,
            [
                (10, MessageKind::Message),
                (11, MessageKind::Message),
                (11, MessageKind::PMessage),
                (10, MessageKind::PMessage)
            ]
        );
        assert_eq!(m[2].2.as_deref(), Some(&b"n*"[..]));
        assert_eq!(
            r.publish(b"news", b"s", true),
            1,
            "a shard channel is its own namespace, without patterns"
        );
        assert_eq!(delivered(&mut r)[0].1, MessageKind::SMessage);
        assert_eq!(r.publish(b"other", b"x", false), 0);
        assert_eq!(r.counts(), (1, 2, 1));
        assert_eq!(r.numsub(SubKind::Channel, b"news"), 2);
        assert_eq!(r.names(SubKind::Pattern, Some(b"n*")), [b"n*".to_vec()]);
        assert_eq!(r.names_of(10, SubKind::Pattern), [b"*s".to_vec()]);
    }

    #[test]
    fn unsubscribing_and_leaving_forget_everything() {
        let mut r = Registry::new(usize::MAX);
        r.subscribe(A, SubKind::Channel, b"c1");
        r.subscribe(A, SubKind::Channel, b"c2");
        r.subscribe(A, SubKind::Pattern, b"p*");
        r.subscribe(B, SubKind::Pattern, b"p*");
        assert!(!r.unsubscribe(10, SubKind::Channel, b"nope"));
        assert!(r.unsubscribe(10, SubKind::Channel, b"c1"));
        assert_eq!(r.names_of(10, SubKind::Channel), [b"c2".to_vec()]);
        r.remove_client(10);
        assert_eq!(r.counts(), (0, 1, 0));
        assert!(!r.clients.contains_key(&10));
        r.remove_client(11);
        assert_eq!(r.counts(), (0, 0, 0));
        assert!(r.clients.is_empty() && r.pattern_order.len() == 0);
    }

    #[test]
    fn an_undone_command_published_nothing_and_a_client_takes_its_own() {
        let mut r = Registry::new(usize::MAX);
        r.subscribe(A, SubKind::Channel, b"c");
        r.subscribe(B, SubKind::Channel, b"c");
        r.publish(b"c", b"1", false);
        let mark = r.queued();
        r.publish(b"c", b"2", false);
        r.unpublish(mark);
        let mut mine = Vec::new();
        r.take_for(0, 11, &mut mine);
        assert_eq!(mine.len(), 1);
        assert_eq!(&*mine[0].payload, b"1");
        let rest = delivered(&mut r);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0, 10);
    }

    #[test]
    fn what_is_queued_for_one_subscriber_is_bounded_by_the_limit() {
        let mut r = Registry::new(4096);
        r.subscribe(A, SubKind::Pattern, b"*");
        r.subscribe(A, SubKind::Pattern, b"k*");
        r.subscribe(B, SubKind::Channel, b"quiet");
        for i in 0..10_000 {
            assert_eq!(
                r.publish(format!("k{i}").as_bytes(), b"event", false),
                2,
                "every receiver is counted"
            );
        }
        assert_eq!(r.publish(b"quiet", b"x", false), 2, "B's, and A's (cut) through `*`");
        let m = delivered(&mut r);
        let to_a: Vec<&MessageKind> = m.iter().filter(|x| x.0 == 10).map(|x| &x.1).collect();
        assert!(to_a.len() < 4096 / std::mem::size_of::<Message>() + 2, "{} queued", to_a.len());
        assert_eq!(to_a.last(), Some(&&MessageKind::Cut), "cut once, last");
        assert_eq!(to_a.iter().filter(|k| ***k == MessageKind::Cut).count(), 1);
        assert!(m.iter().any(|x| x.0 == 11), "another subscriber still gets its message");
        // A command undone gives the room back.
        let mut r = Registry::new(4096);
        r.subscribe(A, SubKind::Channel, b"c");
        let mark = r.queued();
        for _ in 0..1000 {
            r.publish(b"c", b"x", false);
        }
        r.unpublish(mark);
        r.publish(b"c", b"after", false);
        let m = delivered(&mut r);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].1, MessageKind::Message);
    }

    #[test]
    fn messages_are_written_as_redis_writes_them() {
        let m = Message {
            to: A,
            kind: MessageKind::PMessage,
            pattern: Some(Rc::from(&b"ch*"[..])),
            channel: Rc::from(&b"chan"[..]),
            payload: Rc::from(&b"hello"[..]),
        };
        let mut out = Vec::new();
        m.write(Proto::Resp2, &mut out);
        assert_eq!(out, b"*4\r\n$8\r\npmessage\r\n$3\r\nch*\r\n$4\r\nchan\r\n$5\r\nhello\r\n");
        assert_eq!(m.encoded_len(), out.len());
        let m = Message { kind: MessageKind::SMessage, pattern: None, ..m };
        let mut out = Vec::new();
        m.write(Proto::Resp3, &mut out);
        assert_eq!(out, b">3\r\n$8\r\nsmessage\r\n$4\r\nchan\r\n$5\r\nhello\r\n");
        assert_eq!(m.encoded_len(), out.len());
        let m = Message { kind: MessageKind::Message, payload: Rc::from(vec![7u8; 12345]), ..m };
        let mut out = Vec::new();
        m.write(Proto::Resp3, &mut out);
        assert_eq!(m.encoded_len(), out.len());
    }
}
