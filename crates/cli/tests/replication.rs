//! A primary in this process, a mirror in a child process: what is synced arrives byte for
//! byte, and calls that name bytes outside the region are refused without harming the session.

mod common;

use common::{assert_same_image, mirror_image, seed, wait_applied, Cluster, Rng};
use mojim::{Error, Mode, Primary, Range};
use mojim_tools::child::ChildNode;

const THREADS: u64 = 4;
const GROUPS_PER_THREAD: usize = 500;
const MAX_RANGE: u64 = 20 << 10;

/// Random ranges inside `[base, base + span)`, 1 to 4 of them, 1 B to 20 KiB each, at any
/// alignment; a few are tiny or sit at the very end of the span.
fn random_group(rng: &mut Rng, base: u64, span: u64) -> Vec<Range> {
    (0..rng.range(1, 4))
        .map(|_| {
            let len = match rng.range(0, 9) {
                0 => rng.range(1, 8),
                1 => MAX_RANGE,
                _ => rng.range(1, MAX_RANGE),
            };
            let off = if rng.chance(20) { span - len } else { rng.range(0, span - len) };
            Range::new(base + off, len)
        })
        .collect()
}

#[test]
fn concurrent_multi_range_gmsyncs_reach_the_mirror_exactly() {
    let seed = seed("concurrent_multi_range_gmsyncs");
    let mut rng = Rng::new(seed);
    let lanes = rng.range(2, 4) as u16;
    let quarter: u64 = 1 << 20;
    let mut c = Cluster::new("concurrent", THREADS * quarter, |f| {
        f.primary.mode = "sync".into();
        f.primary.lanes = lanes;
        // Small frames, so that most ranges span several frames.
        f.limits.max_frame = "8KiB".into();
        f.mirror.log_capacity = "1MiB".into();
    });
    c.start_mirror();
    let opts = c.primary_options();
    assert_eq!(opts.mode, Mode::Sync);
    let p = Primary::open(&opts).expect("open the primary");
    println!("{lanes} lanes, {THREADS} threads x {GROUPS_PER_THREAD} groups");

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let p = &p;
            let mut rng = Rng::new(seed ^ (t + 1).wrapping_mul(0x9e37_79b9));
            s.spawn(move || {
                // Each thread owns one quarter: bytes under sync are never written concurrently.
                let base = t * quarter;
                let mut buf = Vec::new();
                for g in 0..GROUPS_PER_THREAD {
                    let ranges = random_group(&mut rng, base, quarter);
                    for r in &ranges {
                        buf.resize(r.len as usize, 0);
                        rng.fill(&mut buf);
                        p.write(r.offset, &buf).expect("write inside the region");
                    }
                    if let Err(e) = p.gmsync(&ranges) {
                        panic!("thread {t} group {g} {ranges:?}: gmsync failed: {e}");
                    }
                }
            });
        }
    });

    let mut admin = c.admin();
    let st = wait_applied(&mut admin);
    assert_eq!(st.groups_received, THREADS * GROUPS_PER_THREAD as u64, "{st:?}");
    assert_eq!(st.violations, 0, "{st:?}");
    let mut mine = vec![0u8; p.size() as usize];
    p.read(0, &mut mine).expect("read the primary's region");
    let theirs = mirror_image(&mut admin, p.size());
    assert_same_image("mirror's data area vs primary's region", &mine, &theirs);
    p.close().expect("close the session");
}

#[test]
fn syncs_outside_the_region_are_refused_and_the_session_goes_on() {
    let size: u64 = 1 << 20;
    let mut c = Cluster::new("outside", size, |f| {
        f.primary.lanes = 1;
        f.limits.max_ranges = 16;
        // Room for groups of about 64 KiB with the default 64 KiB frames.
        f.mirror.log_capacity = "256KiB".into();
    });
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let mut admin = c.admin();

    let expect_range_error = |what: &str, r: mojim::Result<()>, needle: &str| match r {
        Err(Error::Range(e)) => {
            let m = e.to_string();
            assert!(m.contains(needle), "{what}: message {m:?} does not mention {needle:?}");
        }
        other => panic!("{what}: expected a range error, got {other:?}"),
    };
    expect_range_error("past the end", p.msync(size - 10, 11), "outside the region");
    expect_range_error("starts at the end", p.msync(size, 1), "outside the region");
    expect_range_error("offset overflows", p.msync(u64::MAX, 2), "outside the region");
    expect_range_error("length overflows", p.msync(1, u64::MAX), "outside the region");
    expect_range_error(
        "one bad range spoils the group",
        p.gmsync(&[Range::new(0, 100), Range::new(size, 100)]),
        "outside the region",
    );
    let base = p.as_ptr();
    expect_range_error("null pointer", p.msync_ptr(std::ptr::null(), 1), "not inside the region");
    expect_range_error(
        "pointer below the mapping",
        p.msync_ptr(base.wrapping_sub(1), 2),
        "not inside the region",
    );
    expect_range_error(
        "pointer range past the end",
        p.msync_ptr(base.wrapping_add(size as usize - 1), 2),
        "not inside the region",
    );
    expect_range_error(
        "pointer past the end",
        p.msync_ptr(base.wrapping_add(size as usize), 1),
        "not inside the region",
    );
    expect_range_error("pointer length overflows", p.msync_ptr(base, usize::MAX), "not inside the region");
    // Other caller errors are refused before anything is sent, too.
    let many: Vec<Range> = (0..17).map(|i| Range::new(i * 10, 1)).collect();
    expect_range_error("too many ranges", p.gmsync(&many), "limit is 16");
    expect_range_error("larger than a lane's log", p.msync(0, size), "log space");
    let st = admin.status().expect("status");
    assert_eq!(st.groups_received, 0, "a refused sync reached the mirror: {st:?}");

    // The session is unharmed: in-range syncs, including the region's last byte, still work.
    p.write(0, b"first").expect("write");
    p.msync(0, 5).expect("msync after refusals");
    p.write(size - 4, b"last").expect("write");
    // The pointer is only turned into a range, never dereferenced.
    p.msync_ptr(base.wrapping_add(size as usize - 4), 4).expect("msync_ptr of the last bytes");
    let st = wait_applied(&mut admin);
    assert_eq!(st.groups_received, 2, "{st:?}");
    assert_eq!(st.violations, 0, "{st:?}");
    assert_eq!(admin.read(0, 5).expect("read"), b"first");
    assert_eq!(admin.read(size - 4, 4).expect("read"), b"last");
    assert!(p.status().failed.is_none(), "{:?}", p.status());
    p.close().expect("close");
}

#[test]
fn the_smallest_log_capacity_accepted_is_usable_or_refused_up_front() {
    let mut c = Cluster::new("tinylog", 1 << 20, |f| f.mirror.log_capacity = "64KiB".into());
    let cfg = c.cfg_path.to_str().expect("utf-8 path").to_string();
    match ChildNode::spawn(common::exe(), &["serve", "--config", &cfg, "--listen", "127.0.0.1:0"]) {
        // Refusing the configuration at start-up is fine (the reason goes to stderr).
        Err(e) => return println!("the mirror refused to start: {e}"),
        Ok(child) => c.mirror = Some(child),
    }
    match Primary::open(&c.primary_options()) {
        Err(e) => {
            let m = e.to_string();
            assert!(
                m.contains("log_capacity") || m.contains("max_frame"),
                "Primary::open failed without naming the settings at fault: {m}"
            );
        }
        // Otherwise the smallest sync must work.
        Ok(p) => {
            p.write(0, b"x").expect("write");
            if let Err(e) = p.msync(0, 1) {
                panic!(
                    "the mirror and the primary accepted the configuration, but a 1-byte msync fails: {e}"
                );
            }
        }
    }
}
