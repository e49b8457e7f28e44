//! The application of a chaos trial: a self-checking workload on the primary's node.
//!
//! Group `k` writes two 64-byte records into two slots of the region and syncs both with one
//! `gmsync`. A record names its group, its own slot and its partner slot, carries a payload
//! derived from `k` and ends with a CRC32C, so a copy of the region checks itself: a record is
//! valid or not, and a group is whole iff its partner slot holds a record of the same group or
//! of a later one (slots are overwritten only by later groups). After each acknowledged group
//! the worker appends `epoch seq k slotA slotB hash start_us done_us` to its ack log: the two
//! times (wall clock, microseconds since 1970) enclose the moment the primary decided to
//! acknowledge the group, from the start of the sync attempt that succeeded to its return.
//!
//! Before writing a group the worker records its intent (`k slotA slotB`) in a small file
//! beside the region, outside it: a worker restarted on the same copy (`--redo`) finishes the
//! group a killed worker may have left half written in its own memory, as an application with
//! a redo journal would. Replicas never see a half-written group; only the primary's own copy
//! can hold one, and only after its application died.

use mojim::config::Config;
use mojim::error::{Error, Result};
use mojim::primary::{Primary, PrimaryOptions};
use mojim::Range;
use mojim_format::checksum::crc32c;
use mojim_format::handshake::RefuseCode;
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes per record (and per slot).
pub const RECORD: u64 = 64;
const PAYLOAD: std::ops::Range<usize> = 16..60;

/// What a slot of a copy holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Never written (all zero).
    Empty,
    /// A record of group `k` whose other record is in `partner`.
    Valid { k: u64, partner: u32 },
    /// Bytes that are not a whole, valid record of this slot.
    Corrupt,
}

/// The record group `k` writes into `slot`.
pub fn encode(k: u64, slot: u32, partner: u32) -> [u8; RECORD as usize] {
    let mut r = [0u8; RECORD as usize];
    r[0..8].copy_from_slice(&k.to_le_bytes());
    r[8..12].copy_from_slice(&slot.to_le_bytes());
    r[12..16].copy_from_slice(&partner.to_le_bytes());
    let mut x = k ^ (u64::from(slot) << 40);
    for chunk in r[PAYLOAD].chunks_mut(8) {
        x = super::mix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    let crc = crc32c(&r[..60]);
    r[60..64].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Reads slot `slot` of a copy from its 64 bytes.
pub fn decode(bytes: &[u8], slot: u32) -> Slot {
    assert_eq!(bytes.len(), RECORD as usize);
    if bytes.iter().all(|&b| b == 0) {
        return Slot::Empty;
    }
    let k = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let own = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let partner = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    if k == 0 || own != slot || partner == slot || encode(k, slot, partner)[..] != bytes[..] {
        return Slot::Corrupt;
    }
    Slot::Valid { k, partner }
}

/// The `hash` column of an ack line: the group's two records without their CRCs (a CRC over
/// messages that each end with their own CRC is the same for all of them).
pub fn group_hash(k: u64, a: u32, b: u32) -> u32 {
    let mut both = [0u8; 2 * 60];
    both[..60].copy_from_slice(&encode(k, a, b)[..60]);
    both[60..].copy_from_slice(&encode(k, b, a)[..60]);
    crc32c(&both)
}

/// One line of an ack log: group `k` in slots `a` and `b` was acknowledged as `seq` at `epoch`,
/// the decision falling between `start_us` and `done_us` (0 when the line does not say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    pub epoch: u64,
    pub seq: u64,
    pub k: u64,
    pub a: u32,
    pub b: u32,
    pub hash: u32,
    pub start_us: u64,
    pub done_us: u64,
}

impl Ack {
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {:08x} {} {}\n",
            self.epoch, self.seq, self.k, self.a, self.b, self.hash, self.start_us, self.done_us
        )
    }

    fn parse(line: &str) -> Option<Ack> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 6 && f.len() != 8 {
            return None;
        }
        let time = |i: usize| f.get(i).map_or(Some(0), |t| t.parse().ok());
        Some(Ack {
            epoch: f[0].parse().ok()?,
            seq: f[1].parse().ok()?,
            k: f[2].parse().ok()?,
            a: f[3].parse().ok()?,
            b: f[4].parse().ok()?,
            hash: u32::from_str_radix(f[5], 16).ok()?,
            start_us: time(6)?,
            done_us: time(7)?,
        })
    }
}

/// Microseconds since 1970 by the wall clock, which the harness and every node's worker share
/// (network namespaces do not have clocks of their own).
pub fn wall_us() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_micros() as u64
}

/// Reads an ack log. A worker killed while appending leaves at most a partial last line,
/// which is ignored; any other bad line is an error.
pub fn read_acks(path: &Path) -> std::result::Result<Vec<Ack>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("read {}: {e}", path.display())),
    };
    let complete = text.rfind('\n').map_or("", |at| &text[..at]);
    let mut out = Vec::new();
    for (i, line) in complete.lines().enumerate() {
        let ack = Ack::parse(line).ok_or_else(|| format!("{} line {}: {line:?}", path.display(), i + 1))?;
        if ack.hash != group_hash(ack.k, ack.a, ack.b) {
            return Err(format!(
                "{} line {}: hash does not match the group: {line:?}",
                path.display(),
                i + 1
            ));
        }
        out.push(ack);
    }
    Ok(out)
}

const INTENT_LEN: usize = 20;

/// The group a worker was about to write: `(k, a, b)`, if the file holds a whole one.
pub fn read_intent(path: &Path) -> Option<(u64, u32, u32)> {
    let b = std::fs::read(path).ok()?;
    if b.len() < INTENT_LEN {
        return None;
    }
    let crc = u32::from_le_bytes(b[16..20].try_into().ok()?);
    if crc != crc32c(&b[..16]) {
        return None;
    }
    let k = u64::from_le_bytes(b[0..8].try_into().ok()?);
    let a = u32::from_le_bytes(b[8..12].try_into().ok()?);
    let bb = u32::from_le_bytes(b[12..16].try_into().ok()?);
    (k != 0).then_some((k, a, bb))
}

fn intent_bytes(k: u64, a: u32, b: u32) -> [u8; INTENT_LEN] {
    let mut out = [0u8; INTENT_LEN];
    out[0..8].copy_from_slice(&k.to_le_bytes());
    out[8..12].copy_from_slice(&a.to_le_bytes());
    out[12..16].copy_from_slice(&b.to_le_bytes());
    let crc = crc32c(&out[..16]);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Options of the hidden `mojim chaos-worker` (started by `mojim chaos`).
#[derive(clap::Args, Clone, Debug)]
pub struct WorkerArgs {
    /// The node's configuration; [region] path is the node's data area.
    #[arg(long)]
    pub config: PathBuf,
    /// The current mirror's address.
    #[arg(long)]
    pub mirror: String,
    /// Where to append a line per acknowledged group.
    #[arg(long)]
    pub ack_log: PathBuf,
    /// The intent file (see the module documentation).
    #[arg(long)]
    pub intent: PathBuf,
    /// The first group number to use (the worker also starts after every group in its copy).
    #[arg(long, default_value_t = 1)]
    pub start_k: u64,
    /// Seed of the slot choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Finish the group of the intent file first (a restart on the same copy).
    #[arg(long)]
    pub redo: bool,
    /// Give up when the mirror stays lost for longer than this.
    #[arg(long, default_value_t = 3000)]
    pub lost_bound_ms: u64,
}

/// Why the worker stopped before it was asked to.
#[derive(Debug)]
enum Stop {
    Fenced(String),
    Lost(String),
    Failed(Error),
}

/// Runs the workload until stdin closes (then drains and exits 0), the primary is fenced, or
/// the mirror is lost for too long (then exits non-zero, saying why).
pub fn worker(a: &WorkerArgs) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    let mut opts = PrimaryOptions::from_config(&cfg, false)?;
    opts.mirror = a.mirror.clone();
    let bound = Duration::from_millis(a.lost_bound_ms);
    let p = match open(&opts, bound) {
        Ok(p) => p,
        Err(Stop::Fenced(why)) => return finish(0, &format!("fenced {why}")),
        Err(Stop::Lost(why)) => return finish(0, &format!("lost {why}")),
        Err(Stop::Failed(e)) => return finish(0, &format!("error {e}")),
    };
    let epoch = p.status().epoch;
    let slots = u32::try_from(p.size() / RECORD).unwrap_or(u32::MAX);
    if slots < 2 {
        return Err(Error::Config(format!("a region of {} bytes holds fewer than 2 records", p.size())));
    }
    let mut image = vec![0u8; (u64::from(slots) * RECORD) as usize];
    p.read(0, &mut image)?;
    let newest = (0..slots)
        .filter_map(|s| match decode(&image[(s as usize) * 64..(s as usize + 1) * 64], s) {
            Slot::Valid { k, .. } => Some(k),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    drop(image);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.ack_log)
        .map_err(Error::io(format!("open {}", a.ack_log.display())))?;
    let pending = if a.redo { read_intent(&a.intent).filter(|i| i.0 >= newest) } else { None };
    let intent = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(!a.redo)
        .open(&a.intent)
        .map_err(Error::io(format!("open {}", a.intent.display())))?;
    let mut w =
        Workload { p: &p, log, intent, epoch, bound, stop: Arc::new(AtomicBool::new(false)), acked: 0 };
    let mut k = a.start_k.max(newest + 1);
    if let Some((pk, _, _)) = pending {
        k = k.max(pk + 1);
    }
    println!("running epoch={epoch} k={k} mirror={}", p.status().mirror);
    let _ = std::io::stdout().flush();
    let stop = w.stop.clone();
    std::thread::Builder::new()
        .name("chaos-stdin".into())
        .spawn(move || {
            // The harness closes our stdin to stop us.
            let _ = std::io::stdin().lock().read_to_end(&mut Vec::new());
            stop.store(true, Ordering::SeqCst);
        })
        .map_err(Error::io("spawn the stdin thread"))?;
    let mut rng = super::Rng::new(a.seed);
    let mut result = match pending {
        Some((pk, pa, pb)) => w.group(pk, pa, pb),
        None => Ok(()),
    };
    while result.is_ok() && !w.stop.load(Ordering::SeqCst) {
        let x = rng.below(u64::from(slots)) as u32;
        let mut y = rng.below(u64::from(slots) - 1) as u32;
        if y >= x {
            y += 1;
        }
        result = w.group(k, x, y);
        k += 1;
    }
    let acked = w.acked;
    drop(w);
    match result {
        Ok(()) => {
            // Let a resynchronisation in progress finish, so the mirror ends consistent.
            let resync = p.wait_resync(Duration::from_secs(10));
            let closed = p.close();
            let resync = resync.map_or("none".to_string(), |r| {
                format!("{}{}", r.kind.name(), if r.done { "" } else { "-unfinished" })
            });
            match closed {
                Ok(()) => finish(acked, &format!("stopped resync={resync}")),
                Err(e) => finish(acked, &format!("lost while closing: {e}")),
            }
        }
        Err(Stop::Fenced(why)) => finish(acked, &format!("fenced {why}")),
        Err(Stop::Lost(why)) => finish(acked, &format!("lost {why}")),
        Err(Stop::Failed(e)) => finish(acked, &format!("error {e}")),
    }
}

/// Prints the worker's last line (`exit REASON groups=N`); a stop that was not asked for is an
/// error exit.
fn finish(acked: u64, reason: &str) -> Result<()> {
    println!("exit {reason} groups={acked}");
    let _ = std::io::stdout().flush();
    if reason.starts_with("stopped") {
        Ok(())
    } else {
        Err(Error::MirrorLost { reason: format!("chaos worker: {reason}") })
    }
}

/// Whether an error means another node was promoted, or (etcd coordinator) this primary's lease
/// may have expired so that another node may be promoted: it never acknowledges again.
fn fenced(e: &Error) -> bool {
    matches!(e, Error::Fenced { .. } | Error::Refused { code: RefuseCode::Epoch, .. } | Error::Coordinator(_))
}

fn open(opts: &PrimaryOptions, bound: Duration) -> std::result::Result<Primary, Stop> {
    let t0 = Instant::now();
    loop {
        match Primary::open(opts) {
            Ok(p) => return Ok(p),
            // The roles in etcd name another node: the coordinator moved on without this one.
            Err(Error::Coordinator(m)) if m.contains("is not the primary") => {
                return Err(Stop::Fenced(format!("coordinator: {m}")))
            }
            Err(e) if fenced(&e) && !matches!(e, Error::Coordinator(_)) => {
                return Err(Stop::Fenced(e.to_string()))
            }
            // etcd unreachable, the roles changed while taking the lease, a previous lease held.
            Err(
                e @ (Error::Io { .. }
                | Error::MirrorLost { .. }
                | Error::Refused { .. }
                | Error::Coordinator(_)),
            ) => {
                if t0.elapsed() > bound {
                    return Err(Stop::Lost(format!("could not open for {bound:?}: {e}")));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Stop::Failed(e)),
        }
    }
}

struct Workload<'a> {
    p: &'a Primary,
    log: std::fs::File,
    intent: std::fs::File,
    epoch: u64,
    bound: Duration,
    stop: Arc<AtomicBool>,
    acked: u64,
}

impl Workload<'_> {
    /// Writes group `k` into slots `a` and `b`, syncs it (retrying while the mirror is lost)
    /// and logs the acknowledgement.
    fn group(&mut self, k: u64, a: u32, b: u32) -> std::result::Result<(), Stop> {
        let io = |what: &str| {
            let what = what.to_string();
            move |e: std::io::Error| Stop::Failed(Error::Io { op: what, source: e })
        };
        self.intent.write_all_at(&intent_bytes(k, a, b), 0).map_err(io("write the intent"))?;
        let (ra, rb) = (encode(k, a, b), encode(k, b, a));
        let (oa, ob) = (u64::from(a) * RECORD, u64::from(b) * RECORD);
        self.p.write(oa, &ra).map_err(Stop::Failed)?;
        self.p.write(ob, &rb).map_err(Stop::Failed)?;
        let ranges = [Range::new(oa, RECORD), Range::new(ob, RECORD)];
        let mut lost_since: Option<Instant> = None;
        let (seq, start_us) = loop {
            let start_us = wall_us();
            let r = self.p.persist(&ranges).and_then(|t| self.p.wait(t).map(|()| t.seq()));
            match r {
                Ok(seq) => break (seq, start_us),
                Err(e) if fenced(&e) => return Err(Stop::Fenced(e.to_string())),
                Err(Error::MirrorLost { reason }) => {
                    let st = self.p.status();
                    let refused = |m: &&String| m.contains("fenced") || m.contains("(Epoch)");
                    if let Some(re) = st.reconnect_error.as_ref().filter(refused) {
                        return Err(Stop::Fenced(format!("reconnecting: {re}")));
                    }
                    // Asked to stop or not, the group is retried until the mirror is back.
                    let since = *lost_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > self.bound {
                        return Err(Stop::Lost(format!(
                            "mirror lost for more than {:?}: {reason}; last reconnect error: {}",
                            self.bound,
                            st.reconnect_error.unwrap_or_default()
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(Stop::Failed(e)),
            }
        };
        let done_us = wall_us();
        let ack = Ack { epoch: self.epoch, seq, k, a, b, hash: group_hash(k, a, b), start_us, done_us };
        // One write per line: a kill loses at most the line being written.
        self.log.write_all(ack.line().as_bytes()).map_err(io("append to the ack log"))?;
        self.acked += 1;
        Ok(())
    }
}

/// Reads the lines a child prints, handing each to `on_line`, until it closes its stdout.
pub(crate) fn pump_lines(out: impl Read + Send + 'static, mut on_line: impl FnMut(String) + Send + 'static) {
    std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(out);
        let mut line = String::new();
        while r.read_line(&mut line).is_ok_and(|n| n > 0) {
            on_line(line.trim_end().to_string());
            line.clear();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_check_themselves() {
        let r = encode(7, 3, 9);
        assert_eq!(decode(&r, 3), Slot::Valid { k: 7, partner: 9 });
        assert_eq!(decode(&r, 4), Slot::Corrupt, "a record is valid only in its own slot");
        assert_eq!(decode(&[0u8; 64], 3), Slot::Empty);
        for i in 0..64 {
            let mut bad = r;
            bad[i] ^= 1;
            assert_eq!(decode(&bad, 3), Slot::Corrupt, "a flipped bit at {i}");
        }
        let mut half = [0u8; 64];
        half[..32].copy_from_slice(&r[..32]);
        assert_eq!(decode(&half, 3), Slot::Corrupt);
    }

    #[test]
    fn ack_lines_round_trip_and_a_partial_last_line_is_ignored() {
        let a =
            Ack { epoch: 2, seq: 10, k: 5, a: 1, b: 2, hash: group_hash(5, 1, 2), start_us: 7, done_us: 9 };
        assert_eq!(Ack::parse(a.line().trim_end()), Some(a));
        let untimed = Ack { start_us: 0, done_us: 0, ..a };
        assert_ne!(group_hash(5, 1, 2), group_hash(6, 1, 2), "the hash tells groups apart");
        assert_eq!(Ack::parse(&format!("2 10 5 1 2 {:08x}", a.hash)), Some(untimed));
        let dir = std::env::temp_dir().join(format!("mojim-chaos-ack-{}", std::process::id()));
        let text = format!("{}{}", a.line(), &a.line()[..7]);
        std::fs::write(&dir, text).unwrap();
        assert_eq!(read_acks(&dir).unwrap(), vec![a]);
        std::fs::write(&dir, "2 10 5 1 2 00000000\n").unwrap();
        assert!(read_acks(&dir).unwrap_err().contains("hash"));
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn intents_round_trip() {
        let p = std::env::temp_dir().join(format!("mojim-chaos-intent-{}", std::process::id()));
        std::fs::write(&p, intent_bytes(9, 4, 5)).unwrap();
        assert_eq!(read_intent(&p), Some((9, 4, 5)));
        std::fs::write(&p, &intent_bytes(9, 4, 5)[..10]).unwrap();
        assert_eq!(read_intent(&p), None);
        let _ = std::fs::remove_file(&p);
    }
}
