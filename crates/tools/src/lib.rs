//! Mojim's tools: the benchmarks (`bench`, with Transact, the WHISPER structures, resync and fail-over), the paper's
//! evaluation matrix and its plots, the Redis-protocol benchmark (`kv`), the chaos harness, the demo, and the child processes and
//! local clusters they start. Only the `mojim` binary (`mojim-cli`) depends on this crate: an
//! application links the `mojim` library alone.
#![forbid(unsafe_code)]

pub mod bench;
pub mod bench_capi;
pub mod bench_failover;
pub mod bench_lmdb;
pub mod bench_resync;
pub mod bench_scrape;
pub mod certs;
pub mod chaos;
pub mod child;
pub mod cluster;
pub mod cpu_time;
pub mod demo;
pub mod kv;
pub mod matrix;
pub mod netns;
pub mod plot;
pub mod rvm;
pub mod transact;
pub mod whisper;
