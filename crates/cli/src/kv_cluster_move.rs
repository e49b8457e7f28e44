//! `mojim kv cluster move-slots | rebalance`: live slot moves between shards while clients
//! run. The moves are recorded in the topology in etcd first (the source then answers ASK for
//! the slot's keys it no longer holds, the target accepts them after ASKING); then, source by
//! source, passes over its keyspace (`SCAN`) gather the keys of its moving slots into batches,
//! each moved in three atomic groups: taken out of the source's keyspace into its stage
//! (`CLUSTER STAGEKEYS`, which answers their `DUMP` and `PEXPIRETIME`; the source answers
//! TRYAGAIN for a staged key), written on the target by one script (`RESTORE ... REPLACE
//! ABSTTL`, acknowledged once the target's mirror holds it), and dropped from the stage
//! (`CLUSTER UNSTAGEKEYS`). A key thus has one home that serves it at every moment. A slot
//! whose source holds no key, staged or not, is given to the target in one more topology
//! change. Everything the tool needs to go on is in etcd and in the sources' stages, so running
//! it again resumes whatever was cut short. One tool runs at a time: each holds the slot-move
//! lock in etcd (`mojim_kv::cluster::move_lock`) while it runs, and a second one is refused,
//! naming the first.

use crate::kv_cluster::{find_shard, kv_password, ranges, store, ChangeError, ConfigArgs};
use clap::Args;
use mojim::Error;
use mojim_kv::cluster::move_lock::{MoveLock, MoveLockError};
use mojim_kv::cluster::slot::key_slot;
use mojim_kv::cluster::store::TopologyStore;
use mojim_kv::cluster::topology::{Shard, SlotMove, SlotRange, Topology, SLOTS};
use mojim_tools::kv::client::{self, ClientError, RespClient};
use mojim_tools::kv::resp::Value;
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// How long one reply from a shard may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Buckets' worth of keys one `SCAN` of a source asks for.
const SCAN_COUNT: &str = "1000";

/// How often the progress line is written at most, besides one per slot done.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// On the target, after `ASKING`: pass the run's fence (ARGV[1], `CLUSTER MOVEFENCE`: a run a
/// later one overtook stops here, writing nothing), then `RESTORE` each key (ARGV: key,
/// absolute expiry ms or 0, payload, ...) with REPLACE and ABSTTL, and answer how many. A copy
/// the target holds already is one an earlier run wrote (no client reaches a key there while
/// the source holds or stages it): replaced.
/// One script: one atomic group on the target, acknowledged by its mirror before the reply.
const RESTORE_SCRIPT: &str = "redis.call('CLUSTER', 'MOVEFENCE', ARGV[1])
for i = 2, #ARGV, 3 do
  redis.call('RESTORE', ARGV[i], ARGV[i + 1], ARGV[i + 2], 'REPLACE', 'ABSTTL')
end
return (#ARGV - 1) / 3";

/// How the copying runs.
#[derive(Args)]
pub(crate) struct RunArgs {
    /// Keys per batch: read, written on the target and deleted on the source together.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pipeline: u32,
    /// Seconds to wait for every shard's server to take a new topology (its CLUSTER INFO
    /// cluster_current_epoch) before keys are copied.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    epoch_timeout: u64,
}

#[derive(Args)]
pub(crate) struct MoveSlotsArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The source shard: its id, or the name of one of its nodes.
    #[arg(long, value_name = "ID_OR_NODE", requires = "to")]
    from: Option<String>,
    /// The target shard: its id, or the name of one of its nodes.
    #[arg(long, value_name = "ID_OR_NODE", requires = "from")]
    to: Option<String>,
    /// The slots to move, e.g. 0-99,200 (the source must own each).
    #[arg(long, value_name = "RANGES", requires = "from", conflicts_with = "count")]
    slots: Option<String>,
    /// Move this many of the source's slots (its first ones not already moving).
    #[arg(long, requires = "from")]
    count: Option<u16>,
    /// Give every recorded move back: keys already on the target return to the source, then
    /// the slot stays with the source.
    #[arg(long, conflicts_with_all = ["from", "to", "slots", "count"])]
    rollback: bool,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args)]
pub(crate) struct RebalanceArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Print the moves that would even the shards' slot counts, and change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// Why keys could not be moved.
#[derive(Debug)]
enum MoveError {
    /// A shard's server could not be reached, or broke the connection.
    Shard { shard: String, addr: String, source: ClientError },
    /// A shard's server answered something other than what the command expects.
    Reply { addr: String, command: &'static str, got: String },
    /// A shard's server did not take the topology's epoch in time.
    Lagging { epoch: u64, behind: Vec<String>, waited: Duration },
    /// A shard of a move has no primary node in the topology.
    NoPrimary { shard: String },
    /// The slot-move lock could not be kept: another tool may run now.
    Lock(MoveLockError),
}

impl fmt::Display for MoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveError::Shard { shard, addr, source } => write!(
                f,
                "shard {shard} at {addr}: {source}; start it (or wait for its fail-over) and run `mojim kv \
                 cluster move-slots` again to resume the recorded moves"
            ),
            MoveError::Reply { addr, command, got } => write!(
                f,
                "{addr} answered {command} with {got}; the recorded moves stay in etcd: run `mojim kv cluster \
                 move-slots` again to resume, or with --rollback to give them back"
            ),
            MoveError::Lagging { epoch, behind, waited } => write!(
                f,
                "after {} s not every shard's server has taken topology epoch {epoch} (CLUSTER INFO \
                 cluster_current_epoch): {}; check that each runs and reaches etcd, then run `mojim kv cluster \
                 move-slots` again (keys are copied only once every server knows the move)",
                waited.as_secs(),
                behind.join(", ")
            ),
            MoveError::NoPrimary { shard } => {
                write!(f, "shard {shard} has no primary node in the topology; fix it in etcd first")
            }
            MoveError::Lock(e) => write!(f, "{e}"),
        }
    }
}

impl From<MoveError> for Error {
    fn from(e: MoveError) -> Error {
        Error::Io { op: "mojim kv cluster move-slots".into(), source: std::io::Error::other(e.to_string()) }
    }
}

/// `move-slots`: records the moves asked for (if any), gives recorded moves back with
/// --rollback, then runs every recorded move to its end.
pub(crate) fn move_slots(a: MoveSlotsArgs) -> mojim::Result<()> {
    let (cfg, store) = store(&a.config)?;
    set_password(&cfg)?;
    // Held until this returns, however it returns.
    let lock = take_lock(&store, "move-slots")?;
    if let (Some(from), Some(to)) = (&a.from, &a.to) {
        let written = store.update(|t: &mut Topology| -> Result<(), ChangeError> {
            let (from_i, to_i) = (shard_index(t, from)?, shard_index(t, to)?);
            let slots = match (&a.slots, a.count) {
                (Some(text), _) => parse_slots(text).map_err(ChangeError::Refused)?,
                (None, Some(n)) => first_free_slots(t, from_i, n)?,
                (None, None) => {
                    return Err(ChangeError::Refused(
                        "give the slots to move: --slots A-B[,C..] or --count N".into(),
                    ))
                }
            };
            record(t, from_i, to_i, &slots)
        })?;
        let count = written.moves.len();
        println!("recorded the moves: {count} slots moving (epoch {})", written.epoch);
    } else if a.rollback {
        turn_back(&store, &a.run, &lock)?;
    }
    Mover::new(store, &a.run, &lock).run_all()
}

/// The slot-move lock for `command`, or why another tool holds it.
fn take_lock(store: &TopologyStore, command: &str) -> mojim::Result<MoveLock> {
    MoveLock::take(store, command).map_err(|e| Error::Coordinator(e.to_string()))
}

/// `rebalance`: moves slots from the shards above the mean to those below, in slot order.
pub(crate) fn rebalance(a: RebalanceArgs) -> mojim::Result<()> {
    let (cfg, store) = store(&a.config)?;
    // A dry run changes nothing and needs no lock; a run holds it from before it reads the
    // topology until it returns.
    let lock = if a.dry_run { None } else { Some(take_lock(&store, "rebalance")?) };
    let (t, _) = store.read_existing().map_err(|e| crate::kv_error(e.into()))?;
    if !t.moves.is_empty() {
        return Err(Error::Config(format!(
            "{} slot moves are recorded (slot {} first): finish them with `mojim kv cluster move-slots` or give \
             them back with `move-slots --rollback` before rebalancing",
            t.moves.len(),
            t.moves[0].slot
        )));
    }
    let plan = balance_plan(&t);
    if plan.is_empty() {
        println!("the {} shards' slot counts are even already: nothing to move", t.shards.len());
        return Ok(());
    }
    for (from, to, slots) in &plan {
        let r = to_ranges(slots);
        println!(
            "move {} slots {} from {} to {}",
            slots.len(),
            ranges(&r),
            t.shards[*from].id,
            t.shards[*to].id
        );
    }
    if a.dry_run {
        println!("dry run: nothing changed");
        return Ok(());
    }
    set_password(&cfg)?;
    let written = store.update(|now: &mut Topology| -> Result<(), ChangeError> {
        if now.epoch != t.epoch {
            return Err(ChangeError::Refused(format!(
                "the topology changed while the plan was made (epoch {} then {}): run rebalance again",
                t.epoch, now.epoch
            )));
        }
        for (from, to, slots) in &plan {
            record(now, *from, *to, slots)?;
        }
        Ok(())
    })?;
    println!("recorded the moves: {} slots moving (epoch {})", written.moves.len(), written.epoch);
    let lock = lock.expect("taken unless a dry run, which returned above");
    Mover::new(store, &a.run, &lock).run_all()
}

fn set_password(cfg: &mojim::Config) -> mojim::Result<()> {
    if let Some(p) = kv_password(cfg)? {
        let p = String::from_utf8(p).map_err(|_| {
            Error::Config(
                "the [kv] password (or MOJIM_KV_PASSWORD) is not UTF-8; the shards' AUTH needs text".into(),
            )
        })?;
        client::set_password(Some(p));
    }
    Ok(())
}

fn shard_index(t: &Topology, wanted: &str) -> Result<usize, ChangeError> {
    find_shard(t, wanted).ok_or_else(|| {
        ChangeError::Refused(format!(
            "no shard {wanted:?} in the topology (epoch {}): give a shard id or a node name as `mojim kv \
             cluster status` shows them",
            t.epoch
        ))
    })
}

/// Parses `0-99,200`: the slots, each once, in order.
fn parse_slots(text: &str) -> Result<Vec<u16>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let bad =
            || format!("--slots {text:?}: {part:?} is not a slot or A-B range of slots 0..{}", SLOTS - 1);
        let (a, b) = match part.trim().split_once('-') {
            Some((a, b)) => (a, b),
            None => (part.trim(), part.trim()),
        };
        let (a, b): (u16, u16) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if a > b || b >= SLOTS {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The first `n` slots shard `from` owns that are not moving.
fn first_free_slots(t: &Topology, from: usize, n: u16) -> Result<Vec<u16>, ChangeError> {
    let free: Vec<u16> =
        owned(&t.shards[from]).filter(|&s| t.moving(s).is_none()).take(usize::from(n)).collect();
    if free.len() < usize::from(n) {
        return Err(ChangeError::Refused(format!(
            "shard {} owns {} slots not already moving, fewer than --count {n}",
            t.shards[from].id,
            free.len()
        )));
    }
    Ok(free)
}

fn owned(s: &Shard) -> impl Iterator<Item = u16> + '_ {
    s.slots.iter().flat_map(|r| r.start..=r.end)
}

/// Adds moves of `slots` from shard `from` to shard `to`, refusing (and naming them) slots the
/// source does not own or that are moving already.
fn record(t: &mut Topology, from: usize, to: usize, slots: &[u16]) -> Result<(), ChangeError> {
    let (src, dst) = (&t.shards[from], &t.shards[to]);
    if from == to {
        return Err(ChangeError::Refused(format!("--from and --to are the same shard {}", src.id)));
    }
    let not_owned: Vec<u16> =
        slots.iter().copied().filter(|&s| t.owner(s).is_none_or(|o| o.id != src.id)).collect();
    if !not_owned.is_empty() {
        return Err(ChangeError::Refused(format!(
            "shard {} does not own slots {}: `mojim kv cluster status` shows who does",
            src.id,
            ranges(&to_ranges(&not_owned))
        )));
    }
    let moving: Vec<u16> = slots.iter().copied().filter(|&s| t.moving(s).is_some()).collect();
    if !moving.is_empty() {
        return Err(ChangeError::Refused(format!(
            "slots {} are moving already: finish with `mojim kv cluster move-slots` or give them back with \
             --rollback first",
            ranges(&to_ranges(&moving))
        )));
    }
    let (from_id, to_id) = (src.id.clone(), dst.id.clone());
    t.moves.extend(slots.iter().map(|&slot| SlotMove {
        slot,
        from: from_id.clone(),
        to: to_id.clone(),
        rollback: false,
    }));
    Ok(())
}

/// `slots` (sorted) as inclusive ranges.
fn to_ranges(slots: &[u16]) -> Vec<SlotRange> {
    let mut out: Vec<SlotRange> = Vec::new();
    for &s in slots {
        match out.last_mut() {
            Some(r) if r.end + 1 == s => r.end = s,
            _ => out.push(SlotRange { start: s, end: s }),
        }
    }
    out
}

/// Gives `slot` from shard `from` to shard `to` (ranges kept sorted and merged), bumping both
/// shards' config epochs.
fn give_slot(t: &mut Topology, slot: u16, from: &str, to: &str) {
    for s in &mut t.shards {
        if s.id == from || s.id == to {
            let mut all: Vec<u16> = owned(s).filter(|&x| x != slot).collect();
            if s.id == to {
                all.push(slot);
                all.sort_unstable();
            }
            s.slots = to_ranges(&all);
            s.config_epoch += 1;
        }
    }
}

/// The moves that even the shards' slot counts: (from, to, slots in order) by shard index.
/// Each shard's share is 16384 / n, the first 16384 % n of the shards that hold most now one
/// more; a shard above its share gives its last slots, to the shards below theirs in order.
fn balance_plan(t: &Topology) -> Vec<(usize, usize, Vec<u16>)> {
    let n = t.shards.len();
    if n == 0 {
        return Vec::new();
    }
    let counts: Vec<usize> = t.shards.iter().map(|s| owned(s).count()).collect();
    let (each, extra) = (usize::from(SLOTS) / n, usize::from(SLOTS) % n);
    let mut by_size: Vec<usize> = (0..n).collect();
    by_size.sort_by_key(|&i| (std::cmp::Reverse(counts[i]), i));
    let mut share = vec![each; n];
    for &i in by_size.iter().take(extra) {
        share[i] += 1;
    }
    let mut surplus: Vec<(usize, Vec<u16>)> = Vec::new();
    for i in 0..n {
        if counts[i] > share[i] {
            let mine: Vec<u16> = owned(&t.shards[i]).collect();
            surplus.push((i, mine[share[i]..].to_vec()));
        }
    }
    let mut plan: Vec<(usize, usize, Vec<u16>)> = Vec::new();
    let mut give = surplus.into_iter().flat_map(|(i, slots)| slots.into_iter().map(move |s| (i, s)));
    for to in 0..n {
        for _ in counts[to]..share[to] {
            let Some((from, slot)) = give.next() else { break };
            match plan.last_mut() {
                Some((f, d, slots)) if *f == from && *d == to => slots.push(slot),
                _ => plan.push((from, to, vec![slot])),
            }
        }
    }
    plan
}

/// `--rollback`: turns every recorded move around. First, the keys a run cut short left in
/// flight (staged on the source) end their way to the target, so that each key is held by one
/// shard. Then one topology change gives each slot to its target, as a move back to its source
/// marked `rollback`, so that the keys on the target stay the ones served while they are moved
/// back the usual way. A move turned around already is left as it is (running --rollback again
/// goes on with it).
fn turn_back(store: &TopologyStore, run: &RunArgs, lock: &MoveLock) -> mojim::Result<()> {
    let (t, _) = store.read_existing().map_err(|e| crate::kv_error(e.into()))?;
    let forward: Vec<SlotMove> = t.moves.iter().filter(|m| !m.rollback).cloned().collect();
    if forward.is_empty() {
        println!("no recorded move to give back but those going back already");
        return Ok(());
    }
    let mut mover = Mover::new(store.clone(), run, lock);
    mover.wait_epoch(&t)?;
    for m in &forward {
        let (src, dst) = (mover.addr(&t, &m.from)?, mover.addr(&t, &m.to)?);
        mover.land_staged(m.slot, (&m.from, &src), (&m.to, &dst))?;
    }
    lock.check().map_err(MoveError::Lock)?;
    let written = store.update(|now: &mut Topology| -> Result<(), ChangeError> {
        for m in &forward {
            let Some(i) = now.moves.iter().position(|x| x == m) else { continue };
            give_slot(now, m.slot, &m.from, &m.to);
            let back = &mut now.moves[i];
            std::mem::swap(&mut back.from, &mut back.to);
            back.rollback = true;
        }
        Ok(())
    })?;
    println!("giving back {} slot moves (epoch {})", forward.len(), written.epoch);
    Ok(())
}

/// Copies the keys of recorded moves and ends them, while it holds the slot-move lock.
struct Mover<'l> {
    store: TopologyStore,
    lock: &'l MoveLock,
    batch: usize,
    epoch_timeout: Duration,
    clients: HashMap<String, RespClient>,
    started: Instant,
    keys: u64,
    slots_done: usize,
    slots_total: usize,
    last_print: Instant,
    /// Keys the target holds now that are still in their source's stage (shard, address,
    /// keys): dropped from it together with the next batch's staging, one group for both.
    unstage: Option<(String, String, Vec<Vec<u8>>)>,
}

impl<'l> Mover<'l> {
    fn new(store: TopologyStore, run: &RunArgs, lock: &'l MoveLock) -> Mover<'l> {
        let now = Instant::now();
        Mover {
            store,
            lock,
            batch: run.pipeline as usize,
            epoch_timeout: Duration::from_secs(run.epoch_timeout),
            clients: HashMap::new(),
            started: now,
            keys: 0,
            slots_done: 0,
            slots_total: 0,
            last_print: now,
            unstage: None,
        }
    }

    /// The kv address of shard `id`'s primary.
    fn addr(&self, t: &Topology, id: &str) -> Result<String, MoveError> {
        t.shard(id)
            .and_then(Shard::primary_node)
            .map(|n| n.kv_addr.clone())
            .ok_or_else(|| MoveError::NoPrimary { shard: id.to_owned() })
    }

    /// The connection to `addr` (shard `shard`), made on first use.
    fn client(&mut self, shard: &str, addr: &str) -> Result<&mut RespClient, MoveError> {
        if !self.clients.contains_key(addr) {
            let c = RespClient::connect(addr, REPLY_TIMEOUT).map_err(|source| MoveError::Shard {
                shard: shard.to_owned(),
                addr: addr.to_owned(),
                source,
            })?;
            self.clients.insert(addr.to_owned(), c);
        }
        Ok(self.clients.get_mut(addr).expect("inserted above"))
    }

    /// Sends the queued commands on `(shard, addr)` and returns the replies; a broken
    /// connection is dropped (and the error returned).
    fn exec(
        &mut self,
        (shard, addr): (&str, &str),
        commands: &[Vec<Vec<u8>>],
    ) -> Result<Vec<Value>, MoveError> {
        let c = self.client(shard, addr)?;
        for cmd in commands {
            let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
            c.queue(&args);
        }
        match c.exec() {
            Ok(v) => Ok(v),
            Err(source) => {
                self.clients.remove(addr);
                Err(MoveError::Shard { shard: shard.to_owned(), addr: addr.to_owned(), source })
            }
        }
    }

    fn one(
        &mut self,
        at: (&str, &str),
        command: &'static str,
        cmd: Vec<Vec<u8>>,
    ) -> Result<Value, MoveError> {
        let v = self.exec(at, &[cmd])?.pop().expect("one reply per command");
        if let Value::Error(e) = &v {
            return Err(MoveError::Reply { addr: at.1.to_owned(), command, got: format!("-{e}") });
        }
        Ok(v)
    }

    /// Waits until every shard's server answers CLUSTER INFO with `cluster_current_epoch` at
    /// least `t.epoch`.
    fn wait_epoch(&mut self, t: &Topology) -> Result<(), MoveError> {
        let t0 = Instant::now();
        loop {
            let mut behind = Vec::new();
            for s in &t.shards {
                let addr = self.addr(t, &s.id)?;
                let info = self.one((&s.id, &addr), "CLUSTER INFO", args(&[b"CLUSTER", b"INFO"]));
                let seen = info.ok().as_ref().and_then(Value::as_bytes).and_then(current_epoch);
                match seen {
                    Some(e) if e >= t.epoch => {}
                    Some(e) => behind.push(format!("{} at {addr} is at epoch {e}", s.primary)),
                    None => behind.push(format!("{} at {addr} does not answer", s.primary)),
                }
            }
            if behind.is_empty() {
                return Ok(());
            }
            if t0.elapsed() >= self.epoch_timeout {
                return Err(MoveError::Lagging { epoch: t.epoch, behind, waited: t0.elapsed() });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs every recorded move to its end: source by source, the keys of all its moving slots
    /// are moved in passes over its keyspace ([`Mover::drain`]); then each of its slots is
    /// given to its target.
    fn run_all(mut self) -> mojim::Result<()> {
        let (t, _) = self.store.read_existing().map_err(|e| crate::kv_error(e.into()))?;
        if t.moves.is_empty() {
            println!("no slot moves recorded: nothing to do");
            return Ok(());
        }
        self.slots_total = t.moves.len();
        self.wait_epoch(&t)?;
        let mut sources: Vec<&str> = t.moves.iter().map(|m| m.from.as_str()).collect();
        sources.sort_unstable();
        sources.dedup();
        for from in sources {
            let moves: Vec<&SlotMove> = t.moves.iter().filter(|m| m.from == from).collect();
            let src = self.addr(&t, from)?;
            let mut targets = HashMap::new();
            for m in &moves {
                targets.insert(m.slot, (m.to.clone(), self.addr(&t, &m.to)?));
            }
            let mut moved = self.drain((from, &src), &targets)?;
            for m in moves {
                self.lock.check().map_err(MoveError::Lock)?;
                // The stage once more, just before the slot is given: a key staged after the
                // passes (by a run frozen past its lease and woken) is not lost in it.
                let dst = &targets[&m.slot];
                *moved.entry(m.slot).or_default() +=
                    self.land_staged(m.slot, (from, &src), (&dst.0, &dst.1))?;
                self.finish(m)?;
                self.slots_done += 1;
                self.progress(Some((m.slot, moved.get(&m.slot).copied().unwrap_or(0))));
            }
        }
        let secs = self.started.elapsed().as_secs_f64();
        println!(
            "moved {} slots, {} keys in {secs:.1} s ({:.0} keys/s)",
            self.slots_done,
            self.keys,
            self.keys as f64 / secs.max(1e-3)
        );
        Ok(())
    }

    fn progress(&mut self, slot_done: Option<(u16, u64)>) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let head = match slot_done {
            Some((slot, keys)) => format!("slot {slot} moved ({keys} keys); "),
            None if self.last_print.elapsed() >= PROGRESS_EVERY => String::new(),
            None => return,
        };
        self.last_print = Instant::now();
        eprintln!(
            "{head}{} keys moved ({:.0} keys/s), {}/{} slots done",
            self.keys,
            self.keys as f64 / secs,
            self.slots_done,
            self.slots_total
        );
    }

    /// Moves every key of the slots in `targets` (slot: the target shard's id and address) from
    /// `src` until the source holds none; returns how many keys of each slot it moved.
    ///
    /// Each pass is one `SCAN` of the source's whole keyspace, the keys of the moving slots
    /// moved in batches as they are met. The source's table never moves a key between buckets
    /// and the source never gets a key of a moving slot (its commands `ASK` for a key it does
    /// not hold), so a pass lists every key of those slots that the source held from its start
    /// to its end, and a pass that meets none shows the slots empty. A pass thus costs one walk
    /// of the keyspace for all the slots, where `CLUSTER GETKEYSINSLOT` walks it once per batch.
    fn drain(
        &mut self,
        src: (&str, &str),
        targets: &HashMap<u16, (String, String)>,
    ) -> Result<HashMap<u16, u64>, MoveError> {
        let mut moved: HashMap<u16, u64> = HashMap::new();
        let mut slots: Vec<u16> = targets.keys().copied().collect();
        slots.sort_unstable();
        for slot in slots {
            let dst = &targets[&slot];
            *moved.entry(slot).or_default() += self.land_staged(slot, src, (&dst.0, &dst.1))?;
        }
        loop {
            let mut met = 0u64;
            let mut queued: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
            let mut cursor = b"0".to_vec();
            loop {
                let reply =
                    self.one(src, "SCAN", args(&[b"SCAN", &cursor, b"COUNT", SCAN_COUNT.as_bytes()]))?;
                let (next, keys) = match array(&reply, 2) {
                    Some([next, keys]) => (next.as_bytes().unwrap_or_default().to_vec(), bulks(keys)),
                    _ => return Err(reply_error(src.1, "SCAN", &reply)),
                };
                for key in keys {
                    let slot = key_slot(&key);
                    let Some(dst) = targets.get(&slot) else { continue };
                    met += 1;
                    let q = queued.entry(slot).or_default();
                    q.push(key);
                    if q.len() >= self.batch {
                        self.lock.check().map_err(MoveError::Lock)?;
                        let keys = std::mem::take(q);
                        *moved.entry(slot).or_default() += self.move_batch(&keys, src, (&dst.0, &dst.1))?;
                        self.progress(None);
                    }
                }
                if next == b"0" {
                    break;
                }
                cursor = next;
            }
            for (slot, keys) in queued.into_iter().filter(|(_, k)| !k.is_empty()) {
                self.lock.check().map_err(MoveError::Lock)?;
                let dst = &targets[&slot];
                *moved.entry(slot).or_default() += self.move_batch(&keys, src, (&dst.0, &dst.1))?;
                self.progress(None);
            }
            if met == 0 {
                self.flush_unstage()?;
                return Ok(moved);
            }
        }
    }

    /// Moves one batch of keys of one slot; returns how many reached the target (a key a client
    /// deleted, or that expired, since it was listed has nothing to move).
    fn move_batch(
        &mut self,
        keys: &[Vec<u8>],
        src: (&str, &str),
        dst: (&str, &str),
    ) -> Result<u64, MoveError> {
        // Out of the source's keyspace: from now on the source answers TRYAGAIN for them. The
        // last batch's keys leave the stage in the same request (one turn of the source's
        // event loop, so one group, where the source is the last batch's).
        let fence = self.lock.fence().to_string();
        let mut stage = args(&[b"CLUSTER", b"STAGEKEYS", fence.as_bytes()]);
        stage.extend(keys.iter().cloned());
        let staged = match self.unstage.take() {
            Some((shard, addr, landed)) if shard == src.0 && addr == src.1 => {
                let mut unstage = args(&[b"CLUSTER", b"UNSTAGEKEYS", fence.as_bytes()]);
                unstage.extend(landed);
                let mut replies = self.exec(src, &[unstage, stage])?;
                let staged = replies.pop().expect("two replies");
                if let Some(Value::Error(e)) = replies.pop() {
                    let got = format!("-{e}");
                    return Err(MoveError::Reply {
                        addr: src.1.to_owned(),
                        command: "CLUSTER UNSTAGEKEYS",
                        got,
                    });
                }
                staged
            }
            other => {
                self.unstage = other;
                self.flush_unstage()?;
                self.one(src, "CLUSTER STAGEKEYS", stage)?
            }
        };
        if let Value::Error(e) = &staged {
            return Err(MoveError::Reply {
                addr: src.1.to_owned(),
                command: "CLUSTER STAGEKEYS",
                got: format!("-{e}"),
            });
        }
        let staged = array(&staged, keys.len())
            .ok_or_else(|| reply_error(src.1, "CLUSTER STAGEKEYS", &staged))?
            .to_vec();
        let mut restore = args(&[b"EVAL", RESTORE_SCRIPT.as_bytes(), b"0", fence.as_bytes()]);
        let mut n = 0;
        for (k, v) in keys.iter().zip(&staged) {
            let (payload, at) = match v {
                Value::Bulk(None) | Value::Array(None) => continue,
                Value::Array(Some(pair)) => match pair.as_slice() {
                    [Value::Bulk(Some(payload)), Value::Int(at)] => (payload, *at),
                    _ => return Err(reply_error(src.1, "CLUSTER STAGEKEYS", v)),
                },
                _ => return Err(reply_error(src.1, "CLUSTER STAGEKEYS", v)),
            };
            restore.push(k.clone());
            restore.push(at.max(0).to_string().into_bytes());
            restore.push(payload.clone());
            n += 1;
        }
        // Onto the target: one group, held by its mirror before the reply. Only while the lock
        // is still ours: a tool frozen past its lease and woken must not write a value that
        // the next tool may have landed, and clients changed, meanwhile.
        if n > 0 {
            self.lock.check().map_err(MoveError::Lock)?;
            // ASKING: the target serves the importing slot's keys, the script's among them,
            // only then.
            let done = self.exec(dst, &[args(&[b"ASKING"]), restore])?.pop().expect("two replies");
            if done != Value::Int(n) {
                return Err(reply_error(dst.1, "EVAL (RESTORE)", &done));
            }
        }
        // Out of the stage, with the next batch's staging (or alone, [`Mover::flush_unstage`]):
        // clients are sent to the target (ASK) from then on.
        self.unstage = Some((src.0.to_owned(), src.1.to_owned(), keys.to_vec()));
        let n = n as u64;
        self.keys += n;
        Ok(n)
    }

    /// Moves on to the target the keys of `slot` that the source holds staged (a run cut short
    /// between staging and unstaging them): they are nowhere else. Returns how many.
    fn land_staged(&mut self, slot: u16, src: (&str, &str), dst: (&str, &str)) -> Result<u64, MoveError> {
        let mut moved = 0;
        loop {
            // Keys landed already leave the stage first: they are not listed again.
            self.flush_unstage()?;
            let (slot_arg, count) = (slot.to_string(), self.batch.to_string());
            let listed = self.one(
                src,
                "CLUSTER GETSTAGEDKEYS",
                args(&[b"CLUSTER", b"GETSTAGEDKEYS", slot_arg.as_bytes(), count.as_bytes()]),
            )?;
            let keys = bulks(&listed);
            if keys.is_empty() {
                return Ok(moved);
            }
            self.lock.check().map_err(MoveError::Lock)?;
            moved += self.move_batch(&keys, src, dst)?;
        }
    }

    /// Drops the keys of the last batch from their source's stage, if that was not done with a
    /// later batch's staging.
    fn flush_unstage(&mut self) -> Result<(), MoveError> {
        let Some((shard, addr, keys)) = self.unstage.take() else { return Ok(()) };
        let fence = self.lock.fence().to_string();
        let mut unstage = args(&[b"CLUSTER", b"UNSTAGEKEYS", fence.as_bytes()]);
        unstage.extend(keys);
        self.one((&shard, &addr), "CLUSTER UNSTAGEKEYS", unstage)?;
        Ok(())
    }

    /// Ends the move of `m.slot` once its source holds no key: the slot goes to the target, the
    /// move is dropped, both shards' config epochs go up.
    fn finish(&mut self, m: &SlotMove) -> mojim::Result<()> {
        self.store
            .update(|t: &mut Topology| -> Result<(), ChangeError> {
                if !t.moves.contains(m) {
                    return Err(ChangeError::Refused(format!(
                        "the move of slot {} from {} to {} is no longer recorded (the topology changed \
                         meanwhile, epoch {}): see `mojim kv cluster status`",
                        m.slot, m.from, m.to, t.epoch
                    )));
                }
                t.moves.retain(|x| x != m);
                give_slot(t, m.slot, &m.from, &m.to);
                Ok(())
            })
            .map_err(Error::from)?;
        Ok(())
    }
}

fn args(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn bulks(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::Array(Some(items)) => items.iter().filter_map(|i| i.as_bytes().map(<[u8]>::to_vec)).collect(),
        _ => Vec::new(),
    }
}

fn array(v: &Value, n: usize) -> Option<&[Value]> {
    match v {
        Value::Array(Some(items)) if items.len() == n => Some(items),
        _ => None,
    }
}

fn reply_error(addr: &str, command: &'static str, got: &Value) -> MoveError {
    let mut got = got.to_string();
    got.truncate(200);
    MoveError::Reply { addr: addr.to_owned(), command, got }
}

/// `cluster_current_epoch` of a CLUSTER INFO answer.
fn current_epoch(info: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(info).ok()?;
    text.lines().find_map(|l| l.strip_prefix("cluster_current_epoch:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_kv::cluster::topology::ShardNode;

    fn shard(n: u8, slots: &[(u16, u16)]) -> Shard {
        Shard {
            id: format!("{n:040x}"),
            config_epoch: 1,
            slots: slots.iter().map(|&(start, end)| SlotRange { start, end }).collect(),
            nodes: vec![ShardNode {
                name: format!("n{n}"),
                kv_addr: format!("127.0.0.{n}:6379"),
                serve_addr: format!("127.0.0.{n}:7070"),
                zone: String::new(),
                kv_tls_addr: None,
            }],
            primary: format!("n{n}"),
        }
    }

    #[test]
    fn slots_parse_in_order_once_and_bad_ones_are_named() {
        assert_eq!(parse_slots("5-7, 3,6,16383").unwrap(), vec![3, 5, 6, 7, 16383]);
        for bad in ["", "7-5", "16384", "1-x", "-3"] {
            let e = parse_slots(bad).unwrap_err();
            assert!(e.contains("is not a slot or A-B range"), "{bad:?}: {e}");
        }
        assert_eq!(ranges(&to_ranges(&[0, 1, 2, 5, 7, 8])), "0-2,5,7-8");
    }

    #[test]
    fn a_slot_given_keeps_ranges_merged_and_bumps_both_epochs() {
        let mut t = Topology {
            epoch: 3,
            shards: vec![shard(1, &[(0, 9)]), shard(2, &[(11, 20)]), shard(3, &[(21, 30)])],
            moves: Vec::new(),
        };
        let (a, b) = (t.shards[0].id.clone(), t.shards[1].id.clone());
        give_slot(&mut t, 9, &a, &b);
        assert_eq!(ranges(&t.shards[0].slots), "0-8");
        assert_eq!(ranges(&t.shards[1].slots), "9,11-20");
        give_slot(&mut t, 4, &a, &b);
        assert_eq!(ranges(&t.shards[0].slots), "0-3,5-8");
        assert_eq!(ranges(&t.shards[1].slots), "4,9,11-20");
        assert_eq!((t.shards[0].config_epoch, t.shards[1].config_epoch, t.shards[2].config_epoch), (3, 3, 1));
    }

    #[test]
    fn moves_are_refused_naming_the_slots() {
        let mut t = Topology {
            epoch: 1,
            shards: vec![shard(1, &[(0, 99)]), shard(2, &[(100, 16383)])],
            moves: vec![],
        };
        let refusal = |r: Result<(), ChangeError>| match r {
            Err(ChangeError::Refused(m)) => m,
            _ => panic!("not refused"),
        };
        let e = refusal(record(&mut t, 0, 1, &[98, 99, 100, 101, 200]));
        assert!(e.contains("does not own slots 100-101,200"), "{e}");
        assert!(refusal(record(&mut t, 0, 0, &[1])).contains("the same shard"));
        assert!(record(&mut t, 0, 1, &[5, 6]).is_ok());
        assert_eq!(t.moves.len(), 2);
        let e = refusal(record(&mut t, 0, 1, &[4, 5, 6, 7]));
        assert!(e.contains("slots 5-6 are moving already"), "{e}");
        assert_eq!(first_free_slots(&t, 0, 6).ok(), Some(vec![0, 1, 2, 3, 4, 7]));
        assert!(t.check().is_ok(), "the moves recorded are valid");
    }

    #[test]
    fn the_plan_evens_slot_counts_from_the_end_of_the_larger_shards() {
        let t = Topology {
            epoch: 1,
            shards: vec![shard(1, &[(0, 8191)]), shard(2, &[(8192, 16383)]), shard(3, &[])],
            moves: vec![],
        };
        let plan = balance_plan(&t);
        let shown: Vec<(usize, usize, String)> =
            plan.iter().map(|(f, d, s)| (*f, *d, ranges(&to_ranges(s)))).collect();
        assert_eq!(shown, vec![(0, 2, "5462-8191".to_owned()), (1, 2, "13653-16383".to_owned())]);
        // Applied, the counts differ by one at most, and a second plan is empty.
        let mut after = t.clone();
        for (f, d, slots) in &plan {
            let (from, to) = (after.shards[*f].id.clone(), after.shards[*d].id.clone());
            for &s in slots {
                give_slot(&mut after, s, &from, &to);
            }
        }
        let counts: Vec<usize> = after.shards.iter().map(|s| owned(s).count()).collect();
        assert_eq!(counts, vec![5462, 5461, 5461]);
        assert!(balance_plan(&after).is_empty());
        assert!(after.check().is_ok());
    }

    #[test]
    fn a_move_forward_is_stored_as_before_and_a_rollback_is_marked() {
        let forward = SlotMove { slot: 7, from: "a".into(), to: "b".into(), rollback: false };
        let text = serde_json::to_string(&forward).unwrap();
        assert_eq!(text, r#"{"slot":7,"from":"a","to":"b"}"#);
        assert_eq!(serde_json::from_str::<SlotMove>(&text).unwrap(), forward);
        let back = SlotMove { rollback: true, ..forward };
        let text = serde_json::to_string(&back).unwrap();
        assert!(text.ends_with(r#","rollback":true}"#), "{text}");
        assert_eq!(serde_json::from_str::<SlotMove>(&text).unwrap(), back);
    }

    #[test]
    fn the_current_epoch_is_read_from_cluster_info() {
        let info = b"cluster_state:ok\r\ncluster_current_epoch:17\r\ncluster_my_epoch:3\r\n";
        assert_eq!(current_epoch(info), Some(17));
        assert_eq!(current_epoch(b"cluster_state:ok\r\n"), None);
    }
}
