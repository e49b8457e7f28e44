//! The test's own knowledge of what happened, kept apart from the code under test: every group
//! the application issued (with the exact bytes each frame carries), which were acknowledged and
//! to which primary incarnation in which epoch, which the mirror applied, the data area those
//! applications must have produced, and the highest epoch the mirror has announced; and of
//! copies, whether the data area may differ from that fold (a fault wiped or discarded it, or a
//! copy landed bytes in it) until a copy ends and its last group is applied, and the generation
//! the mirror must then hold.

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
    /// Copy groups: their writes are the region bytes their Copy frames carried, which land in
    /// the data area before the group is applied (their Copied record writes nothing).
    copy_groups: HashSet<GroupId>,
    /// The data area need not be the fold of the applied groups: it was wiped or discarded, or
    /// a copy landed bytes in it, and no copy has completed since.
    copying: bool,
    /// Every lane's CopyEnd of a copy reached the mirror: the copy's last group and generation.
    copy_ended: Option<(u64, u64)>,
    /// The generation the mirror's data area holds once no copy is unfinished.
    generation: u64,
    copies_completed: u64,
}

impl Model {
    pub fn new(region_size: u64, generation: u64) -> Model {
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
            copy_groups: HashSet::new(),
            copying: false,
            copy_ended: None,
            generation,
            copies_completed: 0,
        }
    }

    /// Copy group `id` was issued: its Copy frames carry `writes` (as its Copied frame lists
    /// them, coalesced), read from the primary's region after its number was assigned.
    pub fn issued_copy(&mut self, id: GroupId, writes: Writes) {
        self.issued(id, writes);
        self.copy_groups.insert(id);
    }

    /// The data area was wiped or discarded, or a copy began or landed bytes in it: until a
    /// copy completes it need not be the fold of the applied groups, and must be reported
    /// inconsistent.
    pub fn disturbed(&mut self) {
        self.copying = true;
        self.copy_ended = None;
    }

    /// Whether a copy is unfinished (see [`Model::disturbed`]).
    pub fn copying(&self) -> bool {
        self.copying
    }

    /// Every lane's CopyEnd of a copy reached the mirror: it completes, taking `generation`,
    /// once group `until` is applied. (A copy of nothing, such as a bitmap copy when nothing
    /// changed, never disturbed the area, and completes all the same.)
    pub fn copy_ended(&mut self, until: u64, generation: u64) {
        self.copy_ended = Some((until, generation));
        // Its last group may be applied already.
        self.complete_copy();
    }

    /// The copy whose every CopyEnd is in completes once its last group is applied.
    fn complete_copy(&mut self) {
        if let Some((_, generation)) = self.copy_ended.filter(|&(until, _)| self.last_applied_seq >= until) {
            self.copying = false;
            self.copy_ended = None;
            self.generation = generation;
            self.copies_completed += 1;
        }
    }

    pub fn copies_completed(&self) -> u64 {
        self.copies_completed
    }

    /// The generation the mirror holds must be the last completed copy's (or the first one).
    pub fn check_generation(&self, generation: u64) -> Check<()> {
        if self.copying || generation == self.generation {
            return Ok(());
        }
        Err(format!(
            "the mirror's data area holds generation {generation:#x} after its copy completed at \
             generation {:#x}",
            self.generation
        ))
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
        let copied = self.copy_groups.contains(&id);
        // A copy group's bytes landed before it was applied, and may have been written over
        // since by earlier groups applied after them: its ranges must match, and the data
        // area's bytes are checked once the copy completes.
        let same = if copied {
            expected.iter().map(|(o, b)| (*o, b.len())).eq(writes.iter().map(|(o, b)| (*o, b.len())))
        } else {
            expected == writes
        };
        if !same {
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
        for (offset, bytes) in expected {
            let at = *offset as usize;
            self.shadow[at..at + bytes.len()].copy_from_slice(bytes);
        }
        self.complete_copy();
        Ok(())
    }

    /// Invariant 2: the data area is exactly the fold of the applied groups (unless a copy into
    /// it is unfinished).
    pub fn check_data(&self, data: &[u8]) -> Check<()> {
        if self.copying || data == self.shadow.as_slice() {
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
