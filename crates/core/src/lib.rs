//! Mojim's sans-IO replication core.
//!
//! Everything here is plain state and arithmetic over caller-owned buffers: no sockets, files,
//! threads or clocks. The drivers in the `mojim` crate put it on real I/O; the simulator in
//! `sim` (cargo feature `sim`: on for this crate's own tests, never in a production build) puts
//! it on a seeded, faulty network and checks the invariants of `DESIGN.md`.
#![forbid(unsafe_code)]

pub mod auth;
pub mod checkpoint;
pub mod control;
pub mod encode;
pub mod handshake;
pub mod lane;
pub mod log_space;
pub mod mirror;
pub mod primary;
pub mod receive;
pub mod recovery;
pub mod seq_window;
#[cfg(feature = "sim")]
pub mod sim;

/// One byte range of the region, as given to `msync`/`gmsync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

impl Range {
    pub const fn new(offset: u64, len: u64) -> Range {
        Range { offset, len }
    }
}
