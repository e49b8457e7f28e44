//! The allocator on its own: an unreplicated region, no mirror. Memory comes zeroed, freed
//! memory is reused, the table's limit is an error that changes nothing.

use mojim::config::random_uuid;
use mojim::{create_region, Limits, Mode, PrimaryOptions, RegionId};
use mojim_rvm::{Backend, Rvm, RvmError, RvmOptions};

fn open(name: &str, size: u64, base: usize) -> (Rvm, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("mojim-rvm-alloc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let region = dir.join("region.mojim");
    create_region(&region, RegionId { uuid: random_uuid(), size }).unwrap();
    let p = PrimaryOptions {
        region_path: region,
        mode: Mode::Unreplicated,
        mirror: String::new(),
        lanes: 1,
        limits: Limits { max_frame: 64 << 10, max_ranges: 1024 },
        async_window: 16,
        ..PrimaryOptions::default()
    };
    let opts = RvmOptions { backend: Backend::Mojim(p), base, tracking: None };
    (Rvm::open(&opts).unwrap(), dir)
}

fn zeroed(p: *mut u8, len: usize) -> bool {
    // SAFETY: `len` bytes rvm_alloc returned, mapped while the Rvm lives.
    unsafe { std::slice::from_raw_parts(p, len) }.iter().all(|&b| b == 0)
}

#[test]
fn memory_comes_zeroed_even_when_reused() {
    let (rvm, dir) = open("zeroed", 4 << 20, 0x6400_0000_0000);
    let small = rvm.alloc(40).unwrap();
    assert!(zeroed(small, 40), "a fresh chunk holds no free-list pointer");
    let big = rvm.alloc(4 << 12).unwrap();
    assert!(zeroed(big, 4 << 12));
    // SAFETY: both were just allocated, with these sizes.
    unsafe {
        small.write_bytes(0xee, 40);
        big.write_bytes(0xee, 4 << 12);
    }
    rvm.free(small).unwrap();
    rvm.free(big).unwrap();
    assert_eq!(rvm.alloc(64).unwrap(), small, "the chunk is reused, last freed first");
    assert!(zeroed(small, 64));
    assert_eq!(rvm.alloc(2 << 12).unwrap(), big, "the block is reused (split)");
    assert!(zeroed(big, 2 << 12));
    let rest = rvm.alloc((1 << 12) + 1).unwrap();
    assert_eq!(rest, big.wrapping_add(2 << 12), "and its rest too");
    assert!(zeroed(rest, 2 << 12));
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_class_is_aligned_and_a_full_table_is_an_error() {
    let (rvm, dir) = open("table", 1 << 30, 0x6500_0000_0000);
    for size in [1, 16, 17, 100, 1000, 4096] {
        let p = rvm.alloc(size).unwrap() as usize;
        assert_eq!(p % size.next_power_of_two().clamp(16, 4096), 0, "{size} bytes at {p:#x}");
    }
    let page = rvm.alloc(4097).unwrap() as usize;
    assert_eq!(page % 4096, 0);
    // 2040 entries; each block here is the smallest large one (two pages).
    let mut n = 0;
    let err = loop {
        match rvm.alloc(4097) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    match err {
        RvmError::Full { why, .. } => assert!(why.contains("block table is full"), "{why}"),
        e => panic!("{e}"),
    }
    assert!(n > 2000, "{n} blocks before the table filled");
    // Nothing changed by the refusal: a commit still goes, and freeing makes room.
    rvm.txn_commit().unwrap();
    rvm.free(page as *mut u8).unwrap();
    assert_eq!(rvm.alloc(5000).unwrap() as usize, page);
    rvm.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
