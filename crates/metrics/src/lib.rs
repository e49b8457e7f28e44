//! Metrics for monitoring systems: the Prometheus text exposition format ([`text`]), a
//! histogram with fixed log-spaced buckets that records without a lock ([`histogram`]), and an
//! HTTP listener ([`listener`]) that serves `/metrics`, `/healthz` and `/readyz` from closures
//! a role supplies, on threads of its own.
//!
//! The crate knows no role: `mojim serve` renders its status into an [`Exposition`] at scrape
//! time, and other roles can do the same with theirs. It depends on the standard library only,
//! so a library that offers metrics behind a feature links nothing else for them.

#![forbid(unsafe_code)]

pub mod histogram;
pub mod listener;
pub mod text;

pub use histogram::LogHistogram;
pub use listener::{Limits, MetricsListener, Pages, Serving};
pub use text::{Exposition, Kind, Value};
