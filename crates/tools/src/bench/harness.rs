//! What several benchmarks of `mojim bench` share: a session's region and processes, the
//! measurement of the modes of `--mode`, the threads that drive a measurement, results and their
//! table, the options' settings, random numbers, scratch files, and the Transact engine. Every
//! benchmark uses this module; it uses none of them.

mod drive;
mod echo;
mod kind;
mod modes;
mod result;
mod rng;
mod scratch;
mod session;
mod settings;
mod setup;
pub mod transact;

pub use echo::echo_server;
pub use result::{print, BenchResult};
pub use session::{measure, Session};
pub use settings::transports;

pub(crate) use modes::measure_side_by_side;
pub(crate) use rng::XorShift;
pub(crate) use scratch::{RemoveOnDrop, Scratch};
pub(crate) use settings::{exe, lanes, on_off_settings, tls_settings};
