//! The WHISPER structures under each fence strategy against a real mirror in this process: what
//! `sm-rc` and `sm-ob` acknowledged is what the mirror's copy decodes to, and `no-sm` leaves the
//! mirror's copy as it was while the primary's region holds its own run.

use mojim::config::random_uuid;
use mojim::primary::Primary;
use mojim::{create_region, FailurePolicy, Limits, Mode, PrimaryOptions, RegionId, Secret};
use mojim_node::{Mirror, MirrorHandle, MirrorOptions};
use mojim_tools::bench::harness::transact::Strategy;
use mojim_tools::whisper::mem::{PmMem, VecMem};
use mojim_tools::whisper::{decode, workload, Contents, Structure, Workload};
use std::path::{Path, PathBuf};
use std::time::Duration;

const SECRET: &[u8] = b"whisper-secret!!";
const SIZE: u64 = 8 << 20;

/// A folder of the test's, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("mojim-whisper-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mirror(dir: &Path, id: RegionId) -> MirrorHandle {
    let o = MirrorOptions {
        dir: dir.join("mirror"),
        log_dir: dir.join("mirror"),
        listen: "127.0.0.1:0".into(),
        region: id,
        secret: Secret(SECRET.to_vec()),
        tls: None,
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        log_capacity: 4 << 20,
        checkpoint_thresh: 1,
        checkpoint_idle: Duration::from_millis(1),
        max_lanes: 8,
        logs_at_start: 0,
        data: mojim_node::DataPlacement::Memory,
        backups: Vec::new(),
        secondary_tier_thresh: 40 << 20,
        secondary_rate_limit: None,
        chain: false,
        busy_poll: Duration::ZERO,
        heartbeat: Default::default(),
        dirty_chunk: 64 << 10,
        metadata_log_records: 4096,
        coordinator: None,
        node: String::new(),
        nvmm: Default::default(),
    };
    Mirror::open(o).unwrap().serve().unwrap()
}

fn primary(dir: &Path, mirror: &str, mode: Mode) -> Primary {
    Primary::open(&PrimaryOptions {
        region_path: dir.join("region.mojim"),
        mode,
        mirror: mirror.into(),
        lanes: 1,
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        async_window: 16,
        failure: FailurePolicy { reconnect: Duration::from_millis(20), ..Default::default() },
        ..PrimaryOptions::default()
    })
    .unwrap()
}

/// What the mirror's copy of the first `len` bytes decodes to as `s`.
fn mirrored(m: &MirrorHandle, s: Structure, len: u64) -> Contents {
    m.checkpoint();
    let mut copy = VecMem::new(len as usize);
    m.read(0, &mut copy.bytes).unwrap();
    decode(s, &copy).unwrap()
}

/// Asserts `got == want`, naming the first key that differs rather than printing both.
fn same(got: &Contents, want: &Contents, what: &str) {
    let first = got.iter().zip(want.iter()).find(|(g, w)| g != w).map(|(g, w)| (*g.0, *w.0));
    assert!(
        got == want,
        "{what}: {} keys, want {}; first difference at keys {first:?}",
        got.len(),
        want.len()
    );
}

fn every_strategy_is_what_the_mirror_holds(s: Structure) {
    let dir = Dir::new(s.name());
    let id = RegionId { uuid: random_uuid(), size: SIZE };
    create_region(&dir.0.join("region.mojim"), id).unwrap();
    let m = mirror(&dir.0, id);
    let w = |seed| Workload { ops: 400, keys: 150, batch: 4, seed };
    let len = w(1).bytes(s);
    let p = primary(&dir.0, m.addr(), Mode::Sync);
    let mut last = Contents::new();
    for (seed, st) in [(11, Strategy::SmRc), (13, Strategy::SmOb)] {
        let mut mem = PmMem::new(&p, st, len).unwrap();
        let want = workload(s, &mut mem, &w(seed), |_| {}).unwrap().contents;
        assert!(want.len() > 50, "{} {}: {} keys", s.name(), st.name(), want.len());
        same(&decode(s, &mem).unwrap(), &want, &format!("{} {}: the primary", s.name(), st.name()));
        same(&mirrored(&m, s, len), &want, &format!("{} {}: the mirror's copy", s.name(), st.name()));
        assert!(want != last, "each strategy's run is its own");
        last = want;
    }
    p.close().unwrap();
    let p = primary(&dir.0, m.addr(), Mode::Unreplicated);
    let mut mem = PmMem::new(&p, Strategy::NoSm, len).unwrap();
    let want = workload(s, &mut mem, &w(15), |_| {}).unwrap().contents;
    same(&decode(s, &mem).unwrap(), &want, &format!("{} no-sm: the primary", s.name()));
    assert!(want != last, "no-sm's run is its own");
    same(
        &mirrored(&m, s, len),
        &last,
        &format!("{} no-sm sends nothing: the mirror keeps sm-ob's run", s.name()),
    );
    drop(mem);
    p.close().unwrap();
    m.shutdown();
}

#[test]
fn the_hash_map_under_every_strategy() {
    every_strategy_is_what_the_mirror_holds(Structure::HashMap);
}

#[test]
fn the_crit_bit_tree_under_every_strategy() {
    every_strategy_is_what_the_mirror_holds(Structure::CritBit);
}

#[test]
fn echo_under_every_strategy() {
    every_strategy_is_what_the_mirror_holds(Structure::Echo);
}
