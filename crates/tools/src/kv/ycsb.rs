//! The workloads of `mojim bench --kv`: plain SET and GET, and the YCSB core workloads A–F as
//! YCSB's `workloads/workload[a-f]` files define them (Cooper et al., SoCC '10):
//!
//! | workload | read | update | insert | scan | read-modify-write | keys |
//! |---|---:|---:|---:|---:|---:|---|
//! | `set` | | 100 % | | | | uniform |
//! | `get` | 100 % | | | | | uniform |
//! | `ycsb-a` (update heavy) | 50 % | 50 % | | | | zipfian |
//! | `ycsb-b` (read mostly) | 95 % | 5 % | | | | zipfian |
//! | `ycsb-c` (read only) | 100 % | | | | | zipfian |
//! | `ycsb-d` (read latest) | 95 % | | 5 % | | | latest |
//! | `ycsb-e` (short ranges) | | | 5 % | 95 % | | zipfian |
//! | `ycsb-f` (read-modify-write) | 50 % | | | | 50 % | zipfian |
//!
//! A record is one string value of `--sizes` bytes under the key `user<fnv64(n)>` (YCSB's
//! hashed key names; YCSB's ten 100-byte fields become one field, so that SET, GET and the YCSB
//! operations move the same value sizes). On the wire:
//!
//! - read: `GET key`; update and insert: `SET key value`; read-modify-write: `GET key`, then,
//!   once its reply is in, `SET key value` (one operation, timed from the GET's send to the
//!   SET's reply);
//! - scan: YCSB scans `len` records in key order from a chosen one, `len` uniform in 1..=100.
//!   Redis has no ordered scan over strings, and `SCAN`'s cursor cannot start at a key, so a
//!   scan is `MGET` of the keys numbered `start .. start + len` (capped at the keys inserted):
//!   the same records a YCSB scan in insertion order returns, in one round trip;
//! - with `WAIT 1 0` on (target `redis-wait1`), every SET is followed by `WAIT 1 0` on the same
//!   connection, and the write is done when WAIT answers.
//!
//! Inserts take the next key number; reads choose only keys whose insert was acknowledged
//! (YCSB's `AcknowledgedCounterGenerator`).
//!
//! The workloads on lists, sets and sorted sets (`lpush-rpop`, `zadd`, `zrange`, `sadd`,
//! `sismember`) are values of the same [`Workload`] flag; their operations are in
//! [`super::collections`].

use super::keys::{Distribution, KeyChooser, Rng};

/// Longest scan (YCSB's `maxscanlength`).
pub const MAX_SCAN_LENGTH: u64 = 100;

/// What `mojim bench --kv` can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Workload {
    /// SET of a uniformly chosen loaded key.
    Set,
    /// GET of a uniformly chosen loaded key.
    Get,
    /// YCSB A: 50 % reads, 50 % updates, zipfian.
    YcsbA,
    /// YCSB B: 95 % reads, 5 % updates, zipfian.
    YcsbB,
    /// YCSB C: reads only, zipfian.
    YcsbC,
    /// YCSB D: 95 % reads, 5 % inserts, latest.
    YcsbD,
    /// YCSB E: 95 % scans, 5 % inserts, zipfian.
    YcsbE,
    /// YCSB F: 50 % reads, 50 % read-modify-writes, zipfian.
    YcsbF,
    /// A job queue: LPUSH of a --sizes value onto one of 4 queues, then, as the connection's
    /// next operation, RPOP of that queue; the LPUSH and the RPOP count as two operations.
    LpushRpop,
    /// ZADD of a random member, with a random score, to a sorted set of --members members.
    Zadd,
    /// ZRANGE of 10 members from a random rank, WITHSCORES, on that sorted set.
    Zrange,
    /// SADD of a new member to a set of --members members (removed after the run).
    Sadd,
    /// SISMEMBER of a random member of that set.
    Sismember,
}

/// The workloads on strings (`--workloads`' default), in the order they run.
pub const STRING_WORKLOADS: [Workload; 8] = [
    Workload::Set,
    Workload::Get,
    Workload::YcsbA,
    Workload::YcsbB,
    Workload::YcsbC,
    Workload::YcsbD,
    Workload::YcsbE,
    Workload::YcsbF,
];

/// The workloads on lists, sets and sorted sets.
pub const COLLECTION_WORKLOADS: [Workload; 5] =
    [Workload::LpushRpop, Workload::Zadd, Workload::Zrange, Workload::Sadd, Workload::Sismember];

/// One operation of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// GET.
    Read,
    /// SET of an existing key.
    Update,
    /// SET of a new key.
    Insert,
    /// MGET of a run of keys.
    Scan,
    /// GET, then SET of the same key.
    ReadModifyWrite,
}

/// The proportions of a workload's operations and how it chooses keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    /// Fractions of read, update, insert, scan and read-modify-write, summing to 1.
    pub proportions: [(OpKind, f64); 5],
    /// YCSB's `requestdistribution`.
    pub keys: Distribution,
}

impl Workload {
    /// The name used in flags and in the results.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Set => "set",
            Workload::Get => "get",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
            Workload::YcsbD => "ycsb-d",
            Workload::YcsbE => "ycsb-e",
            Workload::YcsbF => "ycsb-f",
            Workload::LpushRpop => "lpush-rpop",
            Workload::Zadd => "zadd",
            Workload::Zrange => "zrange",
            Workload::Sadd => "sadd",
            Workload::Sismember => "sismember",
        }
    }

    /// Whether this is one of the workloads on string records (set, get, YCSB).
    pub fn on_strings(self) -> bool {
        self.mix().is_some()
    }

    /// Whether the workload's runs depend on --sizes (the string workloads and lpush-rpop); the
    /// others run once, with members of [`super::collections::MEMBER_BYTES`] bytes.
    pub fn sized(self) -> bool {
        self.on_strings() || self == Workload::LpushRpop
    }

    /// The workload's mix (see the table in this module's documentation); `None` for the
    /// workloads on collections.
    pub fn mix(self) -> Option<Mix> {
        use Distribution::{Latest, Uniform, Zipfian};
        let (r, u, i, s, m, keys) = match self {
            Workload::Set => (0.0, 1.0, 0.0, 0.0, 0.0, Uniform),
            Workload::Get => (1.0, 0.0, 0.0, 0.0, 0.0, Uniform),
            Workload::YcsbA => (0.5, 0.5, 0.0, 0.0, 0.0, Zipfian),
            Workload::YcsbB => (0.95, 0.05, 0.0, 0.0, 0.0, Zipfian),
            Workload::YcsbC => (1.0, 0.0, 0.0, 0.0, 0.0, Zipfian),
            Workload::YcsbD => (0.95, 0.0, 0.05, 0.0, 0.0, Latest),
            Workload::YcsbE => (0.0, 0.0, 0.05, 0.95, 0.0, Zipfian),
            Workload::YcsbF => (0.5, 0.0, 0.0, 0.0, 0.5, Zipfian),
            Workload::LpushRpop
            | Workload::Zadd
            | Workload::Zrange
            | Workload::Sadd
            | Workload::Sismember => return None,
        };
        Some(Mix {
            proportions: [
                (OpKind::Read, r),
                (OpKind::Update, u),
                (OpKind::Insert, i),
                (OpKind::Scan, s),
                (OpKind::ReadModifyWrite, m),
            ],
            keys,
        })
    }

    /// Whether the workload adds string keys (which are deleted after its run).
    pub fn inserts(self) -> bool {
        self.mix().is_some_and(|m| m.proportions[2].1 > 0.0)
    }
}

impl Mix {
    /// One operation, chosen by the proportions (YCSB's `DiscreteGenerator`).
    pub fn choose(&self, rng: &mut Rng) -> OpKind {
        let mut u = super::keys::unit(rng);
        for &(op, p) in &self.proportions {
            if u < p {
                return op;
            }
            u -= p;
        }
        // Rounding left a sliver: the last operation with a share.
        self.proportions.iter().rev().find(|x| x.1 > 0.0).map_or(OpKind::Read, |x| x.0)
    }
}

/// The operations of one run: which operation, on which key, with the insert counter and the
/// acknowledged-key limit shared by all of the run's clients.
pub struct OpSource {
    mix: Mix,
    chooser: KeyChooser,
    rng: Rng,
    /// Keys 0..acked are inserted and acknowledged.
    acked: u64,
    /// The next key number an insert takes.
    next_insert: u64,
    /// Inserts acknowledged beyond `acked` (out of order).
    acked_beyond: std::collections::BTreeSet<u64>,
    /// Keys loaded before the run.
    records: u64,
}

/// One operation to issue: what, on which key, and how many keys (scans).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The operation.
    pub kind: OpKind,
    /// Its key number (the first one, for a scan).
    pub key: u64,
    /// Keys read: the scan length, else 1.
    pub len: u64,
}

impl OpSource {
    /// Operations of `w`, a workload on strings, over `records` loaded keys, for a run of `ops`
    /// operations.
    pub fn new(w: Workload, records: u64, ops: u64, seed: u64) -> OpSource {
        let mix = w.mix().expect("OpSource runs the workloads on strings only");
        let expected_inserts = (2.0 * ops as f64 * mix.proportions[2].1) as u64;
        OpSource {
            mix,
            chooser: KeyChooser::new(mix.keys, records, expected_inserts),
            rng: Rng(seed | 1),
            acked: records.max(1),
            next_insert: records.max(1),
            acked_beyond: Default::default(),
            records: records.max(1),
        }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        let kind = self.mix.choose(&mut self.rng);
        if kind == OpKind::Insert {
            let key = self.next_insert;
            self.next_insert += 1;
            return Op { kind, key, len: 1 };
        }
        let key = self.chooser.next(self.acked, &mut self.rng);
        let len = if kind == OpKind::Scan {
            (1 + self.rng.next() % MAX_SCAN_LENGTH).min(self.acked - key)
        } else {
            1
        };
        Op { kind, key, len }
    }

    /// Records that the insert of `key` was acknowledged: reads may choose it once every
    /// earlier insert was too.
    pub fn acknowledge_insert(&mut self, key: u64) {
        self.acked_beyond.insert(key);
        while self.acked_beyond.remove(&self.acked) {
            self.acked += 1;
        }
    }

    /// Key numbers taken by inserts so far (they follow the loaded records).
    pub fn inserted(&self) -> std::ops::Range<u64> {
        self.records..self.next_insert
    }

    /// A uniform draw for the caller (value offsets).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn every_mix_sums_to_one() {
        for w in STRING_WORKLOADS {
            let sum: f64 = w.mix().expect("a string workload").proportions.iter().map(|x| x.1).sum();
            assert!((sum - 1.0).abs() < 1e-12, "{}: {sum}", w.name());
        }
    }

    #[test]
    fn operations_follow_the_mix_within_one_percent() {
        for w in COLLECTION_WORKLOADS {
            assert!(w.mix().is_none() && !w.inserts(), "{}", w.name());
        }
        for w in STRING_WORKLOADS {
            let n = 100_000u64;
            let mut src = OpSource::new(w, 1000, n, 42);
            let mut seen: HashMap<OpKind, u64> = HashMap::new();
            for _ in 0..n {
                let op = src.next_op();
                *seen.entry(op.kind).or_default() += 1;
                if op.kind == OpKind::Insert {
                    src.acknowledge_insert(op.key);
                }
            }
            for (kind, p) in w.mix().expect("a string workload").proportions {
                let got = *seen.get(&kind).unwrap_or(&0) as f64 / n as f64;
                assert!((got - p).abs() < 0.01, "{}: {kind:?} drawn {got:.4}, expected {p}", w.name());
            }
        }
    }

    #[test]
    fn scans_are_one_to_a_hundred_keys_inside_the_inserted_ones() {
        let mut src = OpSource::new(Workload::YcsbE, 1000, 10_000, 9);
        let mut lens = Vec::new();
        for _ in 0..20_000 {
            let op = src.next_op();
            match op.kind {
                OpKind::Scan => {
                    assert!((1..=MAX_SCAN_LENGTH).contains(&op.len), "{op:?}");
                    assert!(op.key + op.len <= src.acked, "{op:?} beyond {} keys", src.acked);
                    lens.push(op.len);
                }
                OpKind::Insert => src.acknowledge_insert(op.key),
                other => panic!("ycsb-e issued {other:?}"),
            }
        }
        let mean = lens.iter().sum::<u64>() as f64 / lens.len() as f64;
        // Uniform in 1..=100, less the scans cut short at the last key.
        assert!((45.0..=51.0).contains(&mean), "mean scan length {mean}");
    }

    #[test]
    fn reads_choose_only_acknowledged_inserts() {
        let mut src = OpSource::new(Workload::YcsbD, 10, 1000, 5);
        let mut pending = Vec::new();
        for _ in 0..5000 {
            let op = src.next_op();
            match op.kind {
                OpKind::Insert => pending.push(op.key),
                _ => assert!(op.key < src.acked, "{op:?} chose an unacknowledged key"),
            }
            // Acknowledge out of order, every few operations.
            if pending.len() > 3 {
                let k = pending.swap_remove(1);
                src.acknowledge_insert(k);
            }
        }
        for k in pending {
            src.acknowledge_insert(k);
        }
        assert_eq!(src.acked, src.next_insert, "every insert acknowledged");
        assert!(src.next_insert > 10 + 150, "about 5 % of 5000 operations inserted");
    }

    #[test]
    fn read_latest_reads_mostly_recent_inserts() {
        let mut src = OpSource::new(Workload::YcsbD, 10_000, 100_000, 8);
        let mut recent = 0;
        let mut reads = 0;
        for _ in 0..100_000 {
            let op = src.next_op();
            if op.kind == OpKind::Insert {
                src.acknowledge_insert(op.key);
            } else {
                reads += 1;
                recent += u64::from(op.key + 1000 >= src.acked);
            }
        }
        let share = recent as f64 / reads as f64;
        assert!(share > 0.6, "only {share:.3} of reads within the newest 1000 keys");
    }
}
