//! The primary's decisions, as pure functions of what it knows and what the mirror said.
//!
//! Today this covers the choice a session begins with ([`resync_choice`]): whether the mirror
//! is current, or which copy (the metadata log's ranges, the dirty bitmap's chunks, or the whole
//! region) brings it up to date, or why neither copy may be kept automatically
//! ([`Divergence`]). The library's primary (`mojim`'s `primary/resync.rs`) runs the answer: it
//! announces the copy, restarts its metadata log and sends the ranges. The simulator's primary
//! does not resynchronise: every simulated session begins with generation 0 on both sides and a
//! promoted incarnation takes the mirror's copy whole, so it has no choice to make.

mod resync;

pub use resync::{
    coalesce, resync_choice, CopyKind, Divergence, MirrorHistory, Plan, PrimaryHistory, Reason,
};
