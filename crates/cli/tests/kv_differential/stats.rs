//! What a run covered, counted as it goes and printed at the end.

/// What a run covered.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub seeds: u64,
    pub steps: u64,
    /// Requests sent to mojim kv (SCAN iterations and keyspace checks included).
    pub requests: u64,
    /// Steps of more than one request sent together.
    pub pipelines: u64,
    pub transactions: u64,
    pub exec_aborts: u64,
    pub scans: u64,
    pub checks: u64,
    pub keys_compared: u64,
    pub kv_restarts: u64,
    pub mirror_restarts: u64,
    pub both_restarts: u64,
    pub writes_across_mirror_restart: u64,
    pub over_limit_closes: u64,
    pub quits: u64,
    pub unsupported: u64,
    pub oom_refusals: u64,
    pub values_over_64k: u64,
    pub values_at_max_bulk: u64,
    /// Timed steps that waited for an expiry instant to pass.
    pub tick_waits: u64,
    /// Timed steps that ran into an expiry instant (not compared; expiring keys reset).
    pub overruns: u64,
    pub append_guarded: u64,
    /// Payloads dumped to be restored (RESTORE, FUNCTION RESTORE).
    pub payloads: u64,
    /// Payloads changed under a right checksum that Redis took and mojim kv refused.
    pub corrupt_payloads_taken: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += o.$f;)* } }
        sum!(
            seeds,
            steps,
            requests,
            pipelines,
            transactions,
            exec_aborts,
            scans,
            checks,
            keys_compared,
            kv_restarts,
            mirror_restarts,
            both_restarts,
            writes_across_mirror_restart,
            over_limit_closes,
            quits,
            unsupported,
            oom_refusals,
            values_over_64k,
            values_at_max_bulk,
            tick_waits,
            overruns,
            append_guarded,
            payloads,
            corrupt_payloads_taken
        );
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        write!(
            f,
            "{} seeds, {} steps, {} requests ({} pipelines, {} transactions of which {} aborted, {} SCANs to the \
             end, {} QUITs, {} values over 64 KiB, {} of max_bulk, {} bulk strings past it, {} commands outside \
             the subset, {} -OOM refusals); {} mojim kv restarts, {} mirror restarts ({} writes across one), {} of \
             both; {} keyspace checks ({} keys compared); {} waits for an expiry instant, {} steps that ran into \
             one; {} APPEND steps guarded; {} payloads dumped to restore ({} changed ones Redis took and mojim kv \
             refused)",
            s.seeds,
            s.steps,
            s.requests,
            s.pipelines,
            s.transactions,
            s.exec_aborts,
            s.scans,
            s.quits,
            s.values_over_64k,
            s.values_at_max_bulk,
            s.over_limit_closes,
            s.unsupported,
            s.oom_refusals,
            s.kv_restarts,
            s.mirror_restarts,
            s.writes_across_mirror_restart,
            s.both_restarts,
            s.checks,
            s.keys_compared,
            s.tick_waits,
            s.overruns,
            s.append_guarded,
            s.payloads,
            s.corrupt_payloads_taken,
        )
    }
}
