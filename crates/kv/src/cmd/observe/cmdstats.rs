//! Calls, time and outcomes of each command and subcommand, for `INFO commandstats`
//! (`cmdstat_<name>:calls=,usec=,usec_per_call=,rejected_calls=,failed_calls=`),
//! `INFO latencystats` and `LATENCY HISTOGRAM`.
//!
//! Each command of the table has a slot, and each subcommand of a container command (those of
//! `spec::SUBCOMMANDS`) one more, named as Redis names it (`client|list`). The slots are made
//! once; a command's histogram is allocated the first time it is called, so recording a call
//! allocates nothing.

use super::histogram::Histogram;
use crate::cmd::spec::{Spec, SPECS, SUBCOMMANDS};
use std::fmt::Write;
use std::sync::LazyLock;

/// The slots' names, and where each command's slots begin and its subcommands (by its index
/// in `SPECS`).
struct Slots {
    names: Vec<String>,
    first: Vec<usize>,
    subs: Vec<&'static [(&'static str, i32)]>,
    /// Each command's index in `SPECS` by the address of its entry, sorted: a call finds its
    /// command by comparing integers, not names.
    by_addr: Vec<(usize, usize)>,
}

static SLOTS: LazyLock<Slots> = LazyLock::new(|| {
    let (mut names, mut first, mut all_subs) = (Vec::new(), Vec::new(), Vec::new());
    for s in SPECS.iter() {
        first.push(names.len());
        let name = s.name.to_ascii_lowercase();
        let subs = SUBCOMMANDS.iter().find(|(c, _)| *c == s.name).map_or(&[][..], |(_, subs)| subs);
        for (sub, _) in subs.iter() {
            names.push(format!("{name}|{sub}"));
        }
        all_subs.push(subs);
        // The command itself (a container's: a call whose subcommand is unknown).
        names.push(name);
    }
    let mut by_addr: Vec<(usize, usize)> =
        SPECS.iter().enumerate().map(|(i, s)| (*s as *const Spec as usize, i)).collect();
    by_addr.sort_unstable();
    Slots { names, first, subs: all_subs, by_addr }
});

/// The slot of `spec` called with `sub` as its first argument.
pub fn slot(spec: &Spec, sub: Option<&[u8]>) -> usize {
    let slots = &*SLOTS;
    let addr = spec as *const Spec as usize;
    let i = match slots.by_addr.binary_search_by_key(&addr, |&(a, _)| a) {
        Ok(at) => slots.by_addr[at].1,
        // Not an entry of the table (a copy): by its name.
        Err(_) => SPECS.binary_search_by(|s| s.name.cmp(spec.name)).expect("a command of the table"),
    };
    let first = slots.first[i];
    let at = match sub {
        Some(sub) => slots.subs[i].iter().position(|(s, _)| sub.eq_ignore_ascii_case(s.as_bytes())),
        None => None,
    };
    match at {
        Some(j) => first + j,
        None => slots.first.get(i + 1).copied().unwrap_or(slots.names.len()) - 1,
    }
}

/// A slot's counts.
#[derive(Clone, Debug, Default)]
struct Entry {
    calls: u64,
    rejected: u64,
    failed: u64,
    /// The latencies of the calls that ran, and their sum (made at the first).
    latency: Option<Box<Histogram>>,
}

impl Entry {
    /// The calls' time, in nanoseconds.
    fn ns(&self) -> u64 {
        self.latency.as_ref().map_or(0, |h| h.sum_ns())
    }
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It ran and answered.
    Ok,
    /// It ran and answered an error.
    Failed,
    /// It was refused before it ran (arity, authentication, ACL, a paused subscription state).
    Rejected,
}

/// One command's counts, as the metrics listener shows them.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandRow {
    /// As `INFO commandstats` names it (`set`, `client|list`).
    pub name: &'static str,
    /// Calls that ran (`calls`).
    pub calls: u64,
    /// Their time, in nanoseconds (`usec`, in microseconds).
    pub ns: u64,
    /// Calls refused or that answered an error (`rejected_calls` + `failed_calls`).
    pub errors: u64,
    /// Calls that took less than each power of two of nanoseconds asked for.
    pub below: Vec<u64>,
}

/// Every slot's counts.
#[derive(Clone, Debug)]
pub struct CommandStats {
    entries: Vec<Entry>,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats { entries: vec![Entry::default(); SLOTS.names.len()] }
    }
}

impl CommandStats {
    /// Counts a call of slot `slot` that took `ns` nanoseconds.
    pub fn record(&mut self, slot: usize, ns: u64, ending: Ending) {
        let e = &mut self.entries[slot];
        if ending == Ending::Rejected {
            e.rejected += 1;
            return;
        }
        e.calls += 1;
        if ending == Ending::Failed {
            e.failed += 1;
        }
        e.latency.get_or_insert_with(Box::default).record(ns);
    }

    /// Forgets every count (`CONFIG RESETSTAT`); the histograms are kept, emptied.
    pub fn reset(&mut self) {
        for e in &mut self.entries {
            (e.calls, e.rejected, e.failed) = (0, 0, 0);
            if let Some(h) = &mut e.latency {
                h.reset();
            }
        }
    }

    /// The slots called or refused since the start or the last reset, by name.
    fn used_slots(&self) -> Vec<usize> {
        let names = &SLOTS.names;
        let mut order: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].calls > 0 || self.entries[i].rejected > 0)
            .collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        order
    }

    fn used(&self) -> impl Iterator<Item = (&str, &Entry)> {
        let names = &SLOTS.names;
        self.used_slots().into_iter().map(move |i| (names[i].as_str(), &self.entries[i]))
    }

    /// Writes the `# Commandstats` section: the commands called or refused since the start
    /// or the last reset, by name.
    pub fn write_commandstats(&self, t: &mut String) {
        t.push_str("# Commandstats\r\n");
        for (name, e) in self.used() {
            let usec = e.ns() / 1000;
            let per_call = if e.calls == 0 { 0.0 } else { usec as f64 / e.calls as f64 };
            let _ = write!(
                t,
                "cmdstat_{name}:calls={},usec={usec},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                e.calls, e.rejected, e.failed
            );
        }
        t.push_str("\r\n");
    }

    /// Writes the `# Latencystats` section: each called command's 50th, 99th and 99.9th
    /// percentiles, in microseconds.
    pub fn write_latencystats(&self, t: &mut String) {
        t.push_str("# Latencystats\r\n");
        for (name, e) in self.used() {
            let Some(h) = e.latency.as_ref().filter(|h| h.total() > 0) else { continue };
            let us = |p| h.percentile(p) as f64 / 1000.0;
            let _ = write!(
                t,
                "latency_percentiles_usec_{name}:p50={:.3},p99={:.3},p99.9={:.3}\r\n",
                us(50.0),
                us(99.0),
                us(99.9)
            );
        }
        t.push_str("\r\n");
    }

    /// The counts of every command called or refused since the start or the last reset, by
    /// name, for the metrics listener (the histograms as counts below powers of two of
    /// nanoseconds, [`Histogram::below_powers`] of `powers`).
    pub fn rows(&self, powers: std::ops::RangeInclusive<u32>) -> Vec<CommandRow> {
        self.used_slots()
            .into_iter()
            .map(|i| {
                let e = &self.entries[i];
                CommandRow {
                    name: SLOTS.names[i].as_str(),
                    calls: e.calls,
                    ns: e.ns(),
                    errors: e.rejected + e.failed,
                    below: match e.latency.as_deref() {
                        Some(h) => h.below_powers(powers.clone()).map(|(_, n)| n).collect(),
                        None => vec![0; powers.clone().count()],
                    },
                }
            })
            .collect()
    }

    /// The histograms of the commands called, by name (`LATENCY HISTOGRAM` with no names).
    pub fn histograms(&self) -> Vec<(&str, &Histogram)> {
        self.used()
            .filter_map(|(n, e)| e.latency.as_deref().filter(|h| h.total() > 0).map(|h| (n, h)))
            .collect()
    }

    /// The histograms of `name`'s slots (a container's: its subcommands'), if it was called.
    pub fn histograms_of(&self, name: &str) -> Vec<(&str, &Histogram)> {
        let sub = format!("{name}|");
        self.histograms().into_iter().filter(|(n, _)| *n == name || n.starts_with(&sub)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::find_spec;

    fn name(cmd: &str, sub: Option<&str>) -> &'static str {
        SLOTS.names[slot(find_spec(cmd.as_bytes()).unwrap(), sub.map(str::as_bytes))].as_str()
    }

    #[test]
    fn each_command_and_subcommand_has_its_slot_named_as_redis_names_it() {
        assert_eq!(name("SET", None), "set");
        assert_eq!(name("SET", Some("k")), "set");
        assert_eq!(name("CLIENT", Some("LiSt")), "client|list");
        assert_eq!(name("CONFIG", Some("resetstat")), "config|resetstat");
        assert_eq!(name("CLIENT", Some("nosuch")), "client");
        assert_eq!(name("CLIENT", None), "client");
        for s in SPECS.iter() {
            assert_eq!(name(s.name, None), s.name.to_ascii_lowercase());
        }
        for (c, subs) in SUBCOMMANDS {
            for (sub, _) in subs.iter() {
                assert_eq!(name(c, Some(sub)), format!("{}|{sub}", c.to_ascii_lowercase()));
            }
        }
        let mut names = SLOTS.names.clone();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SLOTS.names.len(), "every slot's name is its own");
    }
}
