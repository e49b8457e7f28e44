//! A sync point allocates nothing, its recording included, while the primary's metrics
//! listener is scraped as fast as a client can ask: the allocations of the thread that syncs
//! are counted by a global allocator of this test binary, around sync points to an in-process
//! mirror on loopback, and must stay at zero; the scrapes' own rendering happens on the
//! listener's threads and is not the sync point's.

use mojim::config::random_uuid;
use mojim::{create_region, Limits, Mode, Primary, PrimaryOptions, RegionId, Secret};
use mojim_node::{DataPlacement, Mirror, MirrorOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

thread_local! {
    /// Allocations made by this thread (allocation, zeroed allocation, reallocation).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting each thread's allocations.
struct Counting;

fn count() {
    // `try_with`: a thread being torn down may still free, and allocate, after its locals.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call goes to `System` unchanged, with the caller's own arguments, so `System`'s
// guarantees are this allocator's; counting touches a const-initialised thread-local `Cell`
// without a destructor, which allocates nothing and cannot re-enter the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn mirror_options(dir: &Path, id: RegionId) -> MirrorOptions {
    MirrorOptions {
        dir: dir.join("mirror"),
        log_dir: dir.join("mirror"),
        listen: "127.0.0.1:0".into(),
        region: id,
        secret: Secret(b"test-secret".to_vec()),
        tls: None,
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        log_capacity: 4 << 20,
        checkpoint_thresh: 64,
        checkpoint_idle: Duration::from_millis(1),
        max_lanes: 8,
        logs_at_start: 0,
        data: DataPlacement::Memory,
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
    }
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    answer.split_once("\r\n\r\n").expect("a head and a body").1.to_string()
}

fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn sync_points_allocate_nothing_while_the_listener_is_scraped() {
    let dir = std::env::temp_dir().join(format!("mojim-it-{}-sync-allocations", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let id = RegionId { uuid: random_uuid(), size: 4 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let mirror = Mirror::open(mirror_options(&dir, id)).unwrap().serve().unwrap();
    let p = Primary::open(&PrimaryOptions {
        region_path: dir.join("region.mojim"),
        mode: Mode::Sync,
        mirror: mirror.addr().into(),
        lanes: 1,
        secret: Secret(b"test-secret".to_vec()),
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        metrics_listen: Some("127.0.0.1:0".into()),
        ..PrimaryOptions::default()
    })
    .unwrap();
    let addr = p.metrics_addr().expect("the primary serves its metrics").to_string();
    let before = allocations();
    drop(std::hint::black_box(vec![0u8; 64]));
    assert_eq!(allocations(), before + 1, "the allocator counts this thread's allocations");

    // Warm-up: whatever a thread or a lane sets up once (its number, its buffers).
    const WARM: u64 = 200;
    const N: u64 = 2000;
    let page = [0x5Au8; 4096];
    let sync = |i: u64| {
        let off = (i % 512) * 4096;
        p.write(off, &page).expect("write");
        p.msync(off, 4096).expect("msync");
    };
    (0..WARM).for_each(sync);

    let stop = AtomicBool::new(false);
    let scrapes = AtomicU64::new(0);
    let during = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                scrape(&addr);
                scrapes.fetch_add(1, Ordering::Relaxed);
            }
        });
        while scrapes.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let before = allocations();
        (WARM..WARM + N).for_each(sync);
        let during = allocations() - before;
        stop.store(true, Ordering::Relaxed);
        during
    });
    let scraped = scrapes.load(Ordering::Relaxed);
    assert!(scraped >= 2, "the listener was scraped while the sync points ran ({scraped} times)");
    assert_eq!(during, 0, "{N} sync points made {during} allocations on their thread");

    // The sync points were recorded, and a scrape sees every one.
    let after = scrape(&addr);
    assert_eq!(sample(&after, "mojim_primary_sync_seconds_count{mode=\"sync\"}"), Some((WARM + N) as f64));
    assert_eq!(sample(&after, "mojim_primary_groups_sent_total"), Some((WARM + N) as f64));

    p.close().unwrap();
    mirror.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}
