//! kill -9 of the mirror while groups flow, then a restart from the same folder: the recovered
//! data area holds every acknowledged group, and every other group wholly or not at all; and
//! the next primary's session resends (log catch-up) every group the mirror lacks.
//!
//! Each group owns fresh ranges, never reused, 2 or 3 of them in separate zones of the region,
//! filled with a pattern of its own whose bytes are never zero. So a range in the recovered
//! image is either the group's pattern, or zero (never written), or wrong; and a group whose
//! ranges disagree was torn.

mod common;

use common::{assert_same_image, mirror_image, seed, wait_status, Cluster, Rng, WAIT};
use mojim::{Primary, Range, Ticket};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ZONES: u64 = 3;
const ZONE: u64 = 8 << 20;
const ROUNDS: usize = 3;
/// Groups a writer has sent but not yet waited for: several groups per lane are in flight.
const WINDOW: usize = 8;

/// Byte `j` of range `i` of group `g`: specific to all three, never zero.
fn pattern(g: u64, i: usize, j: u64) -> u8 {
    let v =
        (g.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64) << 56).wrapping_add(j.wrapping_mul(0x2545_f491));
    ((v ^ (v >> 29) ^ (v >> 47)) as u8) | 1
}

fn fill_pattern(g: u64, i: usize, out: &mut [u8]) {
    for (j, b) in out.iter_mut().enumerate() {
        *b = pattern(g, i, j as u64);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Sent (or being sent), not acknowledged: after a crash, whole or absent.
    Unknown,
    /// Acknowledged, or found whole after an earlier restart: must be whole forever.
    Durable,
    /// Found absent after an earlier restart. The primary's region holds it, so the next
    /// primary's session resends it (log catch-up): whole or absent, never torn.
    Absent,
}

struct Group {
    id: u64,
    ranges: Vec<Range>,
    fate: Fate,
    /// The round that sent it, for the report.
    round: usize,
}

/// Hands out fresh ranges: one cursor per zone, moving only forwards.
struct Allocator {
    cursors: [u64; ZONES as usize],
}

impl Allocator {
    fn take(&mut self, lens: &[u64]) -> Option<Vec<Range>> {
        let mut out = Vec::with_capacity(lens.len());
        for (z, &len) in lens.iter().enumerate() {
            let start = self.cursors[z];
            if start + len > (z as u64 + 1) * ZONE {
                return None;
            }
            out.push(Range::new(start, len));
        }
        for (z, r) in out.iter().enumerate() {
            // A gap of a few bytes between ranges: a write past a range's end shows as a stray.
            self.cursors[z] = r.offset + r.len + (r.offset % 7) + 1;
        }
        Some(out)
    }
}

/// 2 or 3 ranges; most are small, one in eight spans several 4 KiB frames.
fn group_lens(rng: &mut Rng) -> Vec<u64> {
    (0..rng.range(2, 3))
        .map(|_| if rng.chance(8) { rng.range(8 << 10, 20 << 10) } else { rng.range(1, 5000) })
        .collect()
}

struct Shared {
    groups: Mutex<Vec<Group>>,
    alloc: Mutex<Allocator>,
    acked: AtomicU64,
    stop: AtomicBool,
    out_of_space: AtomicBool,
}

/// Sends groups until the session fails (or `stop`), keeping up to `WINDOW` in flight, and
/// marks each one durable once its wait returns.
fn writer(p: &Primary, sh: &Shared, round: usize, mut rng: Rng) {
    let mut in_flight: VecDeque<(Ticket, usize)> = VecDeque::new();
    let mut buf = Vec::new();
    while !sh.stop.load(Ordering::SeqCst) {
        let lens = group_lens(&mut rng);
        let Some(ranges) = sh.alloc.lock().unwrap().take(&lens) else {
            sh.out_of_space.store(true, Ordering::SeqCst);
            break;
        };
        let index = {
            let mut gs = sh.groups.lock().unwrap();
            let id = gs.len() as u64;
            gs.push(Group { id, ranges: ranges.clone(), fate: Fate::Unknown, round });
            gs.len() - 1
        };
        for (i, r) in ranges.iter().enumerate() {
            buf.resize(r.len as usize, 0);
            fill_pattern(index as u64, i, &mut buf);
            p.write(r.offset, &buf).expect("write inside the region");
        }
        match p.persist(&ranges) {
            Ok(t) => in_flight.push_back((t, index)),
            Err(_) => break,
        }
        if in_flight.len() >= WINDOW {
            let (t, g) = in_flight.pop_front().expect("the window is not empty");
            if p.wait(t).is_err() {
                break;
            }
            sh.groups.lock().unwrap()[g].fate = Fate::Durable;
            sh.acked.fetch_add(1, Ordering::SeqCst);
        }
    }
    // Whatever is still in flight stays Unknown.
}

#[derive(Debug, PartialEq, Eq)]
enum Found {
    Whole,
    Absent,
    /// First offset (in the region) that is neither.
    Wrong(u64),
}

fn inspect(image: &[u8], g: &Group) -> Vec<Found> {
    g.ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let bytes = &image[r.offset as usize..(r.offset + r.len) as usize];
            if bytes.iter().enumerate().all(|(j, &b)| b == pattern(g.id, i, j as u64)) {
                Found::Whole
            } else if bytes.iter().all(|&b| b == 0) {
                Found::Absent
            } else {
                let j =
                    bytes.iter().enumerate().position(|(j, &b)| b != pattern(g.id, i, j as u64) && b != 0);
                // A mix of pattern and zero bytes: the first byte that disagrees with the first.
                let j = j.unwrap_or_else(|| {
                    let whole0 = bytes[0] != 0;
                    bytes.iter().position(|&b| (b != 0) != whole0).unwrap_or(0)
                });
                Found::Wrong(r.offset + j as u64)
            }
        })
        .collect()
}

/// Checks the recovered image against what was sent, settles every Unknown group, and
/// returns how many were found whole and absent.
fn verify(image: &[u8], groups: &mut [Group], seed: u64, round: usize) -> (usize, usize) {
    let mut expected = vec![0u8; image.len()];
    let (mut whole, mut absent) = (0, 0);
    for g in groups.iter_mut() {
        let found = inspect(image, g);
        let all_whole = found.iter().all(|f| *f == Found::Whole);
        let all_absent = found.iter().all(|f| *f == Found::Absent);
        let ok = match g.fate {
            Fate::Durable => all_whole,
            // Resent by the next session's catch-up, unless a kill cut that short.
            Fate::Absent => all_whole || all_absent,
            Fate::Unknown => all_whole || all_absent,
        };
        assert!(
            ok,
            "seed {seed}, after restart {round}: group {} (sent in round {}, {:?}) with ranges {:?} \
             was found {:?}: {}",
            g.id,
            g.round,
            g.fate,
            g.ranges,
            found,
            match g.fate {
                Fate::Durable => "an acknowledged group is not whole",
                Fate::Absent => "a resent group is torn",
                Fate::Unknown => "an unacknowledged group is torn",
            }
        );
        if all_whole {
            whole += 1;
            g.fate = Fate::Durable;
            for (i, r) in g.ranges.iter().enumerate() {
                fill_pattern(g.id, i, &mut expected[r.offset as usize..(r.offset + r.len) as usize]);
            }
        } else {
            absent += 1;
            g.fate = Fate::Absent;
        }
    }
    // Nothing else changed: no stray bytes between or beyond the groups' ranges.
    assert_same_image(
        &format!("seed {seed}, after restart {round}: recovered image vs groups"),
        &expected,
        image,
    );
    (whole, absent)
}

#[test]
fn kill_9_mid_stream_loses_no_acknowledged_group_and_tears_none() {
    let seed = seed("kill_9_mid_stream");
    let mut rng = Rng::new(seed);
    let lanes = rng.range(1, 4) as u16;
    let writers = rng.range(2, 3);
    println!("{lanes} lanes, {writers} writers, {WINDOW} groups in flight per writer");
    let mut c = Cluster::new("kill9", ZONES * ZONE, |f| {
        f.primary.mode = "sync".into();
        f.primary.lanes = lanes;
        // Groups of several frames, and logs that wrap during the test.
        f.limits.max_frame = "4KiB".into();
        f.mirror.log_capacity = "512KiB".into();
    });
    let size = c.size();
    let sh = Shared {
        groups: Mutex::new(Vec::new()),
        alloc: Mutex::new(Allocator { cursors: std::array::from_fn(|z| z as u64 * ZONE) }),
        acked: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        out_of_space: AtomicBool::new(false),
    };
    c.start_mirror();
    for round in 1..=ROUNDS {
        let p = Primary::open(&c.primary_options()).expect("open the primary");
        // The catch-up of what the mirror lost finishes before the next kill (a copy cut short
        // leaves the mirror marked inconsistent, for a full copy, instead).
        if let Some(r) = p.wait_resync(WAIT) {
            assert!(r.done, "seed {seed}, round {round}: the catch-up did not finish: {r:?}");
        }
        let acked_before = sh.acked.load(Ordering::SeqCst);
        let kill_after = rng.range(30, 200);
        sh.stop.store(false, Ordering::SeqCst);
        std::thread::scope(|s| {
            for w in 0..writers {
                let (p, sh) = (&p, &sh);
                let r = Rng::new(rng.next_u64() ^ w);
                s.spawn(move || writer(p, sh, round, r));
            }
            let t0 = Instant::now();
            while sh.acked.load(Ordering::SeqCst) < acked_before + kill_after {
                if t0.elapsed() > WAIT || sh.out_of_space.load(Ordering::SeqCst) {
                    sh.stop.store(true, Ordering::SeqCst);
                    panic!(
                        "seed {seed}, round {round}: only {} groups acknowledged in {:?} (out of space: {})",
                        sh.acked.load(Ordering::SeqCst) - acked_before,
                        t0.elapsed(),
                        sh.out_of_space.load(Ordering::SeqCst)
                    );
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            c.kill_mirror();
            // Writers end when their calls fail. A writer blocked forever in `wait` would hang
            // the scope, so a primary that never notices the death ends the test binary.
            let t1 = Instant::now();
            while p.status().failed.is_none() {
                if t1.elapsed() > WAIT {
                    eprintln!("seed {seed}, round {round}: the primary did not notice the mirror's death");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            sh.stop.store(true, Ordering::SeqCst);
        });
        drop(p);

        c.start_mirror();
        if round % 2 == 0 {
            // Recovery must be idempotent: die again right after recovering, and recover again.
            c.kill_mirror();
            c.start_mirror();
        }
        let mut admin = c.admin();
        let st = wait_status(&mut admin, "the recovered mirror to be idle", |st| st.lag_groups == 0);
        let image = mirror_image(&mut admin, size);
        let mut groups = sh.groups.lock().unwrap();
        let sent_this_round = groups.iter().filter(|g| g.round == round).count();
        let unknown = groups.iter().filter(|g| g.fate == Fate::Unknown).count();
        let (whole, absent) = verify(&image, &mut groups, seed, round);
        println!(
            "round {round}: killed after {kill_after} acks; {sent_this_round} groups sent, {unknown} unacknowledged; \
             {whole} whole and {absent} absent after recovery ({} groups applied, {} discarded by recovery)",
            st.recovery.groups_applied, st.recovery.groups_discarded
        );
        assert_eq!(st.violations, 0, "seed {seed}, round {round}: {st:?}");
    }
}
