//! The emulated NVMM's report (`[region]` and `[mirror]` `nvmm_*` settings), as the primary's
//! and the mirror's status show it. The model itself is `mojim_region::Nvmm`.

use mojim_region::Nvmm;
use serde::{Deserialize, Serialize};

/// What an emulated NVMM is set to and what it has charged since its files were opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmmStatus {
    /// Nanoseconds added to each persistence barrier (`nvmm_barrier_ns`).
    pub barrier_ns: u64,
    /// Cap on bytes persisted per second (`nvmm_write_rate`; 0: none).
    pub write_bytes_per_s: u64,
    /// Persistence barriers charged.
    pub barriers: u64,
    /// Bytes those barriers persisted.
    pub bytes: u64,
    /// Nanoseconds of delay the model asked for in all.
    pub delay_ns: u64,
}

impl NvmmStatus {
    /// The settings and counters of `n`.
    pub fn of(n: &Nvmm) -> NvmmStatus {
        let (m, c) = (n.model(), n.counters());
        NvmmStatus {
            barrier_ns: m.barrier.as_nanos() as u64,
            write_bytes_per_s: m.write_bytes_per_s,
            barriers: c.barriers,
            bytes: c.bytes,
            delay_ns: c.delay_ns,
        }
    }
}
