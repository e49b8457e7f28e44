//! A benchmark session: the region and the processes started once for the modes of `--mode`,
//! measured against as often as wanted, and the primaries opened on it.

use super::kind::{parse_kinds, Kind};
use super::modes::measure_with;
use super::result::BenchResult;
use super::settings::{lanes, transport_name};
use super::setup::{setup, Setup};
use crate::bench::BenchArgs;
use mojim::config::{random_uuid, Mode, RegionId};
use mojim::error::{Error, Result};
use mojim::primary::{Primary, PrimaryOptions};
use std::path::Path;
use std::time::Duration;

/// Runs the benchmark and returns its results.
pub fn measure(a: &BenchArgs) -> Result<Vec<BenchResult>> {
    Session::start(a)?.measure(a)
}

/// A benchmark's region, mirrors and echo server, started once for the modes of `--mode` and
/// measured against as often as wanted (`--matrix` varies size, threads and lanes between
/// measurements); its processes are stopped and its files removed when it is dropped.
pub struct Session {
    setup: Setup,
}

impl Session {
    /// Creates the region and starts what the modes of `a.mode` need.
    pub fn start(a: &BenchArgs) -> Result<Session> {
        let kinds = parse_kinds(a)?;
        Ok(Session { setup: setup(a, &kinds)? })
    }

    /// Measures the modes of `a.mode`, each of which needs what this session started.
    pub fn measure(&self, a: &BenchArgs) -> Result<Vec<BenchResult>> {
        let kinds = parse_kinds(a)?;
        for &k in &kinds {
            self.check_started(k)?;
        }
        measure_with(a, &self.setup, &kinds)
    }

    /// Opens the session's region as a primary in `mode` (lanes as for `a`), for benchmarks
    /// that drive the region themselves, such as Transact.
    pub fn open_primary(&self, a: &BenchArgs, mode: Mode) -> Result<Primary> {
        self.check_started(Kind::Mode(mode))?;
        open_settled(&primary_options(a, &self.setup, mode, &self.setup.region_path))
    }

    /// Opens an unreplicated primary on a region file of its own at `path` (made here, `size`
    /// bytes), for a benchmark that needs one beside the session's primary: a region has one
    /// primary at a time.
    pub fn open_local_primary(&self, a: &BenchArgs, path: &Path, size: u64) -> Result<Primary> {
        let _ = std::fs::remove_file(path);
        mojim::create_region(path, RegionId { uuid: random_uuid(), size })?;
        open_settled(&primary_options(a, &self.setup, Mode::Unreplicated, path))
    }

    /// The session's region file.
    pub fn region_path(&self) -> &Path {
        &self.setup.region_path
    }

    fn check_started(&self, k: Kind) -> Result<()> {
        let s = &self.setup;
        let started = match k {
            Kind::Mode(Mode::SyncDisk) if s.dir.is_some() => s.disk_mirror.is_some(),
            Kind::Mode(m) => !m.replicated() || s.mirror_addr.is_some(),
            Kind::TcpRtt => s.echo.is_some(),
            Kind::DiskFile => true,
            Kind::Scheme(..) => s.scheme(k).is_some(),
        };
        if started {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "mode {} needs a mirror or echo server that this benchmark session did not start; \
                 start the session with that mode in --mode",
                k.name()
            )))
        }
    }
}

/// Opens a primary and waits until any resynchronisation its session began has finished, so
/// that a measurement never overlaps a copy (a region written unreplicated is copied whole to a
/// new mirror, for example).
pub(crate) fn open_settled(opts: &PrimaryOptions) -> Result<Primary> {
    let p = Primary::open(opts)?;
    if let Some(r) = p.wait_resync(Duration::from_secs(3600)) {
        if !r.done {
            return Err(Error::MirrorLost {
                reason: format!("the resynchronisation before the run failed: {r:?}"),
            });
        }
    }
    Ok(p)
}

pub(crate) fn primary_options(a: &BenchArgs, s: &Setup, mode: Mode, region: &Path) -> PrimaryOptions {
    PrimaryOptions {
        region_path: region.to_path_buf(),
        mode,
        mirror: s.mirror_for(mode),
        lanes: lanes(a),
        secret: s.secret.clone(),
        tls: s.tls.clone(),
        limits: s.limits.clone(),
        busy_poll: Duration::from_micros(a.busy_poll_us),
        place_records: !transport_name(a).ends_with("-rings"),
        nvmm: s.nvmm,
        ..PrimaryOptions::default()
    }
}
