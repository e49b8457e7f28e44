//! Clients parked by a blocking command (BLPOP, BLMOVE, BZPOPMIN, ...: a command that returns
//! [`Outcome::Block`](crate::cmd::Outcome::Block), `cmd/blocking.rs`), and waking them.
//!
//! A parked client's request stays unread at the head of its input, so its later requests wait
//! behind it. It is listed under each key it waits on, in the order clients blocked. After a
//! command that may have created keys (a write: its key arguments, the queued commands' for
//! `EXEC`; every key waited on after a write whose keys cannot be told, such as `SWAPDB`,
//! `FLUSHALL` or a script), the keys with waiters are marked ready; then, in the same batch,
//! each client waiting on a ready key, in order, whose key holds the kind it waits for in its
//! database, has its request run again: served, it leaves every list (its reply goes with the
//! batch, its later requests run next); still blocked, it keeps its place. Keys are named
//! without their database, so that `MOVE` wakes a client in the database it moves to. At its
//! deadline a client is answered a null array, as Redis answers a timeout (and `CLIENT UNBLOCK`
//! answers it so, or with an error). A client that closes its connection stops waiting.

use super::{ClientRun, Server};
use crate::cmd::{self, Args, Session, Wait};
use crate::error::KvError;
use crate::resp::Reply;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// A parked client's request.
#[derive(Debug)]
pub struct Parked {
    /// The client's id (its slot may be reused once it is gone).
    pub id: u64,
    /// What it waits for.
    pub wait: Wait,
    /// Bytes of its request at the head of its input.
    pub len: usize,
}

/// The parked clients, by slot, and the keys they wait on.
#[derive(Default)]
pub struct Waits {
    parked: HashMap<usize, Parked>,
    /// Slots waiting on each key, in the order they blocked.
    by_key: HashMap<Vec<u8>, VecDeque<usize>>,
    /// (deadline, slot) of those with a timeout.
    deadlines: BTreeSet<(u64, usize)>,
    /// Keys written since they were last served, in order, and as a set.
    ready: VecDeque<Vec<u8>>,
    ready_set: HashSet<Vec<u8>>,
    /// `CLIENT UNBLOCK` requests: (slot, answer an error rather than the timeout's null).
    unblocks: Vec<(usize, bool)>,
    /// Cluster mode's topology changed: every parked client runs its request again, to be
    /// redirected if its keys' slot left the shard (or to park again).
    recheck: bool,
}

/// Which keys a command may have made non-empty.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// None (it only reads, or only pops).
    Nothing,
    /// These.
    Keys(Vec<Vec<u8>>),
    /// Any: its keys cannot be told from its arguments.
    Unknown,
}

impl Waits {
    /// Whether any client is parked.
    pub fn any(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Clients parked.
    pub fn count(&self) -> usize {
        self.parked.len()
    }

    /// Whether the client at `slot` is parked.
    pub fn is_parked(&self, slot: usize) -> bool {
        self.parked.contains_key(&slot)
    }

    /// The kind the client at `slot` waits for, if it is parked.
    pub fn kind(&self, slot: usize) -> Option<u8> {
        self.parked.get(&slot).map(|p| p.wait.kind)
    }

    /// Parks the client at `slot` (its request of `len` bytes waiting); a client parked already
    /// (its request ran again and still blocks) keeps its place and its deadline.
    pub fn park(&mut self, slot: usize, id: u64, wait: Wait, len: usize) {
        if self.parked.get(&slot).is_some_and(|p| p.id == id) {
            return;
        }
        self.unpark(slot);
        for k in &wait.keys {
            self.by_key.entry(k.clone()).or_default().push_back(slot);
        }
        if wait.deadline_ms != 0 {
            self.deadlines.insert((wait.deadline_ms, slot));
        }
        self.parked.insert(slot, Parked { id, wait, len });
    }

    /// Takes the client at `slot` off every list.
    pub fn unpark(&mut self, slot: usize) -> Option<Parked> {
        let p = self.parked.remove(&slot)?;
        for k in &p.wait.keys {
            if let Some(q) = self.by_key.get_mut(k) {
                // Served in order, a client is most often the first.
                if q.front() == Some(&slot) {
                    q.pop_front();
                } else {
                    q.retain(|&s| s != slot);
                }
                if q.is_empty() {
                    self.by_key.remove(k);
                }
            }
        }
        self.deadlines.remove(&(p.wait.deadline_ms, slot));
        Some(p)
    }

    /// Marks what a command wrote as ready, where clients wait on it.
    pub fn note(&mut self, w: Written) {
        match w {
            Written::Nothing => {}
            Written::Keys(keys) => {
                for k in keys {
                    self.signal(k);
                }
            }
            Written::Unknown => {
                let all: Vec<Vec<u8>> = self.by_key.keys().cloned().collect();
                for k in all {
                    self.signal(k);
                }
            }
        }
    }

    fn signal(&mut self, key: Vec<u8>) {
        if self.by_key.contains_key(&key) && !self.ready_set.contains(&key) {
            self.ready_set.insert(key.clone());
            self.ready.push_back(key);
        }
    }

    /// Whether keys wait to be served (or clients to be unblocked, or checked again).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.unblocks.is_empty() || self.recheck
    }

    /// Asks that every parked client run its request again (the cluster's topology changed).
    pub fn recheck_all(&mut self) {
        self.recheck = !self.parked.is_empty();
    }

    /// `CLIENT UNBLOCK id`: whether client `id` is parked (it is then answered, a null or
    /// `error`, when the server next serves).
    pub fn request_unblock(&mut self, id: u64, error: bool) -> bool {
        let Some((&slot, _)) = self.parked.iter().find(|(_, p)| p.id == id) else { return false };
        if self.unblocks.iter().any(|&(s, _)| s == slot) {
            return false;
        }
        self.unblocks.push((slot, error));
        true
    }

    /// The next ready key and the clients waiting on it, in order.
    pub fn next_ready(&mut self) -> Option<(Vec<u8>, Vec<usize>)> {
        loop {
            let key = self.ready.pop_front()?;
            self.ready_set.remove(&key);
            if let Some(q) = self.by_key.get(&key) {
                return Some((key, q.iter().copied().collect()));
            }
        }
    }

    /// Puts a key back at the head of the ready ones (its serving goes on next turn).
    pub fn requeue(&mut self, key: Vec<u8>) {
        if self.ready_set.insert(key.clone()) {
            self.ready.push_front(key);
        }
    }

    /// The slots whose deadline is at or before `now_ms`.
    pub fn due(&self, now_ms: u64) -> Vec<usize> {
        self.deadlines.range(..(now_ms + 1, 0)).map(|&(_, s)| s).collect()
    }

    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|&(d, _)| d)
    }
}

/// The keys a command may make non-empty, from its table entry: a write's key arguments (`EXEC`:
/// those of the commands it queued); the pops none; a write whose keys the table cannot say
/// (none listed, or "movablekeys") any.
pub fn written(args: &Args, s: &Session) -> Written {
    let mut name = [0u8; 32];
    let Some(spec) = cmd::args::upper(args.get(0), &mut name).and_then(cmd::find_spec) else {
        return Written::Nothing;
    };
    if spec.name == "EXEC" {
        let Some(m) = &s.multi else { return Written::Nothing };
        let mut keys = Vec::new();
        for q in &m.queue {
            match written(&Args::Owned(q), s) {
                Written::Nothing => {}
                Written::Keys(k) => keys.extend(k),
                Written::Unknown => return Written::Unknown,
            }
        }
        return if keys.is_empty() { Written::Nothing } else { Written::Keys(keys) };
    }
    let has = |f: &str| spec.flags.contains(&f);
    if !has("write") && !has("may_replicate") {
        return Written::Nothing;
    }
    // Pops leave no key fuller than it was (LMPOP's keys are not in its table entry either).
    if matches!(
        spec.name,
        "LPOP"
            | "RPOP"
            | "BLPOP"
            | "BRPOP"
            | "LMPOP"
            | "BLMPOP"
            | "ZPOPMIN"
            | "ZPOPMAX"
            | "BZPOPMIN"
            | "BZPOPMAX"
            | "ZMPOP"
            | "BZMPOP"
    ) {
        return Written::Nothing;
    }
    if spec.first_key <= 0 || has("movablekeys") {
        return Written::Unknown;
    }
    let n = args.len() as i32;
    let last = if spec.last_key < 0 { n + spec.last_key } else { spec.last_key.min(n - 1) };
    let step = spec.step.max(1) as usize;
    let keys = (spec.first_key..=last).step_by(step).map(|i| args.get(i as usize).to_vec()).collect();
    Written::Keys(keys)
}

impl Server<'_> {
    /// Runs again the requests of the clients waiting on the keys marked ready, in the batch.
    /// Returns true when the batch must be sealed first: the rest are served next turn.
    pub(super) fn serve_ready(&mut self, now_ms: u64) -> Result<bool, KvError> {
        let unblocks = std::mem::take(&mut self.waits.borrow_mut().unblocks);
        for (slot, error) in unblocks {
            self.answer_parked(slot, error);
        }
        if std::mem::take(&mut self.waits.borrow_mut().recheck) {
            let mut parked: Vec<usize> = self.waits.borrow().parked.keys().copied().collect();
            parked.sort_unstable();
            for slot in parked {
                if self.clients[slot].as_ref().is_none_or(|c| c.closing) {
                    continue;
                }
                match self.run_client(slot, now_ms, true)? {
                    ClientRun::Served => {
                        self.woken.push(slot);
                        self.mark_ready(slot);
                    }
                    ClientRun::SealFirst => {
                        // The rest after the seal (one checked already parks again).
                        self.waits.borrow_mut().recheck = true;
                        return Ok(true);
                    }
                    ClientRun::Parked | ClientRun::Drained | ClientRun::Woke => {}
                }
            }
        }
        let databases = self.opts.databases.min(self.store.databases()).max(1);
        loop {
            let next = self.waits.borrow_mut().next_ready();
            let Some((key, slots)) = next else { break };
            for slot in slots {
                let Some(kind) = self.waits.borrow().kind(slot) else { continue };
                let Some(c) = self.clients[slot].as_ref() else {
                    self.waits.borrow_mut().unpark(slot);
                    continue;
                };
                if c.closing {
                    continue;
                }
                // Only a key of the kind it waits for wakes it (a list replaced by a string,
                // or expired, does not).
                self.store.select(c.session.db.min(databases - 1));
                if self.store.get(&key, now_ms)?.is_none_or(|f| f.head.kind != kind) {
                    continue;
                }
                match self.run_client(slot, now_ms, true)? {
                    ClientRun::Served => {
                        self.woken.push(slot);
                        self.mark_ready(slot);
                    }
                    ClientRun::SealFirst => {
                        self.waits.borrow_mut().requeue(key);
                        return Ok(true);
                    }
                    ClientRun::Parked | ClientRun::Drained | ClientRun::Woke => {}
                }
            }
        }
        Ok(false)
    }

    /// Answers the clients whose deadline has passed with a null array.
    pub(super) fn expire_waits(&mut self, now_ms: u64) {
        let due = self.waits.borrow().due(now_ms);
        for slot in due {
            self.answer_parked(slot, false);
        }
    }

    /// Ends the wait of the client at `slot` without running its request: answers it a null
    /// array (a timeout) or, for `CLIENT UNBLOCK ... ERROR`, an error; its later requests run
    /// next.
    fn answer_parked(&mut self, slot: usize, error: bool) {
        let Some(p) = self.waits.borrow_mut().unpark(slot) else { return };
        let Some(c) = self.clients[slot].as_mut().filter(|c| c.session.id == p.id) else { return };
        let mut r = Reply { buf: &mut c.out, proto: c.session.proto };
        if error {
            r.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
        } else {
            r.null_array();
        }
        c.start += p.len;
        self.woken.push(slot);
        self.mark_ready(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(keys: &[&str], deadline_ms: u64) -> Wait {
        Wait { keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(), kind: 3, deadline_ms }
    }

    #[test]
    fn clients_wait_in_the_order_they_blocked_and_keep_their_place() {
        let mut w = Waits::default();
        w.park(4, 40, wait(&["a", "b"], 0), 20);
        w.park(1, 10, wait(&["b"], 500), 20);
        w.park(7, 70, wait(&["a"], 300), 20);
        assert_eq!(w.count(), 3);
        w.note(Written::Keys(vec![b"b".to_vec(), b"zzz".to_vec(), b"b".to_vec()]));
        assert_eq!(w.next_ready(), Some((b"b".to_vec(), vec![4, 1])));
        assert_eq!(w.next_ready(), None, "a key once, and none without waiters");
        // Running again and blocking again keeps the place.
        w.park(4, 40, wait(&["a", "b"], 0), 20);
        w.note(Written::Unknown);
        let mut got = vec![w.next_ready().unwrap(), w.next_ready().unwrap()];
        got.sort();
        assert_eq!(got, vec![(b"a".to_vec(), vec![4, 7]), (b"b".to_vec(), vec![4, 1])]);
        // Served: off every list; a reused slot is a new client.
        assert!(w.unpark(4).is_some());
        w.park(1, 11, wait(&["c"], 0), 20);
        w.note(Written::Keys(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]));
        assert_eq!(w.next_ready(), Some((b"a".to_vec(), vec![7])));
        assert_eq!(w.next_ready(), Some((b"c".to_vec(), vec![1])));
        assert_eq!(w.next_ready(), None);
        assert_eq!(w.next_deadline(), Some(300));
        assert_eq!(w.due(299), Vec::<usize>::new());
        assert_eq!(w.due(300), vec![7]);
        w.requeue(b"a".to_vec());
        assert_eq!(w.next_ready(), Some((b"a".to_vec(), vec![7])));
    }

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn what_a_command_may_have_written() {
        let mut s = Session::new(1, "t".into(), true);
        let w = |a: &[&str], s: &Session| written(&Args::Owned(&args(a)), s);
        assert_eq!(w(&["lpush", "k", "a", "b"], &s), Written::Keys(vec![b"k".to_vec()]));
        assert_eq!(w(&["LMOVE", "a", "b", "LEFT", "RIGHT"], &s), Written::Keys(args(&["a", "b"])));
        assert_eq!(w(&["RENAME", "a", "b"], &s), Written::Keys(args(&["a", "b"])));
        assert_eq!(w(&["blpop", "a", "b", "0"], &s), Written::Nothing);
        assert_eq!(w(&["BRPOPLPUSH", "a", "b", "0"], &s), Written::Keys(args(&["a", "b"])));
        assert_eq!(w(&["GET", "a"], &s), Written::Nothing);
        assert_eq!(w(&["LMPOP", "1", "a", "LEFT"], &s), Written::Nothing);
        assert_eq!(w(&["SWAPDB", "0", "1"], &s), Written::Unknown);
        assert_eq!(w(&["FLUSHALL"], &s), Written::Unknown);
        assert_eq!(w(&["EXEC"], &s), Written::Nothing);
        s.multi = Some(cmd::Multi {
            queue: vec![args(&["SET", "x", "1"]), args(&["GET", "y"]), args(&["RPUSH", "l", "e"])],
            ..Default::default()
        });
        assert_eq!(w(&["EXEC"], &s), Written::Keys(args(&["x", "l"])));
    }
}
