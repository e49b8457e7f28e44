//! The order of the runs: per value size, the records are loaded into every target (and, before
//! the first size's runs, the sorted set and the set that workloads on them use); then each
//! cell (tool, workload, clients, pipeline) runs against every target one after another,
//! `--repeat` rounds interleaved, and per target the round with the median p50 is reported.
//! The workloads on a sorted set or a set do not depend on the value size: they run with the
//! first size only, and are reported with their members' size.
//!
//! A run of the built-in load is charged the CPU time (user and system) its target's processes
//! and the load's own thread used from just before its connections open to its last reply.

use super::collections::{self, MEMBER_BYTES};
use super::report::KvResult;
use super::targets::{Server, Target};
use super::ycsb::Workload;
use super::{delete_keys, keys, load, load_records, redis_benchmark, KvArgs, Tool};
use crate::bench::BenchArgs;
use mojim::error::Result;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// What to run, and with what.
pub(super) struct Plan<'a> {
    pub a: &'a BenchArgs,
    pub k: &'a KvArgs,
    pub redis_benchmark: &'a Path,
    /// Whether redis-benchmark runs (it was asked for, with SET or GET among the workloads).
    pub with_rb: bool,
    /// The redis-server's version, given in the Redis targets' results.
    pub version: Option<&'a str>,
    /// `--tls`: whether redis-benchmark connects in the clear, over TLS, or both (in this
    /// order); the certificates when over TLS.
    pub tls: &'a [bool],
    pub certs: Option<&'a super::tls::KvTls>,
}

/// The fewest shards `redis-benchmark --cluster` accepts (7.0: "Invalid cluster: 2 node(s)").
const RB_CLUSTER_SHARDS: usize = 3;

/// Counts the runs on stderr.
struct Progress {
    done: usize,
    total: usize,
    repeat: usize,
}

impl Progress {
    fn ran(&mut self, r: &KvResult, round: usize) {
        self.done += 1;
        let round =
            if self.repeat > 1 { format!(", round {}/{}", round + 1, self.repeat) } else { String::new() };
        let figures = if r.ops_per_s.is_finite() {
            format!("{:.0} ops/s, p50 {:.1} µs, p99 {:.1} µs", r.ops_per_s, r.p50_us, r.p99_us)
        } else {
            // redis-benchmark's rate is requests over whole milliseconds: "inf" for a shorter run.
            format!("{} finished within its 1 ms clock tick and gives no rate", r.tool)
        };
        eprintln!(
            "kv [{}/{}] {} {} {} B, clients {}, pipeline {}{}: {figures} ({}{round})",
            self.done,
            self.total,
            r.label(),
            r.workload,
            r.size,
            r.clients,
            r.pipeline,
            if r.tls { ", TLS" } else { "" },
            r.tool
        );
    }
}

/// The round with the median p50 among those with a rate.
fn median(mut rounds: Vec<KvResult>) -> Option<KvResult> {
    rounds.retain(|r| r.ops_per_s.is_finite());
    rounds.sort_by(|x, y| x.p50_us.total_cmp(&y.p50_us));
    (!rounds.is_empty()).then(|| rounds.swap_remove(rounds.len() / 2))
}

impl Plan<'_> {
    fn repeat(&self) -> usize {
        self.a.repeat.max(1)
    }

    fn runs(&self, servers: &[Server]) -> usize {
        let k = self.k;
        let cells = k.clients.len() * k.pipeline.len();
        let workloads = if k.tools.contains(&Tool::Kv) {
            // Those on collections of members run with the first size only.
            let sized = k.workloads.iter().filter(|w| w.sized()).count();
            sized * k.sizes.len() + (k.workloads.len() - sized)
        } else {
            0
        };
        // redis-benchmark gives a line per test.
        let rb: usize = if self.with_rb {
            servers.iter().map(|s| self.rb_tests(s).len()).sum::<usize>() * self.tls.len()
        } else {
            0
        };
        cells * (workloads * servers.len() + rb * k.sizes.len()) * self.repeat()
    }

    fn version_of(&self, t: Target) -> Option<String> {
        self.version.filter(|_| t.is_redis()).map(str::to_string)
    }

    /// What redis-benchmark runs against `s`: SET and GET as asked, but no SET where every write
    /// must be followed by WAIT, which redis-benchmark cannot send, and nothing on a cluster of
    /// fewer than 3 shards, which `redis-benchmark --cluster` refuses ("Invalid cluster").
    fn rb_tests(&self, s: &Server) -> Vec<Workload> {
        let t = s.target;
        if s.cluster.as_ref().is_some_and(|c| c.addrs.len() < RB_CLUSTER_SHARDS) {
            return Vec::new();
        }
        let mut tests: Vec<Workload> = Vec::new();
        for &w in &self.k.workloads {
            if (w == Workload::Get || (w == Workload::Set && !t.waits())) && !tests.contains(&w) {
                tests.push(w);
            }
        }
        // SET first, so that GET reads the keys it wrote.
        tests.sort_by_key(|w| *w != Workload::Set);
        tests
    }

    /// Prints a chosen result (as a JSON line with --json) and keeps it.
    fn emit(&self, r: Option<KvResult>, what: &str, results: &mut Vec<KvResult>) {
        let Some(r) = r else {
            eprintln!("kv: {what}: no round gave a rate; this line is left out (raise --ops)");
            return;
        };
        if self.a.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", r.json()).and_then(|_| out.flush());
        }
        results.push(r);
    }

    /// Runs everything against `servers` and returns the reported results.
    pub fn execute(&self, servers: &[Server]) -> Result<Vec<KvResult>> {
        let k = self.k;
        let mut progress = Progress { done: 0, total: self.runs(servers), repeat: self.repeat() };
        let mut results = Vec::new();
        for (si, &size) in k.sizes.iter().enumerate() {
            for s in servers {
                eprintln!("kv: loading {} records of {size} B into {}", k.records, s.label());
                load_records(&s.addr, s.target.is_cluster(), k.records, size as usize, s.target.wait())?;
            }
            let mut loaded = Vec::new();
            for &w in k.workloads.iter().filter(|_| si == 0 && k.tools.contains(&Tool::Kv)) {
                let Some(what) = collections::collection_of(w).filter(|c| !loaded.contains(c)) else {
                    continue;
                };
                loaded.push(what);
                for s in servers {
                    let seed = keys::fnv64(loaded.len() as u64);
                    collections::load(&s.addr, s.target.name(), what, k.members, s.target.wait(), seed)?;
                }
            }
            if k.tools.contains(&Tool::Kv) {
                for (wi, &w) in k.workloads.iter().enumerate() {
                    if !w.sized() && si > 0 {
                        continue;
                    }
                    for &clients in &k.clients {
                        for &pipeline in &k.pipeline {
                            let cell = Cell {
                                size: if w.sized() { size as usize } else { MEMBER_BYTES },
                                clients: clients as usize,
                                pipeline: pipeline as usize,
                            };
                            let mut rounds: Vec<Vec<KvResult>> = vec![Vec::new(); servers.len()];
                            for round in 0..self.repeat() {
                                for (i, s) in servers.iter().enumerate() {
                                    let r = self.kv_run(s, w, wi, &cell, round)?;
                                    progress.ran(&r, round);
                                    rounds[i].push(r);
                                }
                            }
                            for (s, rs) in servers.iter().zip(rounds) {
                                let what = format!("{} {} ({cell})", s.label(), w.name());
                                self.emit(median(rs), &what, &mut results);
                            }
                        }
                    }
                }
            }
            if self.with_rb {
                for &clients in &k.clients {
                    for &pipeline in &k.pipeline {
                        let cell = Cell {
                            size: size as usize,
                            clients: clients as usize,
                            pipeline: pipeline as usize,
                        };
                        for s in servers {
                            if self.rb_tests(s).is_empty() && s.target.is_cluster() {
                                eprintln!(
                                    "kv: redis-benchmark --cluster needs {RB_CLUSTER_SHARDS} shards or more: {} is measured by the kv tool only",
                                    s.label()
                                );
                            }
                            if s.target.waits() && k.workloads.contains(&Workload::Set) {
                                eprintln!(
                                    "kv: redis-benchmark cannot send WAIT after each SET: {} SET is measured by the kv tool only",
                                    s.target.name()
                                );
                            }
                        }
                        // Per TLS setting and target; the settings take turns within a round,
                        // as the targets do, so that a noisy moment falls on both.
                        let runs: Vec<(bool, &Server)> =
                            self.tls.iter().flat_map(|&t| servers.iter().map(move |s| (t, s))).collect();
                        let mut rounds: Vec<Vec<KvResult>> = vec![Vec::new(); runs.len()];
                        for round in 0..self.repeat() {
                            for (i, &(tls, s)) in runs.iter().enumerate() {
                                for r in self.rb_run(s, &cell, tls)? {
                                    progress.ran(&r, round);
                                    rounds[i].push(r);
                                }
                            }
                        }
                        for (&(tls, s), rs) in runs.iter().zip(rounds) {
                            for w in self.rb_tests(s) {
                                let of_w = rs.iter().filter(|r| r.workload == w.name()).cloned().collect();
                                let tls = if tls { ", TLS" } else { "" };
                                let what =
                                    format!("redis-benchmark {} {} ({cell}{tls})", s.label(), w.name());
                                self.emit(median(of_w), &what, &mut results);
                            }
                        }
                    }
                }
            }
        }
        Ok(results)
    }

    /// One run of the built-in load.
    fn kv_run(&self, s: &Server, w: Workload, wi: usize, cell: &Cell, round: usize) -> Result<KvResult> {
        let spec = load::RunSpec {
            addr: s.addr.clone(),
            workload: w,
            size: cell.size,
            clients: cell.clients,
            pipeline: cell.pipeline,
            ops: self.a.ops,
            duration: self.a.duration.map(Duration::from_secs_f64),
            records: self.k.records,
            members: self.k.members,
            wait: s.target.wait(),
            seed: cell.seed(wi, round),
            cluster: s.target.is_cluster(),
        };
        let pids = s.pids();
        let cpu_before = cpu_of(&pids)?;
        let o = load::run(&spec)?;
        let cpu_s = (cpu_of(&pids)? - cpu_before).max(0.0);
        if o.misses > 0 {
            eprintln!(
                "kv: warning: {} {}: {} reads found no value (a write it acknowledged is missing)",
                s.label(),
                w.name(),
                o.misses
            );
        }
        if w.on_strings() {
            if !o.inserted.is_empty() {
                delete_keys(&s.addr, s.target.is_cluster(), o.inserted.clone())?;
            }
        } else {
            collections::clean_up(&s.addr, s.target.name(), w, o.inserted.clone())?;
        }
        let secs = o.secs.max(1e-9);
        Ok(KvResult {
            tool: "kv",
            target: s.target.name(),
            workload: w.name(),
            size: cell.size,
            clients: cell.clients,
            pipeline: cell.pipeline,
            tls: false,
            ops: o.ops,
            ops_per_s: o.ops as f64 / secs,
            p50_us: o.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: o.hist.value_at_quantile(0.99) as f64 / 1000.0,
            mean_us: o.hist.mean() / 1000.0,
            misses: Some(o.misses),
            redis_version: self.version_of(s.target),
            cpu_s: Some(cpu_s),
            ops_per_cpu_s: (cpu_s > 0.0).then(|| o.ops as f64 / cpu_s),
            shards: s.cluster.as_ref().map(|c| c.addrs.len()),
            shard_ops: s.cluster.as_ref().map(|_| o.shard_ops.iter().map(|(_, n)| *n).collect()),
            moved: s.cluster.as_ref().map(|_| o.moved),
            asked: s.cluster.as_ref().map(|_| o.asked),
        })
    }

    /// One redis-benchmark invocation, over TLS if `tls`: a result per test.
    fn rb_run(&self, s: &Server, cell: &Cell, tls: bool) -> Result<Vec<KvResult>> {
        let tests = self.rb_tests(s);
        if tests.is_empty() {
            return Ok(Vec::new());
        }
        let addr = match (tls, &s.tls_addr) {
            (false, _) => &s.addr,
            (true, Some(a)) => a,
            (true, None) => unreachable!("--tls on starts every target with a TLS port"),
        };
        let rows = redis_benchmark::run(&redis_benchmark::Invocation {
            bin: self.redis_benchmark,
            addr,
            tests: &tests,
            size: cell.size,
            clients: cell.clients,
            pipeline: cell.pipeline,
            ops: self.a.ops,
            records: self.k.records,
            tls: self.certs.filter(|_| tls),
            cluster: s.target.is_cluster(),
        })?;
        Ok(rows
            .into_iter()
            .map(|r| KvResult {
                tool: "redis-benchmark",
                target: s.target.name(),
                workload: r.workload.name(),
                size: cell.size,
                clients: cell.clients,
                pipeline: cell.pipeline,
                tls,
                ops: self.a.ops,
                ops_per_s: r.rps,
                p50_us: r.p50_us,
                p99_us: r.p99_us,
                mean_us: r.mean_us,
                misses: None,
                redis_version: self.version_of(s.target),
                cpu_s: None,
                ops_per_cpu_s: None,
                shards: s.cluster.as_ref().map(|c| c.addrs.len()),
                shard_ops: None,
                moved: None,
                asked: None,
            })
            .collect())
    }
}

/// Seconds of CPU time the processes `pids` and this thread (the load's) have used so far.
fn cpu_of(pids: &[u32]) -> Result<f64> {
    let mut total =
        crate::cpu_time::this_thread().map_err(mojim::Error::io("read this thread's CPU time"))?;
    for &pid in pids {
        total += crate::cpu_time::process(pid)
            .map_err(mojim::Error::io(format!("read the CPU time of process {pid}")))?;
    }
    Ok(total.as_secs_f64())
}

/// The value size, clients and pipeline depth of a run.
struct Cell {
    size: usize,
    clients: usize,
    pipeline: usize,
}

impl Cell {
    /// The seed of a run: the same operations for every target of a cell in one round, and
    /// others in the next round (a round that drew the same ZADDs again would set every score
    /// to what it already is, and write nothing).
    fn seed(&self, workload: usize, round: usize) -> u64 {
        keys::fnv64(
            ((round as u64) << 56)
                ^ ((workload as u64) << 48)
                ^ ((self.size as u64) << 20)
                ^ ((self.clients as u64) << 10)
                ^ self.pipeline as u64,
        )
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} B, clients {}, pipeline {}", self.size, self.clients, self.pipeline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::collections::CollSource;

    /// Every target of a round draws the same operations; the next round draws others, so its
    /// ZADDs change scores again (the same draws again wrote nothing, and a round of no-op
    /// ZADDs, as fast as a read, was reported as the median).
    #[test]
    fn a_round_draws_other_zadds_than_the_round_before() {
        let cell = Cell { size: 16, clients: 1, pipeline: 1 };
        let wi = 2;
        let draws = |round| {
            let mut src = CollSource::new(Workload::Zadd, 1_000_000, cell.seed(wi, round));
            (0..100).map(|_| src.next_op(&mut None)).collect::<Vec<_>>()
        };
        assert_eq!(draws(0), draws(0), "one round's targets draw the same operations");
        assert!(draws(0).iter().zip(draws(1)).all(|(a, b)| *a != b), "round 2 repeats round 1's ZADDs");
    }
}
