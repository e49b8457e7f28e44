//! The test's own knowledge of what happened, kept apart from the code under test: every group
//! the application issued (with the exact bytes each frame carries), which were acknowledged and
//! to which primary incarnation in which epoch, which the mirror applied, the data area those
//! applications must have produced, and the highest epoch the mirror has announced.

use super::Check;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// The writes of one group, frame by frame: `(region offset, bytes)`.
pub(super) type Writes = Vec<(u64, Vec<u8>)>;

/// A group is named by its session and sequence number: sequence numbers may be reused by a
/// later session for groups that never reached the mirror.
pub(super) type GroupId = (u64, u64);

pub(super) struct Model {
    issued: HashMap<GroupId, Writes>,
    acked: Vec<GroupId>,
    /// `acked[..acked_checked]` were found applied by [`Model::check_acked_applied`].
    acked_checked: usize,
    failed: usize,
    applied: HashSet<GroupId>,
    last_applied_seq: u64,
    /// The zero region with every applied group folded in, in the order applied.
    shadow: Vec<u8>,
    /// The highest epoch the mirror has announced in a Welcome: it has fenced every lower one.
    fence: u64,
    /// Groups issued by a primary whose epoch was already fenced: never to be acknowledged or
    /// applied.
    fenced: HashSet<GroupId>,
    /// Per epoch, the primary incarnation that was acknowledged in it. (A primary takes only acks
    /// of its own epoch, so this holds as long as the coordinator never gives an epoch twice; it
    /// is checked so that a change to how epochs are given cannot make it false silently.)
    ack_owner: HashMap<u64, usize>,
}

impl Model {
    pub fn new(region_size: u64) -> Model {
        Model {
            issued: HashMap::new(),
            acked: Vec::new(),
            acked_checked: 0,
            failed: 0,
            applied: HashSet::new(),
            last_applied_seq: 0,
            shadow: vec![0; region_size as usize],
            fence: 0,
            fenced: HashSet::new(),
            ack_owner: HashMap::new(),
        }
    }

    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The mirror welcomed a primary at `epoch`.
    pub fn announced(&mut self, epoch: u64) {
        self.fence = self.fence.max(epoch);
    }

    /// Group `id` was issued by a primary at an epoch below the fence.
    pub fn issued_fenced(&mut self, id: GroupId) {
        self.fenced.insert(id);
    }

    pub fn issued(&mut self, id: GroupId, writes: Writes) {
        let old = self.issued.insert(id, writes);
        assert!(old.is_none(), "group {id:?} issued twice");
    }

    /// Primary incarnation `node`, at `epoch`, received the acknowledgement of group `id`.
    /// Invariant 4: no group of a fenced primary, and one incarnation per epoch.
    pub fn acked(&mut self, id: GroupId, node: usize, epoch: u64) -> Check<()> {
        if !self.issued.contains_key(&id) {
            return Err(format!("primary acknowledged group {id:x?} it never issued"));
        }
        if self.fenced.contains(&id) {
            return Err(format!(
                "fencing broken: group seq {} of session {:#x}, sent by primary {node} at epoch {epoch} \
                 after the mirror had announced epoch {}, was acknowledged",
                id.1, id.0, self.fence
            ));
        }
        match self.ack_owner.entry(epoch) {
            Entry::Occupied(o) if *o.get() != node => {
                return Err(format!(
                    "fencing broken: primaries {} and {node} were both acknowledged groups of epoch {epoch}",
                    o.get()
                ))
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(v) => {
                v.insert(node);
            }
        }
        self.acked.push(id);
        Ok(())
    }

    pub fn failed(&mut self, count: usize) {
        self.failed += count;
    }

    /// The mirror has made group `id` durable in its data area with `writes`. It must be a group
    /// the primary issued, with exactly those bytes (no torn or mixed group), applied once, after
    /// every group applied before it.
    pub fn applied(&mut self, id: GroupId, writes: &Writes) -> Check<()> {
        let (session, seq) = id;
        let Some(expected) = self.issued.get(&id) else {
            return Err(format!(
                "mirror applied group seq {seq} of session {session:#x} that the primary never issued"
            ));
        };
        if self.fenced.contains(&id) {
            return Err(format!(
                "fencing broken: mirror applied group seq {seq} of session {session:#x}, sent by a \
                 primary after the mirror had fenced its epoch"
            ));
        }
        if expected != writes {
            return Err(format!(
                "mirror applied a torn or mixed group seq {seq} of session {session:#x}: \
                 {} frame writes where {} were issued (offsets {:?} vs {:?})",
                writes.len(),
                expected.len(),
                writes.iter().map(|w| w.0).collect::<Vec<_>>(),
                expected.iter().map(|w| w.0).collect::<Vec<_>>(),
            ));
        }
        if seq <= self.last_applied_seq {
            return Err(format!(
                "mirror applied group {seq} after group {}: out of sequence order",
                self.last_applied_seq
            ));
        }
        if !self.applied.insert(id) {
            return Err(format!("mirror applied group {seq} twice"));
        }
        self.last_applied_seq = seq;
        for (offset, bytes) in writes {
            let at = *offset as usize;
            self.shadow[at..at + bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }

    /// Invariant 2: the data area is exactly the fold of the applied groups.
    pub fn check_data(&self, data: &[u8]) -> Check<()> {
        if data == self.shadow.as_slice() {
            return Ok(());
        }
        let first = data.iter().zip(&self.shadow).position(|(a, b)| a != b).unwrap_or(0);
        let last = data.iter().zip(&self.shadow).rposition(|(a, b)| a != b).unwrap_or(0);
        Err(format!(
            "mirror data area differs from the fold of its {} applied groups (last seq {}) \
             at offsets {first}..={last}: a torn or lost group is visible",
            self.applied.len(),
            self.last_applied_seq
        ))
    }

    /// Invariant 1: every acknowledged group is applied.
    pub fn check_acked_applied(&mut self, when: &str) -> Check<()> {
        // Applied groups stay applied: only the acknowledgements since the last check are new.
        match self.acked[self.acked_checked..].iter().find(|id| !self.applied.contains(id)) {
            None => {
                self.acked_checked = self.acked.len();
                Ok(())
            }
            Some(&(session, seq)) => Err(format!(
                "acknowledged group seq {seq} of session {session:#x} is not in the mirror's \
                 data area after {when}: acknowledged loss"
            )),
        }
    }

    pub fn counts(&self) -> (usize, usize, usize, usize) {
        (self.issued.len(), self.acked.len(), self.failed, self.applied.len())
    }
}
