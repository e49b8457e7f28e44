//! The primary's decisions, as pure functions of what it knows and what the mirror said.
//!
//! Today this covers the choice a session begins with ([`resync_choice`]): whether the mirror
//! is current, or which copy (the metadata log's ranges, the dirty bitmap's chunks, or the whole
//! region) brings it up to date, or why neither copy may be kept automatically
//! ([`Divergence`]), and where the metadata log restarts after it ([`Plan::log_start`]); and,
//! in mode `async`, which earlier group a sync point waits for ([`InFlightWindow`]). The
//! library's primary (`mojim`'s `primary/resync.rs`) runs the answer: it announces the copy,
//! restarts its metadata log and sends the ranges. The simulator's primaries make the same
//! choice from the production metadata log and dirty bitmap (`sim/primary.rs`).

mod resync;
mod window;

pub use resync::{
    coalesce, resync_choice, CopyKind, Divergence, MirrorHistory, Plan, PrimaryHistory, Reason, REFUSED_SYNC,
};
pub use window::InFlightWindow;
