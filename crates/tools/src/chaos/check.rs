//! The invariants a chaos trial checks, on copies of the region read straight from the nodes'
//! files.

use super::workload::{decode, Ack, Slot, RECORD};
use mojim_format::region::REGION_HEADER_SIZE;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The data area of a region or data file (the bytes after its header page).
pub fn data_area(path: &Path) -> Result<Vec<u8>, String> {
    let mut b = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    if b.len() < REGION_HEADER_SIZE {
        return Err(format!("{} is shorter than a region header", path.display()));
    }
    b.drain(..REGION_HEADER_SIZE);
    Ok(b)
}

fn slot(image: &[u8], s: u32) -> Slot {
    let at = s as usize * RECORD as usize;
    match image.get(at..at + RECORD as usize) {
        Some(bytes) => decode(bytes, s),
        None => Slot::Corrupt,
    }
}

/// Acknowledged groups that are not in `image`. A group is there iff each of its slots holds
/// its record or a record of a later group (slots are only ever overwritten by later groups).
pub fn lost(acks: &[Ack], image: &[u8]) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for a in acks {
        let holds = |s: u32, partner: u32| match slot(image, s) {
            Slot::Valid { k, partner: p } => k > a.k || (k == a.k && p == partner),
            _ => false,
        };
        if !holds(a.a, a.b) || !holds(a.b, a.a) {
            out.push((
                a.k,
                format!(
                    "group k={} (epoch {} seq {}) in slots {} and {} is lost: they hold {:?} and {:?}",
                    a.k,
                    a.epoch,
                    a.seq,
                    a.a,
                    a.b,
                    slot(image, a.a),
                    slot(image, a.b)
                ),
            ));
        }
    }
    out
}

/// Groups seen only in part, and slots that hold no whole record.
pub fn torn(image: &[u8]) -> Vec<String> {
    let slots = (image.len() as u64 / RECORD) as u32;
    let mut out = BTreeMap::new();
    for s in 0..slots {
        match slot(image, s) {
            Slot::Empty => {}
            Slot::Corrupt => {
                out.insert((u64::MAX, s), format!("slot {s} holds no whole record"));
            }
            Slot::Valid { k, partner } => {
                let whole = match slot(image, partner) {
                    Slot::Valid { k: k2, partner: p2 } => k2 > k || (k2 == k && p2 == s),
                    _ => false,
                };
                if !whole {
                    out.entry((k, s.min(partner))).or_insert_with(|| {
                        format!(
                            "group k={k} is torn: slot {s} holds it, its partner slot {partner} holds {:?}",
                            slot(image, partner)
                        )
                    });
                }
            }
        }
    }
    out.into_values().collect()
}

/// Epochs in which more than one node acknowledged writes as primary, from the ack logs of
/// every worker (each tagged with its node).
pub fn dual_primary(logs: &[(char, Vec<Ack>)]) -> Vec<String> {
    let mut by_epoch: BTreeMap<u64, BTreeSet<char>> = BTreeMap::new();
    for (node, acks) in logs {
        for a in acks {
            by_epoch.entry(a.epoch).or_default().insert(*node);
        }
    }
    by_epoch
        .into_iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(e, nodes)| format!("epoch {e}: nodes {nodes:?} all acknowledged writes as primary"))
        .collect()
}

/// When the roles left an epoch: the next epoch's primary was in place at `after_us` (wall
/// clock, microseconds since 1970), or earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub after_us: u64,
    /// The next epoch's primary's node.
    pub to: char,
}

/// Acknowledgements of an epoch decided after the primary of that epoch had to stop (`moves`,
/// keyed by the epoch left). A primary holding a lease decides before its validity ends,
/// `margin_us` before the lease can expire and so before the roles can move: a group whose
/// successful sync began after `after_us - margin_us` was acknowledged too late (without a
/// lease the margin is 0).
///
/// A holder that saw its validity lapse revokes its lease at once, so the roles may move as
/// soon as it stopped, not a margin later: for the epochs in `let_go` (their primary said it
/// stopped for its lease) only a sync begun after the move is late.
///
/// With `by_return`, a group whose sync returned after `after_us` is reported too (sound only
/// where no worker is frozen between deciding and logging).
pub fn late_acks(
    logs: &[(char, Vec<Ack>)],
    moves: &BTreeMap<u64, Move>,
    margin_us: u64,
    let_go: &BTreeSet<u64>,
    by_return: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for (node, acks) in logs {
        for a in acks {
            let Some(m) = moves.get(&a.epoch) else { continue };
            let margin_us = if let_go.contains(&a.epoch) { 0 } else { margin_us };
            let deadline = m.after_us.saturating_sub(margin_us);
            let (when, what) = if a.start_us > deadline {
                (a.start_us, "began to sync")
            } else if by_return && a.done_us > m.after_us {
                (a.done_us, "returned from syncing")
            } else {
                continue;
            };
            out.push(format!(
                "epoch {}: node {node} acknowledged group k={} (seq {}), which it {what} {:.1} ms after it had \
                 to stop ({:.1} ms before node {} was primary at a later epoch)",
                a.epoch,
                a.k,
                a.seq,
                when.saturating_sub(deadline) as f64 / 1000.0,
                margin_us as f64 / 1000.0,
                m.to
            ));
        }
    }
    out
}

/// The first offset where two images differ, and how many bytes differ.
pub fn difference(a: &[u8], b: &[u8]) -> Option<(usize, usize)> {
    if a == b {
        return None;
    }
    let n = a.len().min(b.len());
    let first = (0..n).find(|&i| a[i] != b[i]).unwrap_or(n);
    let count = a.iter().zip(b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    Some((first, count))
}

#[cfg(test)]
mod tests {
    use super::super::workload::{encode, group_hash};
    use super::*;

    fn put(img: &mut [u8], k: u64, a: u32, b: u32) {
        img[a as usize * 64..][..64].copy_from_slice(&encode(k, a, b));
        img[b as usize * 64..][..64].copy_from_slice(&encode(k, b, a));
    }

    fn ack(k: u64, a: u32, b: u32) -> Ack {
        Ack { epoch: 2, seq: k, k, a, b, hash: group_hash(k, a, b), start_us: 0, done_us: 0 }
    }

    #[test]
    fn overwritten_groups_are_present_and_missing_ones_lost() {
        let mut img = vec![0u8; 64 * 16];
        put(&mut img, 1, 0, 1);
        put(&mut img, 2, 1, 2);
        put(&mut img, 3, 0, 2);
        assert!(lost(&[ack(1, 0, 1), ack(2, 1, 2), ack(3, 0, 2)], &img).is_empty());
        assert_eq!(lost(&[ack(4, 5, 6)], &img).len(), 1);
        assert!(torn(&img).is_empty(), "{:?}", torn(&img));
    }

    #[test]
    fn half_a_group_is_torn() {
        let mut img = vec![0u8; 64 * 16];
        put(&mut img, 1, 3, 4);
        img[5 * 64..6 * 64].copy_from_slice(&encode(2, 5, 3));
        let t = torn(&img);
        assert_eq!(t.len(), 1, "{t:?}");
        assert!(t[0].contains("k=2"), "{t:?}");
        img[7 * 64] = 1;
        assert_eq!(torn(&img).len(), 2);
        assert_eq!(lost(&[ack(2, 5, 3)], &img).len(), 1);
    }

    #[test]
    fn two_nodes_in_one_epoch_is_dual_primary() {
        let logs = vec![('a', vec![ack(1, 0, 1)]), ('b', vec![ack(2, 0, 1)])];
        assert_eq!(dual_primary(&logs).len(), 1);
        let mut later = ack(2, 0, 1);
        later.epoch = 3;
        assert!(dual_primary(&[('a', vec![ack(1, 0, 1)]), ('b', vec![later])]).is_empty());
    }

    #[test]
    fn acknowledgements_after_the_roles_moved_on_are_late() {
        let moves = BTreeMap::from([(2, Move { after_us: 1000, to: 'b' })]);
        let none = BTreeSet::new();
        let at = |start_us, done_us| Ack { start_us, done_us, ..ack(1, 0, 1) };
        let logs = vec![('a', vec![at(100, 200), at(950, 1100)])];
        assert!(late_acks(&logs, &moves, 0, &none, false).is_empty(), "it began before the move");
        assert_eq!(late_acks(&logs, &moves, 0, &none, true).len(), 1, "it returned after the move");
        let logs = vec![('a', vec![at(1001, 1002)])];
        assert_eq!(late_acks(&logs, &moves, 0, &none, false).len(), 1);
        let logs = vec![('a', vec![at(960, 970)])];
        assert!(late_acks(&logs, &moves, 0, &none, false).is_empty());
        assert_eq!(late_acks(&logs, &moves, 50, &none, false).len(), 1, "it began within the lease's margin");
        let let_go = BTreeSet::from([2]);
        assert!(
            late_acks(&logs, &moves, 50, &let_go, false).is_empty(),
            "a holder that let its lease go stopped before the roles could move"
        );
        let logs = vec![('a', vec![at(1001, 1002)])];
        assert_eq!(late_acks(&logs, &moves, 50, &let_go, false).len(), 1, "it began after the move");
        let mut later = at(5000, 5001);
        later.epoch = 3;
        assert!(late_acks(&[('b', vec![later])], &moves, 50, &none, true).is_empty(), "epoch 3 did not end");
    }
}
