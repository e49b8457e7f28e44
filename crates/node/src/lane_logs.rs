//! The node's lanes: each lane's redo log (made when the node opens, or when a session's lane
//! first joins) and its receiving state (`MirrorLane`: the log's space, the open group, the
//! session it is in).
//!
//! Locks: one per lane, never two at once, and nothing is taken under one; `log_create`
//! serialises the making of logs and takes a lane's lock under it (see the lock order in
//! lib.rs).

use mojim_core::checkpoint::GroupRef;
use mojim_core::encode::SessionTag;
use mojim_core::lane::MirrorLane;
use mojim_core::mirror::Logs;
use mojim_region::{Bytes, LogFile, Nvmm};
use mojim_transport::RecordMac;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Where lane `lane`'s log lives in `log_dir`.
pub(crate) fn log_path(log_dir: &Path, lane: u16) -> PathBuf {
    log_dir.join(format!("lane-{lane}.log"))
}

pub(crate) struct Lanes {
    logs: Vec<OnceLock<LogFile>>,
    /// Serialises the making of lane logs (a lane's connection from an ended session may still
    /// be making the log its successor needs).
    log_create: Mutex<()>,
    lanes: Vec<Mutex<MirrorLane>>,
    /// Where new logs are made, and the region they belong to.
    log_dir: PathBuf,
    region_uuid: [u8; 16],
    /// The emulated NVMM new logs are charged to, if any.
    nvmm: Option<Arc<Nvmm>>,
    /// Per lane: its log was offered to a peer that can write it at any time (UCX), also after
    /// a record was checked. Stays set while the process runs: records written then may still
    /// wait in the log after the connection ended.
    exposed: Vec<AtomicBool>,
    /// Per lane: the keys of the records placed in its log over TLS by the last few sessions,
    /// `(session, key)`, newest last, for the checkpointer's check of its copy (`copy_check`).
    /// Only in memory: after a restart recovery has no key (docs/SECURITY.md).
    macs: Vec<Mutex<Vec<(u64, RecordMac)>>>,
}

/// The lanes' logs as the checkpoint executor (`mojim_core::mirror::execute`) reads groups from
/// them and frees them. The lanes' own state learns of a freed tail through [`Lanes::freed`],
/// once the tail is persistent.
pub(crate) struct LaneLogs<'a>(pub &'a Lanes);

impl Logs for LaneLogs<'_> {
    fn records(&self, lane: u16) -> Bytes<'_> {
        Bytes::Mapped(self.0.log(lane).expect("a group's log exists").area())
    }

    fn set_tail(&mut self, lane: u16, pos: u64) -> std::io::Result<()> {
        self.0.log(lane).expect("a group's log exists").set_tail(pos)
    }

    fn persist(&mut self, lane: u16, from: u64, to: u64) -> std::io::Result<()> {
        mojim_core::mirror::persist_positions(&mut self.0.log(lane).expect("a group's log exists"), from, to)
    }
}

/// Sessions per lane whose placed records' keys are kept: groups of an older session wait in
/// the log only until the checkpointer applies them, which it does before it takes newer ones.
const MACS_KEPT: usize = 4;

/// One lane's receiving state, for the thread that serves the lane.
#[derive(Clone, Copy)]
pub(crate) struct LaneRef<'a>(&'a Mutex<MirrorLane>);

impl LaneRef<'_> {
    /// Runs `f` with the lane locked (nothing else is locked under it).
    pub fn with<R>(self, f: impl FnOnce(&mut MirrorLane) -> R) -> R {
        f(&mut lock(self.0))
    }

    /// Where the lane's log is free before: what its acknowledgements and heartbeats tell a
    /// primary that places its records.
    pub fn tail(self) -> u64 {
        self.with(|l| l.space().tail())
    }
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Lanes {
    /// The lanes after recovery: `logs[i]` is lane i's log if it exists, `lanes[i]` its state.
    pub fn new(
        logs: Vec<OnceLock<LogFile>>,
        lanes: Vec<Mutex<MirrorLane>>,
        log_dir: PathBuf,
        region_uuid: [u8; 16],
    ) -> Lanes {
        assert_eq!(logs.len(), lanes.len(), "a log cell per lane");
        let exposed = (0..logs.len()).map(|_| AtomicBool::new(false)).collect();
        let macs = (0..logs.len()).map(|_| Mutex::new(Vec::new())).collect();
        Lanes { logs, log_create: Mutex::new(()), lanes, log_dir, region_uuid, nvmm: None, exposed, macs }
    }

    /// Charges the persists of logs made from now on to `nvmm` (those opened at start-up
    /// already are).
    pub fn with_nvmm(mut self, nvmm: Option<Arc<Nvmm>>) -> Lanes {
        self.nvmm = nvmm;
        self
    }

    /// How many lanes the node serves.
    pub fn count(&self) -> usize {
        self.lanes.len()
    }

    pub fn lane(&self, lane: u16) -> LaneRef<'_> {
        LaneRef(&self.lanes[lane as usize])
    }

    /// Runs `f` with lane `lane` locked.
    pub fn with<R>(&self, lane: u16, f: impl FnOnce(&mut MirrorLane) -> R) -> R {
        self.lane(lane).with(f)
    }

    /// The log of `lane`, if it was made.
    pub fn log(&self, lane: u16) -> Option<&LogFile> {
        self.logs[lane as usize].get()
    }

    /// Marks `lane`'s log as written by a peer at any time (see [`Lanes::exposed`]).
    pub fn expose(&self, lane: u16) {
        self.exposed[lane as usize].store(true, Ordering::Release);
    }

    /// Whether `lane`'s log was offered to a peer that can write it at any time: its records
    /// are copied out, and checked on the copy, before they are applied.
    pub fn exposed(&self, lane: u16) -> bool {
        self.exposed[lane as usize].load(Ordering::Acquire)
    }

    /// Keeps `mac`, the key of session `session`'s records placed in `lane`'s log.
    pub fn keep_mac(&self, lane: u16, session: u64, mac: RecordMac) {
        let mut macs = lock(&self.macs[lane as usize]);
        macs.retain(|(s, _)| *s != session);
        if macs.len() == MACS_KEPT {
            macs.remove(0);
        }
        macs.push((session, mac));
    }

    /// The keys kept for `lane`'s placed records, by session.
    pub fn macs(&self, lane: u16) -> Vec<(u64, RecordMac)> {
        lock(&self.macs[lane as usize]).clone()
    }

    /// The log that holds group `g` (it exists: the group was received into it).
    pub fn log_holding(&self, g: &GroupRef) -> &LogFile {
        self.log(g.lane).expect("a group's log exists")
    }

    /// The log of `lane`, created (and its space reserved) when a session's lane first joins, if
    /// the node did not make it when it opened.
    pub fn log_of(&self, lane: u16) -> Result<&LogFile, LogCreateFailed> {
        let cell = &self.logs[lane as usize];
        if let Some(l) = cell.get() {
            return Ok(l);
        }
        let _making = lock(&self.log_create);
        if let Some(l) = cell.get() {
            return Ok(l);
        }
        let path = log_path(&self.log_dir, lane);
        let cap = self.capacity(lane);
        match LogFile::create(&path, self.region_uuid, lane, cap) {
            Ok(mut l) => {
                l.emulate_nvmm(self.nvmm.clone());
                // Mapped now, as the lane is about to receive into it (only saves its page
                // faults: a failure leaves them to the lane).
                if let Err(e) = l.populate(0, cap) {
                    tracing::debug!(lane, error = %e, "cannot map the new log's pages ahead");
                }
                let _ = cell.set(l);
                Ok(cell.get().expect("just set"))
            }
            Err(error) => Err(LogCreateFailed { lane, capacity: cap, error }),
        }
    }

    /// The capacity of `lane`'s log (as configured, for a log not made yet).
    pub fn capacity(&self, lane: u16) -> u64 {
        self.with(lane, |l| l.space().capacity())
    }

    /// The capacities of the first `n` lanes' logs, each lane locked in turn.
    pub fn capacities(&self, n: usize) -> impl Iterator<Item = u64> + '_ {
        self.lanes.iter().take(n).map(|l| lock(l).space().capacity())
    }

    /// Starts lane `tag.lane` in its session.
    pub fn begin(&self, tag: SessionTag, region_size: u64, max_frame: u32, next_seq: u64) {
        self.with(tag.lane, |l| l.begin(tag, region_size, max_frame, next_seq));
    }

    /// The first `lanes` lanes leave their ended session, each dropping its open group.
    pub fn end_session(&self, lanes: u16) {
        for lane in 0..lanes {
            if let Some(seq) = self.with(lane, |l| l.end_session()) {
                tracing::info!(lane, seq, "dropped the incomplete group of the ended session");
            }
        }
    }

    /// Lane `lane`'s log made its tail `pos` persistent: its space before `pos` is free.
    pub fn freed(&self, lane: u16, pos: u64) {
        self.with(lane, |l| l.release(pos));
    }

    /// Drops every lane's records: each log's tail moves to its head (persistently).
    pub fn drop_records(&self) -> std::io::Result<()> {
        for lane in 0..self.lanes.len() as u16 {
            let mut l = lock(&self.lanes[lane as usize]);
            let head = l.space().head();
            if let Some(log) = self.log(lane) {
                log.set_tail(head)?;
            }
            l.release(head);
        }
        Ok(())
    }

    /// Each lane whose log was made: its number, its log's capacity and the bytes in use.
    pub fn usage(&self) -> Vec<(u16, u64, u64)> {
        (0..self.lanes.len() as u16)
            .filter(|&i| self.log(i).is_some())
            .map(|i| self.with(i, |l| (i, l.space().capacity(), l.space().used())))
            .collect()
    }
}

/// This node could not make a lane's log: its storage's fault (no room, no permission).
#[derive(Debug)]
pub(crate) struct LogCreateFailed {
    pub lane: u16,
    pub capacity: u64,
    pub error: mojim_region::MapError,
}

impl std::fmt::Display for LogCreateFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let LogCreateFailed { lane, capacity, error } = self;
        write!(f, "cannot create the log for lane {lane} ({capacity} bytes): {error}")
    }
}

impl std::error::Error for LogCreateFailed {}
