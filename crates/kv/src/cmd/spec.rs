//! The commands `mojim kv` answers, as `COMMAND` describes them: name, arity (negative: at
//! least), flags, and where the keys are (first, last, step; last -1: to the end).

/// One command.
#[derive(Debug)]
pub struct Spec {
    /// The name, upper case.
    pub name: &'static str,
    /// Arguments with the name: exactly this, or at least -this.
    pub arity: i32,
    /// Redis's flags.
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i32,
    /// Last key argument (-1: the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// The module that runs it.
    pub group: Group,
}

/// The command modules: which one runs a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// MULTI, EXEC, DISCARD, QUIT (`cmd::mod`).
    Tx,
    /// Strings (`strings.rs`).
    Strings,
    /// Keys of any type and databases (`keys.rs`).
    Keys,
    /// Hashes (`hashes.rs`).
    Hashes,
    /// Connection and server commands (`server.rs`).
    Server,
    /// Lists (`lists.rs`).
    Lists,
    /// Sorted sets (`zsets/`).
    Zsets,
    /// SORT and SORT_RO (`sort.rs`).
    Sort,
    /// Scripts and functions (`scripting/`).
    Scripts,
    /// Pub/sub, and RESET (`pubsub.rs`).
    PubSub,
    /// Sets (`sets.rs`).
    Sets,
    /// MEMORY (`memory.rs`).
    Memory,
    /// CLUSTER, ASKING, READONLY, READWRITE (`cluster.rs`).
    Cluster,
}

impl Group {
    /// Every group, in the order `mojim kv --help` lists them.
    pub const ALL: &[Group] = &[
        Group::Strings,
        Group::Hashes,
        Group::Lists,
        Group::Sets,
        Group::Zsets,
        Group::Keys,
        Group::Sort,
        Group::Scripts,
        Group::PubSub,
        Group::Tx,
        Group::Server,
        Group::Memory,
        Group::Cluster,
    ];

    /// The group's name in `mojim kv --help`.
    pub fn title(self) -> &'static str {
        match self {
            Group::Tx => "transactions",
            Group::Strings => "strings",
            Group::Keys => "keys and databases",
            Group::Hashes => "hashes",
            Group::Server => "connection and server",
            Group::Lists => "lists (blocking forms included)",
            Group::Sort => "sorting",
            Group::Scripts => "scripts and functions",
            Group::PubSub => "pub/sub",
            Group::Sets => "sets",
            Group::Memory => "memory",
            Group::Cluster => "cluster mode",
            Group::Zsets => "sorted sets (blocking forms included)",
        }
    }
}

/// The commands `mojim kv` runs, by group, a paragraph per group wrapped at 100 columns
/// (`mojim kv --help`).
pub fn command_list() -> String {
    let mut out = String::from("Commands:\n");
    for &g in Group::ALL {
        let mut line = format!("  {}:", g.title());
        for s in SPECS.iter().filter(|s| s.group == g) {
            if line.len() + 1 + s.name.len() > 100 {
                out.push_str(&line);
                out.push('\n');
                line = "   ".into();
            }
            line.push(' ');
            line.push_str(s.name);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

pub const W: &[&str] = &["write", "denyoom"];
pub const WF: &[&str] = &["write", "denyoom", "fast"];
pub const WD: &[&str] = &["write"];
pub const R: &[&str] = &["readonly"];
pub const RF: &[&str] = &["readonly", "fast"];
pub const A: &[&str] = &["fast"];
pub const ADM: &[&str] = &["admin", "noscript", "loading", "stale"];
pub const TX: &[&str] = &["noscript", "loading", "stale", "fast"];

/// Builds a table entry (for the command modules' tables).
pub const fn spec(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: Group,
) -> Spec {
    Spec { name, arity, flags, first_key: keys.0, last_key: keys.1, step: keys.2, group }
}

pub const NO: (i32, i32, i32) = (0, 0, 0);
pub const ONE: (i32, i32, i32) = (1, 1, 1);
pub const ALL: (i32, i32, i32) = (1, -1, 1);
pub const PAIRS: (i32, i32, i32) = (1, -1, 2);

/// Every command, sorted by name: the tables of the command modules, put together.
pub static SPECS: std::sync::LazyLock<Vec<&'static Spec>> = std::sync::LazyLock::new(|| {
    let mut all: Vec<&'static Spec> = [
        super::strings::SPECS,
        super::keys::SPECS,
        super::hashes::SPECS,
        super::server::SPECS,
        super::lists::SPECS,
        super::zsets::SPECS,
        super::sort::SPECS,
        super::scripting::SPECS,
        super::pubsub::SPECS,
        super::sets::SPECS,
        super::memory::SPECS,
        super::observe::SPECS,
        super::cluster::SPECS,
        TX_SPECS,
    ]
    .iter()
    .flat_map(|t| t.iter())
    .collect();
    all.sort_by_key(|s| s.name);
    all
});

/// The transaction and connection-state commands (run by `cmd::mod` itself).
const TX_SPECS: &[Spec] = &[
    spec("UNWATCH", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO, Group::Tx),
    spec("WATCH", -2, &["noscript", "loading", "stale", "fast", "allow_busy"], ALL, Group::Tx),
    spec("DISCARD", 1, TX, NO, Group::Tx),
    spec("EXEC", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO, Group::Tx),
    spec("MULTI", 1, TX, NO, Group::Tx),
    spec("QUIT", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NO, Group::Tx),
];

/// The subcommands of the container commands, with Redis 7.0's arities (the name and the
/// subcommand included): a client's call is checked against them before it runs or is queued,
/// as Redis checks them. A subcommand listed here that `mojim kv` does not implement is refused
/// when it runs, naming it.
pub const SUBCOMMANDS: &[(&str, &[(&str, i32)])] = &[
    (
        "ACL",
        &[
            ("cat", -2),
            ("deluser", -3),
            ("dryrun", -4),
            ("genpass", -2),
            ("getuser", 3),
            ("help", 2),
            ("list", 2),
            ("load", 2),
            ("log", -2),
            ("save", 2),
            ("setuser", -3),
            ("users", 2),
            ("whoami", 2),
        ],
    ),
    (
        "CLIENT",
        &[
            ("caching", 3),
            ("getname", 2),
            ("getredir", 2),
            ("help", 2),
            ("id", 2),
            ("info", 2),
            ("kill", -3),
            ("list", -2),
            ("no-evict", 3),
            ("no-touch", 3),
            ("pause", -3),
            ("reply", 3),
            ("setinfo", 4),
            ("setname", 3),
            ("tracking", -3),
            ("trackinginfo", 2),
            ("unblock", -3),
            ("unpause", 2),
        ],
    ),
    (
        "COMMAND",
        &[
            ("count", 2),
            ("docs", -2),
            ("getkeys", -4),
            ("getkeysandflags", -4),
            ("help", 2),
            ("info", -2),
            ("list", -2),
        ],
    ),
    ("CLUSTER", super::cluster::SUBCOMMANDS),
    ("CONFIG", &[("get", -3), ("help", 2), ("resetstat", 2), ("rewrite", 2), ("set", -4)]),
    (
        "FUNCTION",
        &[
            ("delete", 3),
            ("dump", 2),
            ("flush", -2),
            ("help", 2),
            ("kill", 2),
            ("list", -2),
            ("load", -3),
            ("restore", -3),
            ("stats", 2),
        ],
    ),
    (
        "LATENCY",
        &[
            ("doctor", 2),
            ("graph", 3),
            ("help", 2),
            ("histogram", -2),
            ("history", 3),
            ("latest", 2),
            ("reset", -2),
        ],
    ),
    ("MEMORY", &[("doctor", 2), ("help", 2), ("malloc-stats", 2), ("purge", 2), ("stats", 2), ("usage", -3)]),
    ("SLOWLOG", &[("get", -2), ("help", 2), ("len", 2), ("reset", 2)]),
    ("SCRIPT", &[("debug", 3), ("exists", -3), ("flush", -2), ("help", 2), ("kill", 2), ("load", 3)]),
    ("OBJECT", &[("encoding", 3), ("freq", 3), ("help", 2), ("idletime", 3), ("refcount", 3)]),
    ("PUBSUB", super::pubsub::PUBSUB_SUBCOMMANDS),
    (
        "SENTINEL",
        &[
            ("ckquorum", 3),
            ("config", -3),
            ("debug", -2),
            ("failover", 3),
            ("flushconfig", 2),
            ("get-master-addr-by-name", 3),
            ("help", 2),
            ("info-cache", -3),
            ("is-master-down-by-addr", 6),
            ("master", 3),
            ("masters", 2),
            ("monitor", 6),
            ("myid", 2),
            ("pending-scripts", 2),
            ("remove", 3),
            ("replicas", 3),
            ("reset", 3),
            ("sentinels", 3),
            ("set", -5),
            ("simulate-failure", -3),
            ("slaves", 3),
        ],
    ),
];

/// Checks a container command's subcommand and its arity, as Redis does before a command runs
/// or is queued; the error to answer otherwise.
pub fn check_subcommand(name: &str, argc: usize, sub: Option<&[u8]>) -> Result<(), String> {
    let Some((_, subs)) = SUBCOMMANDS.iter().find(|(c, _)| *c == name) else { return Ok(()) };
    let Some(sub) = sub else { return Ok(()) };
    let Some((s, arity)) = subs.iter().find(|(s, _)| sub.eq_ignore_ascii_case(s.as_bytes())) else {
        let shown = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
        return Err(format!("ERR unknown subcommand '{shown}'. Try {name} HELP."));
    };
    let n = argc as i32;
    if (*arity > 0 && n != *arity) || (*arity < 0 && n < -*arity) {
        return Err(format!("ERR wrong number of arguments for '{}|{s}' command", name.to_ascii_lowercase()));
    }
    Ok(())
}

/// The spec of an upper-case command name.
pub fn find_spec(name: &[u8]) -> Option<&'static Spec> {
    SPECS.binary_search_by(|s| s.name.as_bytes().cmp(name)).ok().map(|i| SPECS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_is_listed_for_help() {
        for s in SPECS.iter() {
            assert!(
                Group::ALL.contains(&s.group),
                "{}'s group {:?} is missing from Group::ALL",
                s.name,
                s.group
            );
        }
        assert!(command_list().contains(" LPUSH "));
    }

    #[test]
    fn sorted_and_found() {
        for w in SPECS.windows(2) {
            assert_ne!(w[0].name, w[1].name, "{} twice", w[0].name);
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for s in SPECS.iter() {
            assert_eq!(find_spec(s.name.as_bytes()).map(|f| f.name), Some(s.name));
        }
        assert!(find_spec(b"NOSUCHCOMMAND").is_none());
    }
}
