//! What the server records of the commands it runs, for Redis's tooling: per command calls,
//! time and outcomes (`INFO commandstats`), latency histograms (`INFO latencystats`,
//! `LATENCY HISTOGRAM`), the slow log (`SLOWLOG`) and the latency monitor (`LATENCY LATEST`,
//! `HISTORY`, `RESET`, `DOCTOR`), the process's CPU and memory (`procstat.rs`), and the lines
//! sent to `MONITOR` clients (`monitor.rs`).
//!
//! [`record`] is called once for each call, where the error replies are counted
//! (`cmd::execute`, `EXEC` for each queued command, and a script's `redis.call`): one slot
//! lookup, a few additions and one histogram bucket; the slow log and the latency monitor copy
//! a command only when it passes their thresholds, and a line is made for monitors only while
//! there are some.

pub mod cmdstats;
pub mod histogram;
pub mod latency;
pub mod monitor;
pub mod procstat;
pub mod slowlog;
#[cfg(test)]
mod tests;

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, NO};
use super::{show, Cx, Session};
use crate::resp::Reply;
use crate::store::Mem;
pub use cmdstats::{CommandRow, CommandStats, Ending};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("LATENCY", -2, &["admin", "noscript", "loading", "stale"], NO, Group::Server),
    spec("MONITOR", 1, &["admin", "noscript", "loading", "stale"], NO, Group::Server),
    spec("SLOWLOG", -2, &["admin", "loading", "stale"], NO, Group::Server),
];

/// `MONITOR`'s refusal where the host keeps no monitors.
pub const NO_MONITOR: &str = "ERR MONITOR is not available here: this host does not stream commands to \
                              clients; use SLOWLOG (CONFIG SET slowlog-log-slower-than 0 logs every command) \
                              or INFO commandstats";

/// The records: the commands' counts and histograms, the slow log, the latency monitor.
#[derive(Clone, Debug, Default)]
pub struct Telemetry {
    /// Per command and subcommand.
    pub commands: CommandStats,
    /// The slow log.
    pub slowlog: slowlog::SlowLog,
    /// The latency monitor's events.
    pub monitor: latency::Monitor,
}

impl Telemetry {
    /// Forgets the counts and histograms (`CONFIG RESETSTAT`); the slow log and the latency
    /// monitor's samples stay, as in Redis (`SLOWLOG RESET`, `LATENCY RESET` forget them).
    pub fn reset_stats(&mut self) {
        self.commands.reset();
    }
}

/// Records a call of `spec` (`a` its arguments) by session `s` that took `ns` nanoseconds:
/// counted, shown to monitors, and for a client's own command (not a script's) offered to the
/// slow log and the latency monitor.
pub fn record<M: Mem>(cx: &mut Cx<M>, s: &Session, spec: &Spec, a: &Args, ns: u64, ending: Ending) {
    let slot = cmdstats::slot(spec, (a.len() > 1).then(|| a.get(1)));
    cx.telemetry.commands.record(slot, ns, ending);
    if ending == Ending::Rejected {
        return;
    }
    if cx.host.has_monitors() && monitor::shown(spec.name, spec.flags) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let addr = if s.in_script { "lua" } else { &s.addr };
        cx.host.feed_monitors(&monitor::line(now.as_micros(), s.db, addr, (0..a.len()).map(|i| a.get(i))));
    }
    // A script's commands are in its own entry, not logged each (as in Redis).
    if spec.flags.contains(&"skip_slowlog") || s.in_script {
        return;
    }
    let us = ns / 1000;
    let set = &cx.settings;
    let now_s = cx.now_ms / 1000;
    cx.telemetry.slowlog.offer(us, set.slowlog_slower_than_us, set.slowlog_max_len, || {
        let args = slowlog::shorten((0..a.len()).map(|i| a.get(i)));
        (now_s, args, s.addr.clone(), s.name.clone().unwrap_or_default())
    });
    cx.telemetry.monitor.offer(now_s, us / 1000, spec.flags.contains(&"fast"), set.latency_threshold_ms);
}

pub(super) fn run<M: Mem>(cx: &mut Cx<M>, s: &mut Session, a: &Args, r: &mut Reply) {
    match a.get(0) {
        n if is(n, "SLOWLOG") => slowlog_cmd(cx, a, r),
        n if is(n, "LATENCY") => latency_cmd(cx, a, r),
        // Inside a transaction it could never answer as a monitor does.
        _ if s.deny_blocking => r.error("ERR MONITOR isn't allowed for DENY BLOCKING client"),
        _ if cx.host.monitor() => {
            s.monitor = true;
            r.ok();
        }
        _ => r.error(NO_MONITOR),
    }
}

fn slowlog_cmd<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) {
    let sub = a.get(1);
    let log = &mut cx.telemetry.slowlog;
    match () {
        _ if is(sub, "GET") && a.len() <= 3 => {
            let n = if a.len() == 3 {
                match int(a.get(2)) {
                    Some(-1) => usize::MAX,
                    Some(n) if n >= 0 => n as usize,
                    _ => return r.error("ERR count should be greater than or equal to -1"),
                }
            } else {
                10
            };
            let entries: Vec<_> = log.newest(n).collect();
            r.array(entries.len());
            for e in entries {
                r.array(6);
                r.int(e.id as i64);
                r.int(e.time_s as i64);
                r.int(e.duration_us as i64);
                r.array(e.args.len());
                for x in &e.args {
                    r.bulk(x);
                }
                r.bulk(e.addr.as_bytes());
                r.bulk(&e.name);
            }
        }
        _ if is(sub, "LEN") => r.int(log.len() as i64),
        _ if is(sub, "RESET") => {
            log.reset();
            r.ok();
        }
        _ if is(sub, "HELP") => r.help(&[
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
            "HELP",
            "    Print this help.",
        ]),
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
            show(sub, 64)
        )),
    }
}

fn latency_cmd<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) {
    let sub = a.get(1);
    let t = &mut cx.telemetry;
    match () {
        _ if is(sub, "LATEST") => {
            let latest = t.monitor.latest();
            r.array(latest.len());
            for (name, time, ms, max) in latest {
                r.array(4);
                r.bulk(name.as_bytes());
                r.int(time as i64);
                r.int(ms as i64);
                r.int(max as i64);
            }
        }
        _ if is(sub, "HISTORY") => {
            let h = t.monitor.history(a.get(2));
            r.array(h.len());
            for (time, ms) in h {
                r.array(2);
                r.int(time as i64);
                r.int(ms as i64);
            }
        }
        _ if is(sub, "RESET") => r.int(t.monitor.reset(a.from(2)) as i64),
        _ if is(sub, "HISTOGRAM") => {
            let mut hs = Vec::new();
            if a.len() == 2 {
                hs = t.commands.histograms();
            } else {
                for n in a.from(2) {
                    let name = String::from_utf8_lossy(n).to_ascii_lowercase();
                    for (n, h) in t.commands.histograms_of(&name) {
                        if !hs.iter().any(|(m, _)| *m == n) {
                            hs.push((n, h));
                        }
                    }
                }
            }
            r.map(hs.len());
            for (name, h) in hs {
                r.bulk(name.as_bytes());
                r.map(2);
                r.bulk(b"calls");
                r.int(h.total() as i64);
                r.bulk(b"histogram_usec");
                let buckets = h.cumulative_usec();
                r.map(buckets.len());
                for (us, n) in buckets {
                    r.int(us as i64);
                    r.int(n as i64);
                }
            }
        }
        _ if is(sub, "DOCTOR") => {
            let text = doctor(&t.monitor, cx.settings.latency_threshold_ms);
            r.bulk(text.as_bytes());
        }
        _ if is(sub, "GRAPH") => r.error(
            "ERR mojim kv does not draw latency graphs: LATENCY HISTORY <event> gives the samples to plot",
        ),
        _ if is(sub, "HELP") => r.help(
            &[
                "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return a human readable latency analysis report.",
                "HISTORY <event>",
                "    Return time-latency samples for the <event> class.",
                "LATEST",
                "    Return the latest latency samples for all events.",
                "RESET [<event> ...]",
                "    Reset latency data of one or more <event> classes.",
                "    (default: reset all data for all event classes)",
                "HISTOGRAM [COMMAND ...]",
                "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
                "    If no commands are specified then all histograms are replied.",
                "HELP",
                "    Print this help.",
            ],
        ),
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try LATENCY HELP.",
            show(sub, 64)
        )),
    }
}

/// `LATENCY DOCTOR`'s report: whether the monitor is on, and each event's samples.
fn doctor(m: &latency::Monitor, threshold_ms: u64) -> String {
    if threshold_ms == 0 {
        return "Latency monitoring is disabled in this mojim kv instance. Use \
                \"CONFIG SET latency-monitor-threshold <milliseconds>\" to enable it.\n"
            .into();
    }
    let latest = m.latest();
    if latest.is_empty() {
        return format!(
            "No command took {threshold_ms} milliseconds or more since the monitor was last reset.\n"
        );
    }
    let mut t = format!("Commands that took {threshold_ms} milliseconds or more:\n");
    for (name, time, ms, max) in latest {
        let n = m.history(name.as_bytes()).len();
        t.push_str(&format!(
            "- {name}: {n} samples (one a second at most); latest {ms} ms at {time} (Unix time), largest {max} ms.\n"
        ));
    }
    t
}
