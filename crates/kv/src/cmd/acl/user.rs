//! One ACL user: its flags, password hashes, command rules, key and channel patterns; the
//! rules of `ACL SETUSER` applied to it one at a time, and the rules that describe it again
//! (`ACL LIST`, `ACL GETUSER`, and the record in the region).

use super::cats;
use crate::cmd::glob;
use crate::cmd::spec::{SPECS, SUBCOMMANDS};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// Words of a command bitmap: room for 511 commands and subcommands, and the last bit, set by
/// `+@all`, for commands added to a later version (Redis's "future commands").
pub const WORDS: usize = 8;
const FUTURE: usize = WORDS * 64 - 1;

/// A command or subcommand that rules name.
#[derive(Debug)]
pub struct Cmd {
    /// Lower case, `container|sub` for a subcommand.
    pub full: String,
    /// The container's id, for a subcommand.
    pub parent: Option<usize>,
    /// Its categories' bits.
    pub cats: u32,
    /// Its subcommands' ids.
    pub subs: Vec<usize>,
    /// `mojim kv` runs it; the others are Redis 7.0's commands that rules may still name
    /// (`-debug +debug|digest`), as a Redis without them would accept the rules.
    pub runs: bool,
}

/// Every command `mojim kv` runs and every subcommand it knows, then Redis 7.0's other
/// commands and subcommands, by id (the index).
pub static CMDS: LazyLock<Vec<Cmd>> = LazyLock::new(|| {
    let mut v: Vec<Cmd> = Vec::new();
    for s in SPECS.iter() {
        let full = s.name.to_ascii_lowercase();
        let cats = cats::of_name(&full).unwrap_or_else(|| cats::of_flags(s.flags));
        let id = v.len();
        v.push(Cmd { full: full.clone(), parent: None, cats, subs: Vec::new(), runs: true });
        if let Some((_, subs)) = SUBCOMMANDS.iter().find(|(c, _)| *c == s.name) {
            for (sub, _) in subs.iter() {
                let f = format!("{full}|{sub}");
                let c = cats::of_name(&f).unwrap_or(cats);
                let sid = v.len();
                v.push(Cmd { full: f, parent: Some(id), cats: c, subs: Vec::new(), runs: true });
                v[id].subs.push(sid);
            }
        }
    }
    for &(name, cats) in cats::TABLE {
        if v.iter().any(|c| c.full == name) {
            continue;
        }
        let parent = match name.split_once('|') {
            None => None,
            Some((p, _)) => match v.iter().position(|c| c.full == p) {
                Some(p) => Some(p),
                None => continue,
            },
        };
        let id = v.len();
        v.push(Cmd { full: name.to_string(), parent, cats, subs: Vec::new(), runs: false });
        if let Some(p) = parent {
            v[p].subs.push(id);
        }
    }
    assert!(v.len() < FUTURE, "{} commands and subcommands: raise WORDS", v.len());
    v
});

/// The id of a command or subcommand by its full name (any case).
pub fn id_of(full: &[u8]) -> Option<usize> {
    let lower = String::from_utf8_lossy(full).to_ascii_lowercase();
    CMDS.iter().position(|c| c.full == lower)
}

/// A key pattern and what it allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    /// The glob.
    pub pattern: Vec<u8>,
    /// Reads of the keys it matches.
    pub read: bool,
    /// Writes of the keys it matches.
    pub write: bool,
}

impl KeyPattern {
    fn describe(&self) -> Vec<u8> {
        let mut s = match (self.read, self.write) {
            (true, true) => b"~".to_vec(),
            (true, false) => b"%R~".to_vec(),
            _ => b"%W~".to_vec(),
        };
        s.extend_from_slice(&self.pattern);
        s
    }
}

/// One user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Its name.
    pub name: Vec<u8>,
    /// It may log in (`on`).
    pub on: bool,
    /// Any password logs it in (`nopass`).
    pub nopass: bool,
    /// `sanitize-payload` (true), `skip-sanitize-payload` (false), or neither.
    pub sanitize: Option<bool>,
    /// SHA-256 of each password, in the order they were added.
    pub passwords: Vec<[u8; 32]>,
    /// The commands and subcommands it may run, by id; the last bit: commands of later versions.
    pub allowed: [u64; WORDS],
    /// First arguments allowed of a command it may not run otherwise (`+select|0`).
    pub firstargs: BTreeMap<usize, Vec<Vec<u8>>>,
    /// Every key (`allkeys`, `~*`).
    pub allkeys: bool,
    /// Its key patterns (when not `allkeys`).
    pub keys: Vec<KeyPattern>,
    /// Every channel (`allchannels`, `&*`).
    pub allchannels: bool,
    /// Its channel patterns (when not `allchannels`).
    pub channels: Vec<Vec<u8>>,
}

/// Why a rule was refused: Redis's reason, after "Error in ACL SETUSER modifier '...': ".
pub type RuleError = &'static str;

const SYNTAX: RuleError = "Syntax error";
const UNKNOWN: RuleError = "Unknown command or category name in ACL";

fn hex(h: &[u8; 32]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hash(s: &[u8]) -> Result<[u8; 32], RuleError> {
    const BAD: RuleError =
        "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";
    if s.len() != 64 || !s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) {
        return Err(BAD);
    }
    let mut h = [0u8; 32];
    for (i, b) in h.iter_mut().enumerate() {
        let d = |c: u8| if c.is_ascii_digit() { c - b'0' } else { c - b'a' + 10 };
        *b = d(s[2 * i]) << 4 | d(s[2 * i + 1]);
    }
    Ok(h)
}

/// SHA-256 of a password.
pub fn hash(password: &[u8]) -> [u8; 32] {
    Sha256::digest(password).into()
}

impl User {
    /// A new user as `ACL SETUSER name` makes it: off, no password, no rights.
    pub fn new(name: &[u8]) -> User {
        User {
            name: name.to_vec(),
            on: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            allowed: [0; WORDS],
            firstargs: BTreeMap::new(),
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
        }
    }

    /// The `default` user of a server without ACL changes: on, no password, every right.
    pub fn default_user() -> User {
        let mut u = User::new(b"default");
        for r in ["on", "nopass", "~*", "&*", "+@all"] {
            u.apply(r.as_bytes()).expect("the default user's rules are valid");
        }
        u
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
        }
    }

    /// Allows or forbids a command with its subcommands.
    fn set_command(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.firstargs.remove(&id);
        for &s in &CMDS[id].subs.clone() {
            self.set_bit(s, on);
        }
    }

    fn set_category(&mut self, cat: usize, on: bool) {
        for (id, c) in CMDS.iter().enumerate() {
            if c.cats & (1 << cat) != 0 {
                self.set_bit(id, on);
                self.firstargs.remove(&id);
            }
        }
    }

    /// Applies one rule of `ACL SETUSER`.
    pub fn apply(&mut self, rule: &[u8]) -> Result<(), RuleError> {
        let lower = rule.to_ascii_lowercase();
        match lower.as_slice() {
            b"on" => self.on = true,
            b"off" => self.on = false,
            b"skip-sanitize-payload" => self.sanitize = Some(false),
            b"sanitize-payload" => self.sanitize = Some(true),
            b"nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            b"resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            b"allkeys" | b"~*" => {
                self.allkeys = true;
                self.keys.clear();
            }
            b"resetkeys" => {
                self.allkeys = false;
                self.keys.clear();
            }
            b"allchannels" | b"&*" => {
                self.allchannels = true;
                self.channels.clear();
            }
            b"resetchannels" => {
                self.allchannels = false;
                self.channels.clear();
            }
            b"allcommands" | b"+@all" => {
                self.allowed = [u64::MAX; WORDS];
                self.firstargs.clear();
            }
            b"nocommands" | b"-@all" => {
                self.allowed = [0; WORDS];
                self.firstargs.clear();
            }
            b"reset" => {
                for r in ["resetpass", "resetkeys", "resetchannels", "off", "-@all", "sanitize-payload"] {
                    self.apply(r.as_bytes())?;
                }
            }
            b"clearselectors" => {}
            _ => return self.apply_prefixed(rule),
        }
        Ok(())
    }

    fn apply_prefixed(&mut self, rule: &[u8]) -> Result<(), RuleError> {
        let (first, rest) = (rule[0], &rule[1..]);
        match first {
            b'>' => {
                let h = hash(rest);
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            b'#' => {
                let h = parse_hash(rest)?;
                if !self.passwords.contains(&h) {
                    self.passwords.push(h);
                }
                self.nopass = false;
            }
            b'<' | b'!' => {
                let h = if first == b'<' { hash(rest) } else { parse_hash(rest)? };
                let Some(i) = self.passwords.iter().position(|p| *p == h) else {
                    return Err("The password you are trying to remove from the user does not exist");
                };
                self.passwords.remove(i);
            }
            b'~' | b'%' => {
                let (read, write, pat) = if first == b'~' {
                    (true, true, rest)
                } else {
                    let tilde = rest.iter().position(|&c| c == b'~').ok_or(SYNTAX)?;
                    let (mut read, mut write) = (false, false);
                    for &c in &rest[..tilde] {
                        match c.to_ascii_uppercase() {
                            b'R' => read = true,
                            b'W' => write = true,
                            _ => return Err(SYNTAX),
                        }
                    }
                    if !read && !write {
                        return Err(SYNTAX);
                    }
                    (read, write, &rest[tilde + 1..])
                };
                if self.allkeys {
                    return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                                does not have any effect. Try 'resetkeys' to start with an empty list of patterns");
                }
                if read && write && pat == b"*" {
                    return self.apply(b"allkeys");
                }
                match self.keys.iter_mut().find(|k| k.pattern == pat) {
                    Some(k) => {
                        k.read |= read;
                        k.write |= write;
                    }
                    None => self.keys.push(KeyPattern { pattern: pat.to_vec(), read, write }),
                }
            }
            b'&' => {
                if self.allchannels {
                    return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                                and does not have any effect. Try 'resetchannels' to start with an empty list \
                                of channels");
                }
                if !self.channels.iter().any(|c| c == rest) {
                    self.channels.push(rest.to_vec());
                }
            }
            b'+' | b'-' => {
                let on = first == b'+';
                if let Some(cat) = rest.strip_prefix(b"@") {
                    let c = cats::index(cat).ok_or(UNKNOWN)?;
                    self.set_category(c, on);
                } else if let Some(id) = id_of(rest) {
                    self.set_command(id, on);
                } else {
                    // `+cmd|firstarg` of a command without subcommands, split at the last `|`
                    // as Redis does: `+config|get|x` names a subcommand's first argument.
                    let bar = rest.iter().rposition(|&c| c == b'|').ok_or(UNKNOWN)?;
                    let id = id_of(&rest[..bar]).ok_or(UNKNOWN)?;
                    if !on {
                        return Err(UNKNOWN);
                    }
                    if CMDS[id].parent.is_some() {
                        return Err("Allowing first-arg of a subcommand is not supported");
                    }
                    let arg = &rest[bar + 1..];
                    if arg.is_empty() {
                        return Err(SYNTAX);
                    }
                    if !CMDS[id].subs.is_empty() {
                        return Err(UNKNOWN);
                    }
                    if !self.bit(id) {
                        let list = self.firstargs.entry(id).or_default();
                        let lower = arg.to_ascii_lowercase();
                        if !list.contains(&lower) {
                            list.push(lower);
                        }
                    }
                }
            }
            b'(' => return Err("Selectors are not supported by mojim kv: use one set of rules per user"),
            _ => return Err(SYNTAX),
        }
        Ok(())
    }

    /// Whether it may run command `id` with first argument `arg1`.
    pub fn may_run(&self, id: usize, arg1: Option<&[u8]>) -> bool {
        if self.bit(id) {
            return true;
        }
        match (self.firstargs.get(&id), arg1) {
            (Some(list), Some(a)) => list.iter().any(|x| x.eq_ignore_ascii_case(a)),
            _ => false,
        }
    }

    /// Whether it may access `key` (to read when `read`, to write when `write`).
    pub fn may_key(&self, key: &[u8], read: bool, write: bool) -> bool {
        if self.allkeys {
            return true;
        }
        if !read && !write {
            return self.keys.iter().any(|k| glob::matches(&k.pattern, key));
        }
        let (mut need_r, mut need_w) = (read, write);
        for k in &self.keys {
            if glob::matches(&k.pattern, key) {
                need_r &= !k.read;
                need_w &= !k.write;
                if !need_r && !need_w {
                    return true;
                }
            }
        }
        false
    }

    /// Whether it may publish or subscribe to `channel` (`pattern`: a `PSUBSCRIBE` pattern,
    /// which only the same pattern allows).
    pub fn may_channel(&self, channel: &[u8], pattern: bool) -> bool {
        self.allchannels
            || self.channels.iter().any(|c| if pattern { c == channel } else { glob::matches(c, channel) })
    }

    /// Whether `password` logs it in (the check runs over every hash).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let h = hash(password);
        self.passwords.iter().fold(false, |ok, p| ok | (p == &h))
    }

    /// Its flags, as `ACL GETUSER` lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.on { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// The password hashes in hex.
    pub fn password_hexes(&self) -> Vec<String> {
        self.passwords.iter().map(hex).collect()
    }

    /// The key patterns, as `ACL GETUSER` shows them.
    pub fn describe_keys(&self) -> Vec<u8> {
        if self.allkeys {
            return b"~*".to_vec();
        }
        join(self.keys.iter().map(|k| k.describe()))
    }

    /// The channel patterns, as `ACL GETUSER` shows them.
    pub fn describe_channels(&self) -> Vec<u8> {
        if self.allchannels {
            return b"&*".to_vec();
        }
        join(self.channels.iter().map(|c| [b"&".as_slice(), c].concat()))
    }

    /// The command rules that make its bitmap: `+@all` or `-@all`, then the categories that
    /// fit best, one at a time, then single commands and first arguments.
    pub fn describe_commands(&self) -> String {
        let additive = !self.bit(FUTURE);
        let mut rules = vec![if additive { "-@all".to_string() } else { "+@all".to_string() }];
        let mut fake = User::new(b"");
        if !additive {
            fake.apply(b"+@all").expect("valid");
        }
        // What is left to explain, as a user whose applied categories are undone.
        let mut left = self.clone();
        let mut applied = [false; 32];
        loop {
            let mut best: Option<(usize, usize, usize)> = None;
            for (c, _) in cats::NAMES.iter().enumerate() {
                if applied[c] {
                    continue;
                }
                let (mut on, mut off) = (0, 0);
                for (id, cmd) in CMDS.iter().enumerate() {
                    if cmd.cats & (1 << c) != 0 {
                        if left.bit(id) {
                            on += 1
                        } else {
                            off += 1
                        }
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && best.is_none_or(|(_, d, s)| diff < d || (diff == d && same > s)) {
                    best = Some((c, diff, same));
                }
            }
            let Some((c, _, _)) = best else { break };
            applied[c] = true;
            rules.push(format!("{}@{}", if additive { '+' } else { '-' }, cats::NAMES[c]));
            fake.set_category(c, additive);
            left.set_category(c, !additive);
        }
        for (id, cmd) in CMDS.iter().enumerate() {
            let (mine, theirs) = (self.bit(id), fake.bit(id));
            if mine != theirs {
                rules.push(format!("{}{}", if mine { '+' } else { '-' }, cmd.full));
                fake.set_command(id, mine);
            }
            if !mine {
                for a in self.firstargs.get(&id).into_iter().flatten() {
                    rules.push(format!("+{}|{}", cmd.full, String::from_utf8_lossy(a)));
                }
            }
        }
        rules.join(" ")
    }

    /// Every rule that makes this user again from a new one (`ACL LIST`, without `user name`).
    pub fn describe(&self) -> Vec<u8> {
        join(self.rules().into_iter())
    }

    /// The rules of [`User::describe`], one by one (a pattern may hold a space).
    pub fn rules(&self) -> Vec<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = self.flags().iter().map(|f| f.as_bytes().to_vec()).collect();
        for h in self.password_hexes() {
            parts.push(format!("#{h}").into_bytes());
        }
        if self.allkeys {
            parts.push(b"~*".to_vec());
        } else {
            parts.extend(self.keys.iter().map(|k| k.describe()));
        }
        if self.allchannels {
            parts.push(b"&*".to_vec());
        } else {
            parts.push(b"resetchannels".to_vec());
            parts.extend(self.channels.iter().map(|c| [b"&".as_slice(), c].concat()));
        }
        parts.extend(self.describe_commands().split(' ').map(|r| r.as_bytes().to_vec()));
        parts
    }
}

fn join(parts: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(&p);
    }
    out
}

/// Splits a description into its rules (a rule holds no space, but a pattern may: the record
/// keeps rules length-prefixed, `super::record`).
#[cfg(test)]
fn rules_of(d: &[u8]) -> Vec<&[u8]> {
    d.split(|&c| c == b' ').filter(|r| !r.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &[&str]) -> User {
        let mut u = User::new(b"u");
        for r in rules {
            u.apply(r.as_bytes()).unwrap_or_else(|e| panic!("{r}: {e}"));
        }
        u
    }

    fn round_trip(u: &User) {
        let d = u.describe();
        let mut v = User::new(b"u");
        for r in rules_of(&d) {
            v.apply(r).unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(r)));
        }
        assert_eq!(&v, u, "{}", String::from_utf8_lossy(&d));
    }

    #[test]
    fn rules_describe_the_user_and_describe_back_the_same_user() {
        assert_eq!(String::from_utf8_lossy(&User::default_user().describe()), "on nopass ~* &* +@all");
        let u = user(&[">x", "%R~a*", "~b", "&c", "-@all", "+get", "+client|id"]);
        assert_eq!(u.describe_commands(), "-@all +client|id +get");
        assert_eq!(u.describe_keys(), b"%R~a* ~b");
        round_trip(&u);
        let u = user(&["+@all", "-client|kill"]);
        assert_eq!(u.describe_commands(), "+@all -client|kill");
        round_trip(&u);
        let u = user(&["-@all", "+@set", "+acl", "-smembers", "+select|0", "+select|1"]);
        assert!(u.describe_commands().starts_with("-@all +@set"), "{}", u.describe_commands());
        round_trip(&u);
        round_trip(&user(&["reset"]));
        round_trip(&user(&["on", "nopass", "allkeys", "allchannels", "+@all", "-@dangerous", "+@admin"]));
    }

    #[test]
    fn rights_follow_the_rules() {
        let u = user(&["-@all", "+@string", "-incr", "%R~r*", "%W~w*", "~rw*", "&news.*"]);
        let get = id_of(b"get").unwrap();
        assert!(u.may_run(get, None));
        assert!(!u.may_run(id_of(b"incr").unwrap(), None));
        assert!(u.may_key(b"r1", true, false) && !u.may_key(b"r1", false, true));
        assert!(u.may_key(b"w1", false, true) && !u.may_key(b"w1", true, false));
        assert!(u.may_key(b"rw1", true, true) && !u.may_key(b"x", true, false));
        assert!(u.may_channel(b"news.a", false) && !u.may_channel(b"news.*x", true));
        assert!(u.may_channel(b"news.*", true));
        let s = user(&["-@all", "+select|0"]);
        let sel = id_of(b"select").unwrap();
        assert!(s.may_run(sel, Some(b"0")) && !s.may_run(sel, Some(b"1")));
    }

    #[test]
    fn a_container_described_then_its_subcommands_that_differ() {
        // As Redis: `-client` takes every subcommand with it, so only `+client|id` follows.
        let u = user(&["+@all", "-client", "+client|id"]);
        assert_eq!(u.describe_commands(), "+@all -client +client|id");
        let u = user(&["-@all", "+config", "-config|set"]);
        assert_eq!(u.describe_commands(), "-@all +config -config|set");
    }

    #[test]
    fn rules_may_name_redis_commands_that_mojim_kv_does_not_run() {
        let u = user(&["+@all", "-debug", "+debug|digest"]);
        assert!(u.describe_commands().contains("-debug +debug|digest"), "{}", u.describe_commands());
        assert!(!super::super::commands_of(b"stream").unwrap().contains(&"xadd"), "ACL CAT lists what runs");
    }

    #[test]
    fn bad_rules_are_refused_naming_why() {
        let mut u = User::new(b"u");
        assert_eq!(u.apply(b"bogus"), Err(SYNTAX));
        assert_eq!(u.apply(b"+nosuch"), Err(UNKNOWN));
        assert_eq!(u.apply(b"+@nosuch"), Err(UNKNOWN));
        assert_eq!(u.apply(b"-select|0"), Err(UNKNOWN));
        // Split at the last `|`, as Redis: a subcommand's first argument, an unknown command.
        assert_eq!(
            u.apply(b"+config|get|appendonly"),
            Err("Allowing first-arg of a subcommand is not supported")
        );
        assert_eq!(u.apply(b"+get|key1|key2"), Err(UNKNOWN));
        assert_eq!(u.apply(b"-get|key1|key2"), Err(UNKNOWN));
        assert_eq!(u.apply(b"+config|asdf"), Err(UNKNOWN));
        assert_eq!(u.apply(b"+select|"), Err(SYNTAX));
        assert!(u.apply(b"#abc").unwrap_err().contains("64 characters"));
        assert!(u.apply(b"<nope").unwrap_err().contains("does not exist"));
        assert!(u.apply(b"%X~k").is_err());
        assert!(u.apply(b"(+get ~k)").unwrap_err().contains("Selectors"));
        u.apply(b"~*").unwrap();
        assert!(u.apply(b"~k").unwrap_err().contains("resetkeys"));
        u.apply(b">pw").unwrap();
        assert!(u.password_ok(b"pw") && !u.password_ok(b"px"));
        u.apply(b"<pw").unwrap();
        assert!(!u.password_ok(b"pw"));
    }
}
