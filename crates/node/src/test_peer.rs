//! What the node's unit tests share: a node in a folder of its own under `/dev/shm`, serving
//! over the in-memory transport, and a primary written out by hand that joins a session with the
//! real handshake and sends frames built by `mojim_core::encode`.

use super::{MirrorHandle, MirrorOptions, Shared};
use mojim::config::{Heartbeat, Limits, Mode, OnMirrorLoss, RegionId, Secret};
use mojim::{FailurePolicy, Primary, PrimaryOptions};
use mojim_core::encode::{data_header, FramePlan, SessionTag};
use mojim_format::handshake::{PeerRole, Welcome};
use mojim_format::{FrameHeader, FrameKind};
use mojim_transport::connect::{connect, Intro};
use mojim_transport::frames::{read_frame, timed_out, write_frame, ReadError};
use mojim_transport::{Conn, MemConn, MemTransport};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const SECRET: &[u8] = b"the node tests' secret";
pub const MAX_FRAME: u32 = 4096;

/// A folder under `/dev/shm`, removed with everything in it when dropped.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = PathBuf::from("/dev/shm").join(format!(
            "mojim-node-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the scratch folder");
        Scratch { dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node's options: its files in `dir`, listening on `name` of the in-memory network, lanes'
/// logs of `log_capacity` bytes, frames of at most [`MAX_FRAME`], heartbeats every 20 ms.
pub fn node_options(dir: &Path, name: &str, region: RegionId, log_capacity: u64) -> MirrorOptions {
    MirrorOptions {
        dir: dir.to_path_buf(),
        log_dir: dir.to_path_buf(),
        listen: format!("{name}:0"),
        region,
        secret: Secret(SECRET.to_vec()),
        tls: None,
        limits: Limits { max_frame: MAX_FRAME, max_ranges: 64 },
        log_capacity,
        checkpoint_thresh: 1,
        checkpoint_idle: Duration::from_millis(1),
        max_lanes: 4,
        logs_at_start: 0,
        data: super::DataPlacement::Memory,
        backups: Vec::new(),
        secondary_tier_thresh: 40 << 20,
        secondary_rate_limit: None,
        chain: false,
        busy_poll: Duration::ZERO,
        heartbeat: Heartbeat { interval: Duration::from_millis(20), timeout: Duration::from_secs(10) },
        dirty_chunk: 64 << 10,
        metadata_log_records: 4096,
        coordinator: None,
        node: String::new(),
        nvmm: Default::default(),
    }
}

/// A region of `size` bytes with a fresh uuid.
pub fn region(size: u64) -> RegionId {
    RegionId { uuid: mojim::config::random_uuid(), size }
}

/// Opens a node and serves it on `net`.
pub fn serve(net: &MemTransport, opts: MirrorOptions) -> MirrorHandle {
    super::Mirror::open(opts).expect("open the node").serve_with(net.clone()).expect("serve the node")
}

/// A real primary's options: the region file at `path`, two lanes to the node at `mirror`,
/// frames of at most [`MAX_FRAME`], heartbeats as given, records sent on the connection.
pub fn primary_options(path: &Path, mirror: &str, heartbeat: Heartbeat) -> PrimaryOptions {
    PrimaryOptions {
        region_path: path.to_path_buf(),
        mirror: mirror.to_string(),
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: MAX_FRAME, max_ranges: 64 },
        async_window: 1,
        connect_timeout: Duration::from_secs(10),
        place_records: false,
        failure: FailurePolicy { heartbeat, on_mirror_loss: OnMirrorLoss::Block, ..FailurePolicy::default() },
        ..PrimaryOptions::default()
    }
}

/// Creates the region file `path` of `id` with a history of its own (one unreplicated open and
/// sync), so that a new mirror gets a full copy of it when its first replicated session begins.
pub fn region_with_history(path: &Path, id: RegionId) {
    mojim::create_region(path, id).expect("create the region");
    let mut opts = primary_options(path, "unused:0", Heartbeat::default());
    opts.mode = Mode::Unreplicated;
    let p = Primary::open(&opts).expect("open unreplicated");
    p.write(0, b"history").expect("store");
    p.msync(0, 7).expect("persist");
    p.close().expect("close");
}

/// The node's state, for the tests inside the crate.
pub fn shared(h: &MirrorHandle) -> &Shared {
    &h.shared
}

/// Waits for `what` to hold, at most ten seconds.
/// The checkpointer's applied sequence number.
pub fn applied(s: &Shared) -> u64 {
    s.ckpt.applied_seq()
}

/// `len` bytes of the data area at `offset`, read as an operator would.
pub fn read(s: &Shared, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    s.data.read_consistent(offset, &mut out).expect("read the data area");
    out
}

pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One lane of a session a hand-written primary opened.
pub struct Lane {
    pub conn: MemConn,
    pub tag: SessionTag,
    pub welcome: Welcome,
}

/// Joins lane `lane` of `lanes` of session `session` at `epoch` to the node at `addr`.
pub fn join(net: &MemTransport, addr: &str, region: RegionId, session: u64, lane: u16, lanes: u16) -> Lane {
    let intro = Intro {
        role: PeerRole::Primary,
        region,
        epoch: 1,
        session,
        lane,
        lanes,
        max_frame: MAX_FRAME,
        generation: 0,
        place: false,
        encrypt_placed: false,
    };
    let (conn, welcome) =
        connect(net, addr, Duration::from_secs(10), SECRET, &intro).expect("join the session");
    conn.set_recv_timeout(Some(Duration::from_secs(10))).expect("set the receive timeout");
    let tag = SessionTag { session, epoch: welcome.epoch, lane };
    Lane { conn, tag, welcome }
}

impl Lane {
    /// Sends frame `index` of group `seq`: `body` at `offset`, flagged END if `end`.
    pub fn send_frame(&mut self, seq: u64, index: u32, offset: u64, body: &[u8], end: bool) {
        let plan = FramePlan { offset, len: body.len() as u32, frame_index: index, end };
        self.send_raw(&data_header(self.tag, seq, plan, body), body);
    }

    /// Sends group `seq` of one frame: `body` at `offset`.
    pub fn send_group(&mut self, seq: u64, offset: u64, body: &[u8]) {
        self.send_frame(seq, 0, offset, body, true);
    }

    /// Sends a header and a body as they are.
    pub fn send_raw(&mut self, header: &[u8; mojim_format::FRAME_HEADER_SIZE], body: &[u8]) {
        write_frame(&mut self.conn, header, body).expect("send a frame");
    }

    /// The next frame the node sends, or `None` if none comes within `wait`.
    pub fn next_frame(&mut self, wait: Duration) -> Option<FrameHeader> {
        self.conn.set_recv_timeout(Some(wait)).expect("set the receive timeout");
        let mut body = Vec::new();
        let r = read_frame(&mut self.conn, 1 << 16, &mut body);
        self.conn.set_recv_timeout(Some(Duration::from_secs(10))).expect("set the receive timeout");
        match r {
            Ok(h) => Some(h),
            Err(ReadError::Io(e)) if timed_out(&e) => None,
            Err(e) => panic!("lane {}: no frame from the node: {e}", self.tag.lane),
        }
    }

    /// Reads the node's frames, heartbeats aside, until the acknowledgement of `seq`.
    pub fn wait_ack(&mut self, seq: u64) {
        loop {
            let h = self
                .next_frame(Duration::from_secs(10))
                .unwrap_or_else(|| panic!("lane {}: group {seq} not acknowledged", self.tag.lane));
            match h.kind {
                FrameKind::Heartbeat => continue,
                FrameKind::Ack => {
                    assert_eq!(h.seq, seq, "lane {} acknowledged another group", self.tag.lane);
                    return;
                }
                k => panic!("lane {}: {k:?} instead of the acknowledgement of {seq}", self.tag.lane),
            }
        }
    }

    /// Whether the node ends the lane (end of stream) within ten seconds, heartbeats aside.
    pub fn closed_by_node(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut body = Vec::new();
        while Instant::now() < deadline {
            match read_frame(&mut self.conn, 1 << 16, &mut body) {
                Ok(h) if h.kind == FrameKind::Heartbeat => {}
                Ok(_) => return false,
                Err(ReadError::Io(e)) if timed_out(&e) => return false,
                Err(_) => return true,
            }
        }
        false
    }
}
