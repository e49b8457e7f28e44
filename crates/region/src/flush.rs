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
///
/// # Safety
///
/// `[ptr, ptr + len)` must be mapped in this process for the duration of the call (a
/// write-back of an unmapped address faults). The instructions do not change memory
/// contents, so the bytes may be borrowed or stored into by others meanwhile.
pub(crate) unsafe fn persist_cache_lines(ptr: *const u8, len: usize) {
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
            // SAFETY: `line` is the start of a cache line that overlaps `[ptr, ptr + len)`, which
            // the caller's contract keeps mapped; a mapping covers whole pages, hence whole
            // lines, so `line` is mapped. Write-back and flush instructions do not change
            // memory contents and do not fault on mapped addresses.
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

/// Copies `src` to `dst` and makes the copy persistent, bypassing the cache where it can:
/// non-temporal stores for the 16-byte-aligned middle, ordinary stores written back for the
/// unaligned ends, then a store fence. For a large copy this beats storing and then writing
/// every line back: no line is read for ownership, and none is visited twice.
///
/// # Safety
///
/// `[dst, dst + src.len())` must be valid for writes (mapped and writable) for the duration of
/// the call, and must not overlap `src`. No Rust reference to those bytes may be in use
/// meanwhile.
pub(crate) unsafe fn copy_persistent(dst: *mut u8, src: &[u8]) {
    let len = src.len();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = dst.align_offset(16).min(len);
        let body_end = head + (len - head) / 16 * 16;
        // SAFETY: the caller's contract makes `[dst, dst + len)` writable and disjoint from
        // `src`; every access below lies in it (`head <= body_end <= len`), `src` is a valid
        // slice of `len` bytes (unaligned loads are allowed), and the streamed destinations are
        // 16-byte aligned (they start at `dst + head`, which is, and step by 16). SSE2, which
        // the intrinsics need, is part of x86_64.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
            let mut i = head;
            while i < body_end {
                let v = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
                _mm_stream_si128(dst.add(i) as *mut __m128i, v);
                i += 16;
            }
            std::ptr::copy_nonoverlapping(src.as_ptr().add(body_end), dst.add(body_end), len - body_end);
        }
        // SAFETY: both ranges lie in `[dst, dst + len)`, which the caller's contract keeps
        // mapped for the call.
        unsafe {
            persist_cache_lines(dst, head);
            persist_cache_lines(dst.wrapping_add(body_end), len - body_end);
        }
        // SAFETY: a store fence has no memory-safety preconditions; it orders the streaming
        // stores before anything that follows.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the caller's contract: `[dst, dst + len)` is writable, mapped for the call
        // and disjoint from `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len);
            persist_cache_lines(dst, len);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn has_clwb() -> bool {
    use std::sync::OnceLock;
    static CLWB: OnceLock<bool> = OnceLock::new();
    *CLWB.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0: EBX bit 24 is CLWB.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86_64 processor and reads no memory (the call is
        // safe on newer compilers, hence `allow(unused_unsafe)`).
        let r = unsafe { std::arch::x86_64::__cpuid_count(7, 0) };
        r.ebx & (1 << 24) != 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_persistent_copies_every_alignment() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for dst_at in 0..20 {
            for len in [0usize, 1, 15, 16, 17, 63, 64, 65, 200, 280] {
                let mut dst = vec![0xEEu8; 320];
                // SAFETY: `dst` has room for `dst_at + len` bytes and does not overlap `src`.
                unsafe { copy_persistent(dst.as_mut_ptr().add(dst_at), &src[..len]) };
                assert_eq!(&dst[dst_at..dst_at + len], &src[..len], "at {dst_at} len {len}");
                assert!(
                    dst[..dst_at].iter().all(|&b| b == 0xEE)
                        && dst[dst_at + len..].iter().all(|&b| b == 0xEE)
                );
            }
        }
    }
}
