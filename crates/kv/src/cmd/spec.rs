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
    /// Sets (`sets.rs`).
    Sets,
    /// MEMORY (`memory.rs`).
    Memory,
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
        super::sets::SPECS,
        super::memory::SPECS,
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
    spec("DISCARD", 1, TX, NO, Group::Tx),
    spec("EXEC", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO, Group::Tx),
    spec("MULTI", 1, TX, NO, Group::Tx),
    spec("QUIT", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NO, Group::Tx),
];

/// The spec of an upper-case command name.
pub fn find_spec(name: &[u8]) -> Option<&'static Spec> {
    SPECS.binary_search_by(|s| s.name.as_bytes().cmp(name)).ok().map(|i| SPECS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_found() {
        for w in SPECS.windows(2) {
            assert_ne!(w[0].name, w[1].name, "{} twice", w[0].name);
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for s in SPECS.iter() {
            assert_eq!(find_spec(s.name.as_bytes()).map(|f| f.name), Some(s.name));
        }
        assert!(find_spec(b"LPUSH").is_none());
    }
}
