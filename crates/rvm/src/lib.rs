//! Recoverable virtual memory on Mojim: the Nephele API.
//!
//! A program allocates its critical state from recoverable memory ([`Rvm::alloc`]), uses it
//! with ordinary loads and stores, and marks points of consistency ([`Rvm::txn_commit`]). No
//! sync points to place by hand: the pages written since the last commit are found by the
//! kernel (userfaultfd's asynchronous write protection, or page protection as a fallback) and
//! sent, with the allocator's own changes, as one atomic step. After a crash, [`Rvm::open`]
//! maps the memory back at the same addresses with the last commit's contents, so pointers
//! stored in it stay valid; [`Rvm::usr_data`] is the root to start from.
//!
//! ```no_run
//! use mojim_rvm::{Rvm, RvmOptions};
//! let cfg = mojim::Config::load("mojim.toml".as_ref())?;
//! let rvm = Rvm::open(&RvmOptions::from_config(&cfg, false)?)?;
//! let mut count = rvm.usr_data() as *mut u64;
//! if count.is_null() {
//!     count = rvm.alloc(8)? as *mut u64;
//!     rvm.set_usr_data(count as *mut u8)?;
//! }
//! unsafe { *count += 1 }; // an ordinary store
//! rvm.txn_commit()?; // in the mirror's log when this returns
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers, as in the report: [`Rvm`] (allocation, the block table, commit and recovery) over
//! the [`Rmem`] trait, implemented by [`MojimRmem`] (a Mojim region and its mirror) and
//! [`RedisRmem`] (a Redis server: shadow pages switched in by one `MULTI`/`EXEC`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
mod error;
pub mod layout;
mod mojim_rmem;
mod options;
pub mod redis;
mod redo;
mod rmem;
mod rvm;

pub use config::RvmSection;
pub use error::{Result, RvmError};
pub use mojim_region::{Cells, Plain, WriteTracking};
pub use mojim_rmem::MojimRmem;
pub use options::{parse_base, parse_tracking, Backend, RvmOptions, DEFAULT_BASE};
pub use redis::{RedisOptions, RedisPassword, RedisRmem, RedisTls, REDIS_PASSWORD_ENV};
pub use redo::path_beside as redo_path;
pub use rmem::Rmem;
pub use rvm::{Recovery, Rvm, RvmStatus};
