//! Measuring the modes of `--mode` on a session: sync points, `tcp-rtt`'s ping-pong, the disk
//! file, the disk mirror's recovery, and settings compared side by side.

use super::drive::drive;
use super::kind::Kind;
use super::result::{median, BenchResult};
use super::session::{open_settled, primary_options, Session};
use super::settings::{exe, metrics_on, transport, transport_name};
use super::setup::Setup;
use crate::bench::BenchArgs;
use crate::child::ChildNode;
use mojim::config::{random_uuid, Mode, RegionId};
use mojim::error::{Error, Result};
use mojim::size::format_size;
use mojim_transport::{AnyTransport, Conn, Transport};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Runs the modes once per setting of `flag` (`--tls`, `--metrics`; `set` applies one), the
/// settings taking turns round by round (`--repeat`), in the opposite order every other round,
/// so that a noisy moment of this machine, and going first or last in a round, fall on each
/// alike; for each setting and mode, the round with the median p50.
///
/// A setting that changes a session's processes (`--tls`: `own_sessions`) gets a session of
/// its own, every one started before any is measured. One that changes only the primary,
/// opened anew for each measurement (`--metrics`), shares one session, so that what differs
/// between two mirrors' processes and regions is not read as the setting's cost.
pub(crate) fn measure_side_by_side(
    a: &BenchArgs,
    flag: &str,
    settings: &[&str],
    own_sessions: bool,
    set: impl Fn(&mut BenchArgs, &str),
) -> Result<Vec<BenchResult>> {
    let ones: Vec<BenchArgs> = settings
        .iter()
        .map(|t| {
            let mut one = a.clone();
            set(&mut one, t);
            one.repeat = 1;
            one
        })
        .collect();
    let sessions = if own_sessions {
        ones.iter().map(Session::start).collect::<Result<Vec<_>>>()?
    } else {
        vec![Session::start(&ones[0])?]
    };
    let mut rounds: Vec<Vec<Vec<BenchResult>>> = vec![Vec::new(); ones.len()];
    for round in 0..a.repeat.max(1) {
        let mut order: Vec<usize> = (0..ones.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let r = sessions[if own_sessions { i } else { 0 }].measure(&ones[i])?;
            if !a.json {
                let p50s: Vec<String> =
                    r.iter().map(|m| format!("{} p50 {:.2} µs", m.mode, m.p50_us)).collect();
                eprintln!(
                    "bench: {flag} {}, round {} of {}: {}",
                    settings[i],
                    round + 1,
                    a.repeat,
                    p50s.join(", ")
                );
            }
            rounds[i].push(r);
        }
    }
    let mut out = Vec::new();
    for per_setting in rounds {
        let modes = per_setting.first().map_or(0, Vec::len);
        for m in 0..modes {
            out.push(median(per_setting.iter().map(|r| r[m].clone()).collect()));
        }
    }
    Ok(out)
}

pub(crate) fn measure_with(a: &BenchArgs, s: &Setup, kinds: &[Kind]) -> Result<Vec<BenchResult>> {
    if a.threads == 0 || a.threads > 256 {
        return Err(Error::Config(format!("--threads {} must be between 1 and 256", a.threads)));
    }
    if a.size == 0 || a.size.saturating_mul(a.threads as u64) > a.region_size {
        return Err(Error::Config(format!(
            "--size {} times --threads {} must be more than 0 and fit in --region-size {}",
            a.size,
            a.threads,
            format_size(a.region_size)
        )));
    }
    if a.repeat == 0 {
        return Err(Error::Config("--repeat must be at least 1".into()));
    }
    let mut rounds: Vec<Vec<BenchResult>> = vec![Vec::new(); kinds.len()];
    for round in 0..a.repeat {
        for (i, &k) in kinds.iter().enumerate() {
            if !a.json {
                eprintln!(
                    "bench: {} ({} B, {} threads), round {} of {}...",
                    k.name(),
                    a.size,
                    a.threads,
                    round + 1,
                    a.repeat
                );
            }
            rounds[i].push(measure_one(a, s, k)?);
        }
    }
    if kinds.contains(&Kind::Mode(Mode::SyncDisk)) && s.disk_mirror.is_some() && !a.json {
        match disk_recovery(a, s) {
            Ok((micros, groups)) => eprintln!(
                "bench: sync-disk mirror killed (SIGKILL) and restarted: recovery applied {groups} groups \
                 from its logs to the disk data area in {:.1} ms",
                micros as f64 / 1000.0
            ),
            Err(e) => eprintln!("bench: sync-disk recovery not measured: {e}"),
        }
    }
    Ok(rounds.into_iter().map(median).collect())
}

/// The process that receives what kind `k` sends, if this benchmark started it.
pub(crate) fn receiver_pid(s: &Setup, k: Kind) -> Option<u32> {
    match k {
        Kind::TcpRtt => s.echo.as_ref().map(|e| e.pid()),
        Kind::Mode(Mode::SyncDisk) => s.disk_mirror.as_ref().map(|m| m.pid()),
        Kind::Mode(m) if m.replicated() => s.main.as_ref().map(|c| c.mirror.pid()),
        Kind::Scheme(..) => s.scheme(k).map(|c| c.mirror.pid()),
        _ => None,
    }
}

pub(crate) fn measure_one(a: &BenchArgs, s: &Setup, k: Kind) -> Result<BenchResult> {
    let receiver = receiver_pid(s, k);
    let cpu = |pid: Option<u32>| pid.and_then(|p| crate::cpu_time::process(p).ok());
    let (sender0, receiver0) = (cpu(Some(std::process::id())), cpu(receiver));
    let mut r = match k {
        Kind::TcpRtt => tcp_rtt(a, s, s.echo.as_ref().expect("echo started").addr())?,
        Kind::Mode(m) => sync_points(a, s, m, &s.region_path, k)?,
        Kind::Scheme(..) => sync_points(a, s, Mode::Sync, &s.region_path, k)?,
        Kind::DiskFile => {
            let p = a.disk_file.clone().expect("disk file given");
            // The file is the benchmark's own: so are any files left beside it by an earlier
            // run that was cut short (their region is gone, and they would be refused).
            mojim::remove_region(&p)?;
            mojim::create_region(&p, RegionId { uuid: random_uuid(), size: a.region_size })?;
            let r = sync_points(a, s, Mode::Unreplicated, &p, k);
            mojim::remove_region(&p)?;
            r?
        }
    };
    r.transport = transport_name(a).into();
    r.tls = s.tls.is_some();
    r.encrypt_placed = s.tls.as_ref().is_some_and(|t| t.encrypt_placed());
    r.metrics = metrics_on(a)?;
    let ops = (r.ops + a.warmup * a.threads as u64).max(1) as f64;
    let per_op = |before: Option<Duration>, after: Option<Duration>| match (before, after) {
        (Some(b), Some(e)) => Some(e.saturating_sub(b).as_secs_f64() * 1e6 / ops),
        _ => None,
    };
    r.cpu_us_sender = per_op(sender0, cpu(Some(std::process::id())));
    r.cpu_us_receiver = per_op(receiver0, cpu(receiver));
    if k == Kind::TcpRtt && transport(a) != "tcp" {
        r.mode = format!("{}-rtt", transport(a));
    }
    (r.backups, r.topology) = match k {
        Kind::Scheme(t, _) => (a.backups.max(1), t.name().into()),
        Kind::Mode(m) if m.replicated() && m != Mode::SyncDisk && a.backups > 0 => {
            (a.backups, a.topology.name().into())
        }
        _ => (0, "none".into()),
    };
    Ok(r)
}

/// Kills the disk mirror mid-stream, restarts it from its folders, and reads how long its
/// recovery took and how many groups it re-applied.
pub(crate) fn disk_recovery(a: &BenchArgs, s: &Setup) -> Result<(u64, usize)> {
    let mirror = s.disk_mirror.as_ref().expect("checked").addr().to_string();
    let mut opts = primary_options(a, s, Mode::SyncDisk, &s.region_path);
    opts.mirror = mirror;
    opts.lanes = 1;
    let p = open_settled(&opts)?;
    // Groups the mirror has in its log but has not yet made durable on disk: recovery's work.
    let page = vec![0x5Au8; 4096];
    for i in 0..64u64 {
        p.write(i * 4096, &page)?;
        p.msync(i * 4096, 4096)?;
    }
    // A crash, not a shutdown: SIGKILL. (The session's handle on the process reaps it later.)
    let killed = s.disk_mirror.as_ref().expect("checked").pid();
    let pid = rustix::process::Pid::from_raw(killed as i32).ok_or_else(|| Error::Config("no pid".into()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .map_err(|e| Error::io("kill the disk mirror")(e.into()))?;
    drop(p);
    // Gone once it is a zombie (its parent, this process, reaps it later).
    let gone = || {
        std::fs::read_to_string(format!("/proc/{killed}/stat"))
            .map_or(true, |st| st.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    };
    while !gone() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let args: Vec<&str> = s.disk_args.iter().map(String::as_str).collect();
    let restarted = ChildNode::spawn(&exe()?, &args)?;
    let mut admin = mojim_node::admin_client::AdminClient::connect_tls(
        restarted.addr(),
        &s.secret,
        s.tls.clone(),
        Duration::from_secs(5),
    )?;
    let st = admin.status()?;
    Ok((st.recovery.micros, st.recovery.groups_applied))
}

pub(crate) fn sync_points(
    a: &BenchArgs,
    s: &Setup,
    mode: Mode,
    region: &Path,
    kind: Kind,
) -> Result<BenchResult> {
    let mut opts = primary_options(a, s, mode, region);
    let cluster = match kind {
        Kind::Scheme(..) => s.scheme(kind),
        Kind::Mode(m) if m.replicated() && m != Mode::SyncDisk => s.main.as_ref(),
        _ => None,
    };
    if let Some(c) = cluster {
        opts.mirror = c.mirror.addr().to_string();
        opts.broadcast = c.broadcast.clone();
    }
    if metrics_on(a)? {
        opts.metrics_listen = Some("127.0.0.1:0".into());
    }
    let p = open_settled(&opts)?;
    let scraper = p.metrics_addr().map(crate::bench_scrape::Scraper::start).transpose()?;
    let part = p.size() / a.threads as u64;
    let slots = (part / a.size).max(1);
    let states: Vec<(u64, u64)> = (0..a.threads as u64).map(|t| (t * part, 0u64)).collect();
    let r = drive(a, kind, states, |(base, counter), rng| {
        let off = *base + (rng.next() % slots) * a.size;
        *counter += 1;
        let stamp = counter.to_le_bytes();
        p.write(off, &stamp[..stamp.len().min(a.size as usize)])?;
        p.msync(off, a.size)
    })?;
    if let Some(scraper) = scraper {
        // A scrape that failed fails the run: the setting would not be what it says.
        scraper.finish()?;
    }
    p.close()?;
    Ok(r)
}

pub(crate) fn tcp_rtt(a: &BenchArgs, s: &Setup, addr: &str) -> Result<BenchResult> {
    let mut states = Vec::new();
    for _ in 0..a.threads {
        let mut c = AnyTransport::new(s.tls.clone())
            .connect(addr, Duration::from_secs(5))
            .map_err(Error::io(format!("connect to {addr}")))?;
        c.set_busy_poll(Duration::from_micros(a.busy_poll_us));
        c.write_all(&a.size.to_le_bytes()).map_err(Error::io("send size"))?;
        states.push((c, vec![0x5Au8; a.size as usize], [0u8; 64]));
    }
    drive(a, Kind::TcpRtt, states, |(c, buf, reply), _| {
        c.write_all(buf).map_err(Error::io("ping"))?;
        c.read_exact(reply).map_err(Error::io("pong"))
    })
}
