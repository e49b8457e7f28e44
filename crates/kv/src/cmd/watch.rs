//! Optimistic transactions: `WATCH` keys, and an `EXEC` that finds one of them touched since
//! aborts (a null reply), as Redis does. A key is touched by a write command that names it (its
//! key arguments, as its table entry gives them), by `FLUSHDB`/`FLUSHALL`/`SWAPDB` when it
//! exists, and by its expiry. Touches of a command are recorded as it runs and take effect only
//! if it completes: an undone command touched nothing.

use std::collections::{HashMap, HashSet};

/// The keys clients watch, and the clients whose watched keys were touched.
#[derive(Default, Debug)]
pub struct Watches {
    /// (logical database, key) to the clients watching it.
    by_key: HashMap<(usize, Vec<u8>), Vec<u64>>,
    /// Each client's watched keys.
    of_client: HashMap<u64, Vec<(usize, Vec<u8>)>>,
    /// Clients one of whose watched keys was touched.
    dirty: HashSet<u64>,
    /// Touches of the command running, applied when it completes.
    pending: Vec<(usize, Vec<u8>)>,
}

impl Watches {
    /// Whether any client watches anything (else nothing needs recording).
    pub fn any(&self) -> bool {
        !self.by_key.is_empty()
    }

    /// Client `id` watches `key` in database `db`.
    pub fn watch(&mut self, id: u64, db: usize, key: &[u8]) {
        let k = (db, key.to_vec());
        let mine = self.of_client.entry(id).or_default();
        if mine.contains(&k) {
            return;
        }
        mine.push(k.clone());
        self.by_key.entry(k).or_default().push(id);
    }

    /// Client `id` watches nothing any more, and its touched flag goes.
    pub fn unwatch(&mut self, id: u64) {
        for k in self.of_client.remove(&id).unwrap_or_default() {
            if let Some(ids) = self.by_key.get_mut(&k) {
                ids.retain(|&c| c != id);
                if ids.is_empty() {
                    self.by_key.remove(&k);
                }
            }
        }
        self.dirty.remove(&id);
    }

    /// Whether one of client `id`'s watched keys was touched.
    pub fn is_dirty(&self, id: u64) -> bool {
        self.dirty.contains(&id)
    }

    /// Records that the running command touches `key` in `db`.
    pub fn touch(&mut self, db: usize, key: &[u8]) {
        if self.by_key.contains_key(&(db, key.to_vec())) {
            self.pending.push((db, key.to_vec()));
        }
    }

    /// The watched keys of database `db` (to check which of them exist before a flush or a swap).
    pub fn watched_in(&self, db: usize) -> Vec<Vec<u8>> {
        self.by_key.keys().filter(|(d, _)| *d == db).map(|(_, k)| k.clone()).collect()
    }

    /// The running command completed: its touches take effect.
    pub fn commit(&mut self) {
        for k in self.pending.drain(..) {
            for &id in self.by_key.get(&k).into_iter().flatten() {
                self.dirty.insert(id);
            }
        }
    }

    /// The running command was undone: it touched nothing.
    pub fn discard(&mut self) {
        self.pending.clear();
    }

    /// A touch outside any command (an expiry), effective at once.
    pub fn touch_now(&mut self, db: usize, key: &[u8]) {
        self.touch(db, key);
        self.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_count_once_committed_and_only_for_watchers() {
        let mut w = Watches::default();
        w.watch(1, 0, b"a");
        w.watch(2, 0, b"b");
        w.watch(2, 3, b"a");
        w.touch(0, b"a");
        w.discard();
        assert!(!w.is_dirty(1), "an undone command touches nothing");
        w.touch(0, b"a");
        w.touch(0, b"c");
        w.commit();
        assert!(w.is_dirty(1) && !w.is_dirty(2));
        w.unwatch(1);
        assert!(!w.is_dirty(1));
        w.touch_now(3, b"a");
        assert!(w.is_dirty(2));
        w.unwatch(2);
        assert!(!w.any());
    }
}
