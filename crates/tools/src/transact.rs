//! `mojim bench --transact`: the Transact microbenchmark of Kokolis et al., "Enabling Efficient
//! RDMA-based Synchronous Mirroring of Persistent Memory Transactions" (§5, §7.1).
//!
//! A transaction is E epochs of W 64-byte writes each, at random cache-line-aligned addresses of
//! the region; an epoch ends with a fence, and each epoch's W writes are one group. The
//! strategies differ only in what a fence costs, and run side by side in one invocation:
//!
//! | strategy | per epoch | at the end | mode |
//! |---|---|---|---|
//! | `no-sm` | `persist` (local clwb+sfence) | nothing | unreplicated |
//! | `sm-rc` | `gmsync`: a durable round trip to the mirror | nothing | sync |
//! | `sm-ob` | `persist`: queued in order, no wait | one `wait` | sync |
//!
//! `no-sm` is the paper's upper bound (no replication), `sm-rc` its remote-commit design (a
//! blocking round trip at every fence), and `sm-ob` its ordered pipelining: ordering is kept by
//! the lane and the global sequence numbers, durability is waited for once. (The paper's `sm-dd`
//! differs from `sm-ob` only inside the remote NIC; over one TCP lane the two are the same.)

use crate::bench::harness::transact::{check_args, key_speedup, speedups, Transact, TransactResult};
use crate::bench::harness::Session;
use crate::bench::BenchArgs;
use mojim::error::Result;
use mojim::Mode;

/// `mojim bench --transact`: measures every epochs × writes and prints the results.
pub fn run(a: &BenchArgs) -> Result<()> {
    check_args(&a.transact, a.region_size)?;
    let mut sa = a.clone();
    sa.mode = vec![Mode::Sync.name().into()];
    sa.disk_file = None;
    let session = Session::start(&sa)?;
    let mut t = Transact::open(&session, &sa)?;
    let mut results = Vec::new();
    for &w in &a.transact.writes {
        for &e in &a.transact.epochs {
            if !a.json {
                eprintln!("transact: {e} epochs × {w} writes, {} transactions...", a.transact.transactions);
            }
            results.extend(t.measure(&sa, e, w)?);
        }
    }
    t.close()?;
    print(&results, a.json);
    Ok(())
}

/// Prints results as a table, or as JSON lines.
pub fn print(results: &[TransactResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<8} {:>7} {:>7} {:>6} {:>11} {:>11} {:>11} {:>9}",
        "strategy", "epochs", "writes", "txns", "mean_us", "p50_us", "p99_us", "slowdown"
    );
    for r in results {
        println!(
            "{:<8} {:>7} {:>7} {:>6} {:>11.2} {:>11.2} {:>11.2} {:>8.2}x",
            r.strategy, r.epochs, r.writes, r.transactions, r.mean_us, r.p50_us, r.p99_us, r.slowdown
        );
    }
    for (e, w, s) in speedups(results) {
        println!("{e:>3} epochs × {w} writes: sm-rc mean / sm-ob mean = {s:.2}");
    }
    if let Some((e, s)) = key_speedup(results) {
        let verdict = if s >= 3.0 { "met" } else { "NOT met" };
        println!(
            "ordered pipelining vs a round trip per fence, 1 write per epoch, ≥ 8 epochs: at least {s:.2}× \
             (lowest at {e} epochs; target ≥ 3×: {verdict})"
        );
    }
}
