//! `mojim kv cluster create | status | add-shard | remove-shard`: the Redis Cluster topology in
//! etcd, made and changed by compare-and-swap (`mojim_kv::cluster::store`); `move-slots` and
//! `rebalance` live in `kv_cluster_move`.

use clap::{Args, Subcommand};
use mojim::{Config, Error};
use mojim_kv::cluster::check::is_shard_id;
use mojim_kv::cluster::store::{ClusterStoreError, TopologyStore};
use mojim_kv::cluster::topology::{Shard, ShardNode, SlotRange, Topology, SLOTS};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const ABOUT: &str = "The Redis Cluster topology in etcd: the shards, the nodes that \
serve each, and the 16384 hash slots each owns. It lives at <[kv] cluster_prefix>/kv-cluster/topology \
in the etcd of [cluster] etcd_endpoints (coordinator = \"etcd\"), one JSON value changed only by \
compare-and-swap, its epoch one more at each change. Every `mojim kv --cluster` watches it.

A shard is given as its nodes, comma-separated, the first its primary; a node as \
NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR]: its name (--node of its mojim kv and mojim \
serve), where its mojim kv serves Redis clients when it is the primary, where its mojim serve \
listens, an optional failure domain, and where its mojim kv serves clients over TLS ([kv] \
tls_listen), if it does: a client connected over TLS is redirected there. Example: --shard \
a1/10.0.0.1:6379/10.0.0.1:7070,a2/10.0.0.2:6379/10.0.0.2:7070/tls=10.0.0.2:6380

A shard's nodes must be on different hosts (by the host of their addresses) and, when every node \
has a zone, in different zones.";

/// The configuration whose `[cluster]` names the etcd and whose `[kv] cluster_prefix` the key.
#[derive(Args)]
pub(crate) struct ConfigArgs {
    /// Configuration file.
    #[arg(long, short, default_value = "mojim.toml")]
    pub(crate) config: PathBuf,
}

/// `mojim kv cluster ...`.
#[derive(Subcommand)]
pub(crate) enum ClusterCommand {
    /// Write a new topology: the shards given, the 16384 slots spread evenly over them in
    /// contiguous ranges, in the order given. Refuses to replace one already there unless
    /// --force.
    Create(CreateArgs),
    /// Check the topology (as redis-cli --cluster check): every slot covered, each shard's
    /// slots, config epoch and primary, whether the primary answers PING, and its replication
    /// (INFO replication: its mirror's state, the groups acknowledged of those written, the
    /// lag). Exits 1 when a slot is not covered, a primary does not answer, or a primary's
    /// mirror is not online.
    Status(StatusArgs),
    /// Add a shard that owns no slots yet (move slots to it afterwards).
    AddShard(AddShardArgs),
    /// Remove a shard; refused while it owns slots (they are named).
    RemoveShard(RemoveShardArgs),
    /// Move slots to another shard while clients run: records the moves in etcd, moves each
    /// slot's keys in batches (staged on the source, where clients are answered TRYAGAIN for
    /// them, written on the target, then dropped from the stage once the target's mirror has
    /// them), then gives the slot to the target. Without --from/--to it resumes the moves
    /// recorded (after a run was cut short); --rollback gives them back.
    MoveSlots(crate::kv_cluster_move::MoveSlotsArgs),
    /// Even the shards' slot counts (e.g. after add-shard): moves slots from the shards above
    /// the mean to those below, in slot order, as move-slots does. --dry-run prints the plan.
    Rebalance(crate::kv_cluster_move::RebalanceArgs),
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// A shard: NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR] for each of its nodes,
    /// comma-separated, the primary first (repeat the flag for each shard).
    #[arg(long = "shard", required = true, value_name = "NODES")]
    shards: Vec<String>,
    /// Replace the topology already in etcd (its epoch goes on from the old one's).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Args)]
pub(crate) struct AddShardArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The shard: NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR] for each of its nodes,
    /// comma-separated, the primary first.
    #[arg(long = "shard", value_name = "NODES")]
    shard: String,
}

#[derive(Args)]
pub(crate) struct RemoveShardArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The shard's id (40 hex characters, as `status` shows), or the name of one of its nodes.
    #[arg(long = "shard", value_name = "ID_OR_NODE")]
    shard: String,
}

/// Runs one `mojim kv cluster` command.
pub(crate) fn run(command: ClusterCommand) -> mojim::Result<()> {
    match command {
        ClusterCommand::Create(a) => create(a),
        ClusterCommand::Status(a) => status(a),
        ClusterCommand::AddShard(a) => add_shard(a),
        ClusterCommand::RemoveShard(a) => remove_shard(a),
        ClusterCommand::MoveSlots(a) => crate::kv_cluster_move::move_slots(a),
        ClusterCommand::Rebalance(a) => crate::kv_cluster_move::rebalance(a),
    }
}

pub(crate) fn store(config: &ConfigArgs) -> mojim::Result<(Config, TopologyStore)> {
    let cfg = Config::load(&config.config)?;
    let store =
        mojim_kv::cluster::connect::topology_store(&cfg, "mojim kv cluster").map_err(crate::kv_error)?;
    Ok((cfg, store))
}

fn refused(e: ClusterStoreError) -> Error {
    crate::kv_error(e.into())
}

/// A new shard id: 40 random hex characters.
fn new_shard_id() -> String {
    let mut b = [0u8; 20];
    mojim_transport::random::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses `--shard`: nodes `NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR]`,
/// comma-separated, primary first.
fn parse_shard(text: &str) -> mojim::Result<Shard> {
    let mut nodes = Vec::new();
    for node in text.split(',') {
        let parts: Vec<&str> = node.trim().split('/').collect();
        let [name, kv_addr, serve_addr, rest @ ..] = parts.as_slice() else {
            return Err(Error::Config(format!(
                "--shard {text:?}: node {node:?} is not NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR] \
                 (e.g. a1/10.0.0.1:6379/10.0.0.1:7070)"
            )));
        };
        let (tls, zone): (Vec<&str>, Vec<&str>) = rest.iter().partition(|p| p.starts_with("tls="));
        if tls.len() > 1 || zone.len() > 1 {
            return Err(Error::Config(format!(
                "--shard {text:?}: node {node:?} has more than one zone or tls= address \
                 (NAME/KV_ADDR/SERVE_ADDR[/ZONE][/tls=KV_TLS_ADDR])"
            )));
        }
        nodes.push(ShardNode {
            name: (*name).to_owned(),
            kv_addr: (*kv_addr).to_owned(),
            serve_addr: (*serve_addr).to_owned(),
            zone: zone.first().map(|z| (*z).to_owned()).unwrap_or_default(),
            kv_tls_addr: tls.first().map(|t| t["tls=".len()..].to_owned()),
        });
    }
    let primary = nodes[0].name.clone();
    let shard = Shard { id: new_shard_id(), config_epoch: 1, slots: Vec::new(), nodes, primary };
    shard.check_placement().map_err(|e| Error::Config(format!("--shard {text:?}: {e}")))?;
    Ok(shard)
}

/// Slot ranges for `n` shards: 16384 / n each, the first 16384 % n one more.
fn spread(n: usize) -> Vec<SlotRange> {
    let n16 = u16::try_from(n).expect("at most 16384 shards, checked by the caller");
    let (each, extra) = (SLOTS / n16, SLOTS % n16);
    let mut start = 0;
    (0..n16)
        .map(|i| {
            let len = each + u16::from(i < extra);
            let r = SlotRange { start, end: start + len - 1 };
            start += len;
            r
        })
        .collect()
}

fn create(a: CreateArgs) -> mojim::Result<()> {
    let (_, store) = store(&a.config)?;
    if a.shards.len() > usize::from(SLOTS) {
        return Err(Error::Config(format!("{} shards is more than the {SLOTS} slots", a.shards.len())));
    }
    let mut shards = a.shards.iter().map(|s| parse_shard(s)).collect::<mojim::Result<Vec<_>>>()?;
    for (shard, range) in shards.iter_mut().zip(spread(a.shards.len())) {
        shard.slots = vec![range];
    }
    let written = store.create(Topology { epoch: 0, shards, moves: Vec::new() }, a.force).map_err(refused)?;
    println!("created the cluster topology at {} (epoch {})", store.key(), written.epoch);
    for s in &written.shards {
        let r = s.slots[0];
        println!("shard {} slots {}-{} primary {}", s.id, r.start, r.end, s.primary);
    }
    Ok(())
}

fn add_shard(a: AddShardArgs) -> mojim::Result<()> {
    let (_, store) = store(&a.config)?;
    let shard = parse_shard(&a.shard)?;
    let id = shard.id.clone();
    let written = store
        .update(|t: &mut Topology| -> Result<(), ClusterStoreError> {
            t.shards.push(shard.clone());
            Ok(())
        })
        .map_err(refused)?;
    println!("added shard {id} with no slots (epoch {})", written.epoch);
    Ok(())
}

fn remove_shard(a: RemoveShardArgs) -> mojim::Result<()> {
    let (_, store) = store(&a.config)?;
    let wanted = a.shard.as_str();
    let mut removed = String::new();
    let written = store
        .update(|t: &mut Topology| -> Result<(), ChangeError> {
            let Some(i) = find_shard(t, wanted) else {
                return Err(ChangeError::Refused(format!(
                    "no shard {wanted:?} in the topology (epoch {}): give a shard id or a node name as \
                     `mojim kv cluster status` shows them",
                    t.epoch
                )));
            };
            let s = &t.shards[i];
            if !s.slots.is_empty() {
                return Err(ChangeError::Refused(format!(
                    "shard {} still owns slots {}: move them to other shards first",
                    s.id,
                    ranges(&s.slots)
                )));
            }
            if let Some(m) = t.moves.iter().find(|m| m.from == s.id || m.to == s.id) {
                return Err(ChangeError::Refused(format!(
                    "shard {} is part of the move of slot {}: finish or undo it first",
                    s.id, m.slot
                )));
            }
            removed = t.shards.remove(i).id;
            Ok(())
        })
        .map_err(Error::from)?;
    println!("removed shard {removed} (epoch {})", written.epoch);
    Ok(())
}

/// The index of the shard `wanted` names: its id, or the name of one of its nodes.
pub(crate) fn find_shard(t: &Topology, wanted: &str) -> Option<usize> {
    t.shards.iter().position(|s| {
        if is_shard_id(wanted) {
            s.id == wanted
        } else {
            s.nodes.iter().any(|n| n.name == wanted)
        }
    })
}

/// Why a change of the topology was not made: etcd's side, or the command's own refusal.
pub(crate) enum ChangeError {
    Store(ClusterStoreError),
    Refused(String),
}

impl From<ClusterStoreError> for ChangeError {
    fn from(e: ClusterStoreError) -> ChangeError {
        ChangeError::Store(e)
    }
}

impl From<ChangeError> for Error {
    fn from(e: ChangeError) -> Error {
        match e {
            ChangeError::Store(e) => refused(e),
            ChangeError::Refused(m) => Error::Config(m),
        }
    }
}

/// `0-5460,5462` for the ranges.
pub(crate) fn ranges(slots: &[SlotRange]) -> String {
    let text: Vec<String> = slots
        .iter()
        .map(|r| if r.start == r.end { r.start.to_string() } else { format!("{}-{}", r.start, r.end) })
        .collect();
    text.join(",")
}

/// The password the shards' servers want (`MOJIM_KV_PASSWORD`, else `[kv] password`), if any.
pub(crate) fn kv_password(cfg: &Config) -> mojim::Result<Option<Vec<u8>>> {
    let password = match std::env::var_os("MOJIM_KV_PASSWORD") {
        Some(p) => p.into_encoded_bytes(),
        None => cfg.section::<mojim_kv::KvSection>()?.password.into_bytes(),
    };
    Ok((!password.is_empty()).then_some(password))
}

/// How long `status` waits for a primary's answers.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One RESP reply, as far as `status` reads them.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// `+...` or `$n` bulk text.
    Text(String),
    /// `-...`.
    Error(String),
}

/// The first whole reply in `buf` and its length, if it holds one (simple strings, errors
/// and bulk strings; anything else is given as an error naming it).
fn first_answer(buf: &[u8]) -> Option<(Answer, usize)> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&buf[1..line_end]).into_owned();
    match buf.first()? {
        b'+' => Some((Answer::Text(line), line_end + 2)),
        b'-' => Some((Answer::Error(line), line_end + 2)),
        b'$' => {
            let Ok(n) = line.parse::<usize>() else {
                return Some((Answer::Error(format!("a bulk length of {line:?}")), line_end + 2));
            };
            let body = buf.get(line_end + 2..line_end + 2 + n)?;
            buf.get(line_end + 2 + n..line_end + 4 + n)?;
            Some((Answer::Text(String::from_utf8_lossy(body).into_owned()), line_end + 4 + n))
        }
        other => Some((Answer::Error(format!("a reply of type {:?}", char::from(*other))), line_end + 2)),
    }
}

/// Sends PING and INFO replication (after AUTH with `password`, if any) to `addr`; returns
/// INFO's text once PONG came back.
fn probe(addr: &str, password: Option<&[u8]>) -> Result<String, String> {
    let a = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .next()
        .ok_or_else(|| "resolves to no address".to_owned())?;
    let mut s = TcpStream::connect_timeout(&a, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(PROBE_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut request = Vec::new();
    if let Some(p) = password {
        request.extend_from_slice(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", p.len()).as_bytes());
        request.extend_from_slice(p);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n");
    s.write_all(&request).map_err(|e| e.to_string())?;
    let mut answers = Vec::new();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let wanted = 2 + usize::from(password.is_some());
    while answers.len() < wanted {
        if let Some((answer, used)) = first_answer(&got) {
            got.drain(..used);
            if let Answer::Error(e) = &answer {
                return Err(format!("answered -{e}"));
            }
            answers.push(answer);
            continue;
        }
        let n = s.read(&mut buf).map_err(|e| format!("no PONG: {e}"))?;
        if n == 0 || got.len() > 1 << 20 {
            return Err(format!("answered {:?}", String::from_utf8_lossy(&got).trim()));
        }
        got.extend_from_slice(&buf[..n]);
    }
    let info = answers.pop();
    match (answers.pop(), info) {
        (Some(Answer::Text(pong)), Some(Answer::Text(info))) if pong == "PONG" => Ok(info),
        (pong, _) => Err(format!("answered {pong:?} to PING")),
    }
}

/// A primary's replication, from its `INFO replication`.
#[derive(Debug, PartialEq, Eq)]
struct Replication {
    /// The mirror's address ("" when unreplicated).
    mirror: String,
    /// `online`, `lost`, `degraded` or `none`.
    state: String,
    /// `sync`, `async`, ... or `unreplicated`.
    mode: String,
    /// Groups acknowledged by the mirror (the last one's sequence number).
    acked: u64,
    /// Groups written and not yet acknowledged.
    lag: u64,
}

impl Replication {
    /// Reads INFO's `mirror`, `mirror_state`, `mirror_mode`, `mirror_acked_seq` and
    /// `mirror_lag_groups`; the first one missing is named.
    fn parse(info: &str) -> Result<Replication, String> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim_end().strip_prefix(name).and_then(|v| v.strip_prefix(':')))
                .map(str::to_owned)
                .ok_or_else(|| format!("INFO replication has no {name}"))
        };
        let number = |name: &str| {
            let v = field(name)?;
            v.parse::<u64>().map_err(|_| format!("INFO replication's {name} is {v:?}, not a number"))
        };
        Ok(Replication {
            mirror: field("mirror")?,
            state: field("mirror_state")?,
            mode: field("mirror_mode")?,
            acked: number("mirror_acked_seq")?,
            lag: number("mirror_lag_groups")?,
        })
    }

    /// One line for `status`.
    fn describe(&self) -> String {
        let mirror = if self.mirror.is_empty() { "none" } else { &self.mirror };
        format!(
            "mirror {mirror} {}, mode {}, groups acknowledged {} of {} written, lag {}",
            self.state,
            self.mode,
            self.acked,
            self.acked + self.lag,
            self.lag
        )
    }
}

fn status(a: StatusArgs) -> mojim::Result<()> {
    let (cfg, store) = store(&a.config)?;
    let (t, revision) = store.read_existing().map_err(refused)?;
    let password = kv_password(&cfg)?;
    println!(
        "topology {} epoch {} (etcd revision {revision}), {} shards",
        store.key(),
        t.epoch,
        t.shards.len()
    );
    let mut unreachable = Vec::new();
    let mut unmirrored = Vec::new();
    for s in &t.shards {
        let owned: u32 = s.slots.iter().map(|r| u32::from(r.end - r.start) + 1).sum();
        let slots = if s.slots.is_empty() { "none".to_owned() } else { ranges(&s.slots) };
        println!("shard {} config_epoch {} slots {slots} ({owned} slots)", s.id, s.config_epoch);
        for n in &s.nodes {
            let zone = if n.zone.is_empty() { String::new() } else { format!(" zone {}", n.zone) };
            let tls = n.kv_tls_addr.as_ref().map(|a| format!(" tls {a}")).unwrap_or_default();
            let role = if n.name == s.primary { "primary" } else { "replica" };
            let about = format!("{role} {} kv {}{tls} serve {}{zone}", n.name, n.kv_addr, n.serve_addr);
            if n.name != s.primary {
                println!("  {about}");
                continue;
            }
            let info = match probe(&n.kv_addr, password.as_deref()) {
                Ok(info) => info,
                Err(e) => {
                    unreachable.push(format!("{} ({})", n.name, n.kv_addr));
                    println!("  {about}: UNREACHABLE: {e}");
                    continue;
                }
            };
            println!("  {about}: ok (PONG)");
            match Replication::parse(&info) {
                Ok(r) => {
                    println!("    replication: {}", r.describe());
                    if r.state != "online" {
                        unmirrored.push(format!(
                            "shard {} primary {}: mirror {} is {} (INFO replication mirror_state)",
                            s.id,
                            n.name,
                            if r.mirror.is_empty() { "none" } else { &r.mirror },
                            r.state
                        ));
                    }
                }
                Err(e) => {
                    println!("    replication: unknown: {e}");
                    unmirrored.push(format!("shard {} primary {}: {e}", s.id, n.name));
                }
            }
        }
    }
    for m in &t.moves {
        println!("moving slot {} from {} to {}", m.slot, m.from, m.to);
    }
    let gaps = t.uncovered();
    let uncovered: u32 = gaps.iter().map(|&(a, b)| u32::from(b - a) + 1).sum();
    let gaps: Vec<SlotRange> = gaps.into_iter().map(|(start, end)| SlotRange { start, end }).collect();
    let mut problems = Vec::new();
    if gaps.is_empty() {
        println!("[OK] all {SLOTS} slots covered");
    } else {
        println!("[ERR] {uncovered} slots not covered: {}", ranges(&gaps));
        problems.push(format!(
            "{uncovered} of {SLOTS} slots are not covered ({}): a client asking for a key in them gets an \
             error; give them to a shard",
            ranges(&gaps)
        ));
    }
    if !unreachable.is_empty() {
        problems.push(format!("primaries not answering PING: {}", unreachable.join(", ")));
    }
    if !unmirrored.is_empty() {
        println!("[ERR] {} primaries without their mirror", unmirrored.len());
        problems.push(format!(
            "{}: its writes have one copy; restart the mirror's mojim serve or fail over",
            unmirrored.join("; ")
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let why = format!("the cluster is not healthy: {}", problems.join("; "));
    Err(Error::Io { op: "mojim kv cluster status".into(), source: std::io::Error::other(why) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_spread_evenly_in_contiguous_ranges() {
        for n in [1, 2, 3, 7, 16384] {
            let r = spread(n);
            assert_eq!(r.len(), n);
            assert_eq!((r[0].start, r[n - 1].end), (0, SLOTS - 1));
            for w in r.windows(2) {
                assert_eq!(w[0].end + 1, w[1].start);
            }
            let lens: Vec<u16> = r.iter().map(|r| r.end - r.start + 1).collect();
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1, "{n}: {lens:?}");
        }
        assert_eq!(ranges(&spread(3)), "0-5461,5462-10922,10923-16383");
    }

    #[test]
    fn replies_and_replication_are_read() {
        assert_eq!(first_answer(b"+PONG\r\n$3\r\nab"), Some((Answer::Text("PONG".into()), 7)));
        assert_eq!(first_answer(b"$3\r\nab"), None);
        assert_eq!(first_answer(b"$3\r\nabc\r"), None);
        assert_eq!(first_answer(b"$3\r\nabc\r\n"), Some((Answer::Text("abc".into()), 9)));
        assert_eq!(first_answer(b"-NOAUTH x\r\n"), Some((Answer::Error("NOAUTH x".into()), 11)));
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_repl_offset:9\r\n\
                    mirror:10.0.0.2:7070\r\nmirror_state:online\r\nmirror_mode:sync\r\n\
                    mirror_lag_groups:3\r\nmirror_acked_seq:9\r\nepoch:2\r\n";
        let r = Replication::parse(info).unwrap();
        assert_eq!(
            r.describe(),
            "mirror 10.0.0.2:7070 online, mode sync, groups acknowledged 9 of 12 written, lag 3"
        );
        let e = Replication::parse("mirror:x\r\nmirror_state:lost\r\n").unwrap_err();
        assert!(e.contains("no mirror_mode"), "{e}");
    }

    #[test]
    fn shards_parse_and_bad_ones_are_named() {
        let s = parse_shard("a1/10.0.0.1:6379/10.0.0.1:7070/z1, a2/10.0.0.2:6379/10.0.0.2:7070/z2").unwrap();
        assert_eq!((s.primary.as_str(), s.nodes.len(), s.nodes[1].zone.as_str()), ("a1", 2, "z2"));
        assert!(is_shard_id(&s.id));
        assert_ne!(s.id, parse_shard("a/h:1/h:2").unwrap().id, "ids are random");
        assert_eq!(s.nodes[0].kv_tls_addr, None);
        let s =
            parse_shard("a1/10.0.0.1:6379/10.0.0.1:7070/tls=10.0.0.1:6380,a2/10.0.0.2:6379/10.0.0.2:7070/z2")
                .unwrap();
        assert_eq!(s.nodes[0].kv_tls_addr.as_deref(), Some("10.0.0.1:6380"));
        assert_eq!((s.nodes[0].zone.as_str(), s.nodes[1].zone.as_str()), ("", "z2"));
        let s = parse_shard("a1/h1:1/h1:2/tls=h1:3/z1").unwrap();
        assert_eq!((s.nodes[0].kv_tls_addr.as_deref(), s.nodes[0].zone.as_str()), (Some("h1:3"), "z1"));
        for (bad, says) in [
            ("a1/10.0.0.1:6379", "is not NAME/KV_ADDR/SERVE_ADDR"),
            ("a/h:1/h:2/z/x", "more than one zone or tls= address"),
            ("a/h:1/h:2/tls=h:3/tls=h:4", "more than one zone or tls= address"),
            (
                "a/10.0.0.1:1/10.0.0.1:2,b/10.0.0.1:3/10.0.0.1:4",
                "nodes a and b are on the same host 10.0.0.1",
            ),
        ] {
            let e = parse_shard(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
