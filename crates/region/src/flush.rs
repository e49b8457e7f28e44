//! Local persistence of a byte range: cache-line write-back or msync.

/// How the bytes of a mapping become persistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// A DAX file mapped with `MAP_SYNC`: cache-line write-back and a store fence suffice.
    Dax,
    /// Memory-backed (tmpfs, `/dev/shm`), the paper's DRAM-as-NVMM proxy: the same
    /// instructions as DAX are issued, for their cost.
    Memory,
    /// An ordinary file: `msync(MS_SYNC)` of the page-rounded range.
    File,
}

impl Persistence {
    pub fn name(self) -> &'static str {
        match self {
            Persistence::Dax => "dax",
            Persistence::Memory => "memory",
            Persistence::File => "file",
        }
    }
}

const LINE: usize = 64;

/// Writes back every cache line of `[ptr, ptr + len)` and fences.
pub fn persist_cache_lines(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = ptr as usize & !(LINE - 1);
    let end = ptr as usize + len;
    #[cfg(target_arch = "x86_64")]
    {
        let clwb = has_clwb();
        let mut line = start;
        while line < end {
            // SAFETY: `line` lies in a cache line that overlaps `[ptr, ptr + len)`, which the
            // caller has mapped; write-back and flush instructions do not change memory
            // contents and cannot fault on mapped addresses.
            unsafe {
                if clwb {
                    std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags));
                } else {
                    std::arch::x86_64::_mm_clflush(line as *const u8);
                }
            }
            line += LINE;
        }
        // SAFETY: a store fence has no memory-safety preconditions.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (start, end);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(target_arch = "x86_64")]
fn has_clwb() -> bool {
    use std::sync::OnceLock;
    static CLWB: OnceLock<bool> = OnceLock::new();
    *CLWB.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0: EBX bit 24 is CLWB.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86_64 processor.
        let r = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        r.ebx & (1 << 24) != 0
    })
}
