//! The test's own knowledge of what happened, kept apart from the code under test: every group
//! the application issued (with the exact bytes each frame carries), which were acknowledged,
//! which the mirror applied, and the data area those applications must have produced.

use super::Check;
use std::collections::{HashMap, HashSet};

/// The writes of one group, frame by frame: `(region offset, bytes)`.
pub(super) type Writes = Vec<(u64, Vec<u8>)>;

/// A group is named by its session and sequence number: sequence numbers may be reused by a
/// later session for groups that never reached the mirror.
pub(super) type GroupId = (u64, u64);

pub(super) struct Model {
    issued: HashMap<GroupId, Writes>,
    acked: Vec<GroupId>,
    failed: usize,
    applied: HashSet<GroupId>,
    last_applied_seq: u64,
    /// The zero region with every applied group folded in, in the order applied.
    shadow: Vec<u8>,
}

impl Model {
    pub fn new(region_size: u64) -> Model {
        Model {
            issued: HashMap::new(),
            acked: Vec::new(),
            failed: 0,
            applied: HashSet::new(),
            last_applied_seq: 0,
            shadow: vec![0; region_size as usize],
        }
    }

    pub fn issued(&mut self, id: GroupId, writes: Writes) {
        let old = self.issued.insert(id, writes);
        assert!(old.is_none(), "group {id:?} issued twice");
    }

    pub fn acked(&mut self, id: GroupId) -> Check<()> {
        if !self.issued.contains_key(&id) {
            return Err(format!("primary acknowledged group {id:x?} it never issued"));
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
    pub fn check_acked_applied(&self, when: &str) -> Check<()> {
        match self.acked.iter().find(|id| !self.applied.contains(id)) {
            None => Ok(()),
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
