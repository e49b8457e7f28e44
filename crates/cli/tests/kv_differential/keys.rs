//! The key commands beyond DEL and RENAME, and the connection's state: COPY (DB, REPLACE),
//! MOVE, SWAPDB, RANDOMKEY, TOUCH, EXPIRETIME and PEXPIRETIME, OBJECT's subcommands, MEMORY,
//! DUMP and RESTORE, WATCH and UNWATCH, RESET.
//!
//! RESTORE is sent the payload one server's DUMP answers just before (mojim kv's and Redis's in
//! turn: each must read the other's), as it is, cut short, with a wrong checksum, or with a
//! byte of its body changed under a right checksum; the restored value is then compared, not
//! the payloads (whose bytes differ by design: docs/COMPATIBILITY.md). What describes a server
//! (RANDOMKEY's draw, MEMORY USAGE's bytes, DUMP's payload, OBJECT REFCOUNT, HELP texts) is
//! compared by its kind (`Cmp::Kind`). OBJECT IDLETIME, which mojim kv refuses for a key that
//! exists (it does not track reads), is sent for missing keys only.
//!
//! A WATCH is sent with its transaction, in one step (WATCH, maybe a command that touches a
//! watched key, MULTI ... EXEC): a watch left for later steps would meet the restarts (which
//! end the connection on one side only) and the expiry passes (each server's own).

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen, Mangle, Pool};

/// Database numbers: the usual ones, out of range, past a C `int`, not numbers.
fn db(g: &mut Gen) -> Vec<u8> {
    match g.rng.range(0, 19) {
        // `BUG_DB_INDEX_INT`: no number past a C `int`.
        0 if g.gates.db_index_int => b"16".to_vec(),
        0 => [&b"16"[..], b"-1", b"abc", b"", b"9223372036854775808", b"9999999999", b"-2147483649"]
            [g.rng.range(0, 6) as usize]
            .to_vec(),
        1..=3 => b"0".to_vec(),
        _ => g.small_int(1, 3),
    }
}

impl Gen {
    /// One key command (`which`) on key `k` of pool `p`.
    pub(super) fn key_cmd(&mut self, which: &'static str, p: Pool, k: Vec<u8>) -> Vec<Cmd> {
        let n = |g: &mut Gen| g.name(which);
        let (args, cmp, keys): (Vec<Arg>, Cmp, Vec<Vec<u8>>) = match which {
            "COPY" => {
                // A plain key's fate never hangs on an expiring one's existence.
                let dst_pool = if p == Pool::Plain { self.pool() } else { p };
                let dst = if self.rng.chance(15) { k.clone() } else { self.key(dst_pool) };
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                if self.rng.chance(3) {
                    opts.push(vec![self.name("DB"), Arg::B(db(self))]);
                }
                if self.rng.chance(2) {
                    opts.push(vec![self.name("REPLACE")]);
                }
                if self.rng.chance(30) {
                    opts.push(vec![self.name("FOO")]);
                }
                self.shuffle(&mut opts);
                let mut a = vec![n(self), b(&k), b(&dst)];
                a.extend(opts.into_iter().flatten());
                (a, Cmp::Exact, vec![k, dst])
            }
            "MOVE" => (vec![n(self), b(&k), Arg::B(db(self))], Cmp::Exact, vec![k]),
            "SWAPDB" => {
                let mut c = Cmd::new(vec![n(self), Arg::B(db(self)), Arg::B(db(self))], Cmp::Exact);
                c.timed = true;
                return vec![self.maybe_arity(c)];
            }
            "RANDOMKEY" => {
                let mut c = Cmd::new(vec![n(self)], Cmp::Kind);
                c.timed = true;
                return vec![self.maybe_arity(c)];
            }
            "TOUCH" => {
                let keys = self.keys(p, 1, 4);
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                (a, Cmp::Exact, keys)
            }
            "EXPIRETIME" => (vec![n(self), b(&k)], Cmp::Ttl { ms: false }, vec![k]),
            "PEXPIRETIME" => (vec![n(self), b(&k)], Cmp::Ttl { ms: true }, vec![k]),
            "OBJECT" => match self.rng.range(0, 19) {
                0 => (vec![n(self), self.name("FREQ"), b(&k)], Cmp::Exact, vec![k]),
                1 => (vec![n(self), self.name("REFCOUNT"), b(&k)], Cmp::Kind, vec![k]),
                2 => {
                    let none = format!("nosuch:{}", self.rng.range(0, 2)).into_bytes();
                    (vec![n(self), self.name("IDLETIME"), b(&none)], Cmp::Exact, vec![none])
                }
                3 => (vec![n(self), self.name("HELP")], Cmp::Kind, vec![]),
                4 => (vec![n(self), b(b"NOSUCH"), b(&k)], Cmp::Exact, vec![k]),
                _ => (vec![n(self), self.name("ENCODING"), b(&k)], Cmp::Exact, vec![k]),
            },
            "MEMORY" => match self.rng.range(0, 19) {
                0 => (vec![n(self), self.name("HELP")], Cmp::Kind, vec![]),
                1 if !self.gates.memory_subcommands => (vec![n(self), b(b"NOSUCH")], Cmp::Exact, vec![]),
                2 => {
                    let s = ["0", "1", "5", "-1", "abc", ""][self.rng.range(0, 5) as usize];
                    (
                        vec![n(self), self.name("USAGE"), b(&k), self.name("SAMPLES"), b(s.as_bytes())],
                        Cmp::Memory,
                        vec![k],
                    )
                }
                3 => (vec![n(self), self.name("USAGE"), b(&k), self.name("FOO")], Cmp::Exact, vec![k]),
                _ => (vec![n(self), self.name("USAGE"), b(&k)], Cmp::Memory, vec![k]),
            },
            "DUMP" => (vec![n(self), b(&k)], Cmp::Kind, vec![k]),
            "RESTORE" => return self.restore(p, k),
            "UNWATCH" => (vec![n(self)], Cmp::Exact, vec![]),
            "WATCH" => return self.watched_transaction(),
            "RESET" => (vec![n(self)], Cmp::Exact, vec![]),
            other => unreachable!("{other} is not a key command of this module"),
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        vec![self.finish(c, keys)]
    }

    /// `DUMP src` (compared by kind), then RESTORE of one server's payload of `src` into a key
    /// of the same pool, with a TTL and options.
    fn restore(&mut self, p: Pool, src: Vec<u8>) -> Vec<Cmd> {
        let mut v = Vec::new();
        if self.rng.chance(2) {
            let d = Cmd::new(vec![self.name("DUMP"), b(&src)], Cmp::Kind);
            v.push(self.finish(d, vec![src.clone()]));
        }
        let dst = if self.rng.chance(6) { src.clone() } else { self.key(p) };
        let mangle = match self.rng.range(0, 19) {
            0 => Mangle::Truncate,
            1 => Mangle::Checksum,
            _ => Mangle::None,
        };
        let payload =
            Arg::Dumped { req: vec![b"DUMP".to_vec(), src.clone()], from_redis: self.rng.chance(2), mangle };
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        let ttl = match self.rng.range(0, 9) {
            0..=4 => Arg::B(b"0".to_vec()),
            5 | 6 => match self.span(1) {
                // `BUG_RESTORE_TTL_OVERFLOW`: no TTL whose end is past the integers.
                Arg::B(t) if self.gates.restore_ttl_overflow && t == b"9223372036854775807" => {
                    Arg::B(b"9223372036854775".to_vec())
                }
                t => t,
            },
            _ => {
                opts.push(vec![self.name("ABSTTL")]);
                self.at(1, p, true)
            }
        };
        if self.rng.chance(2) {
            opts.push(vec![self.name("REPLACE")]);
        }
        if self.rng.chance(8) {
            let o = ["IDLETIME", "FREQ"][self.rng.range(0, 1) as usize];
            let x = ["0", "10", "255", "256", "-1", "abc"][self.rng.range(0, 5) as usize];
            opts.push(vec![self.name(o), b(x.as_bytes())]);
        }
        if self.rng.chance(30) {
            opts.push(vec![self.name("FOO")]);
        }
        self.shuffle(&mut opts);
        let mut a = vec![self.name("RESTORE"), b(&dst), ttl, payload];
        a.extend(opts.into_iter().flatten());
        let c = self.maybe_arity(Cmd::new(a, Cmp::Exact));
        v.push(self.finish(c, vec![src, dst]));
        v
    }

    /// RESTORE, with REPLACE, of a payload a byte of whose body is changed under a right
    /// checksum, in a step of its own: mojim kv reads a payload whole and refuses one whose value
    /// does not end where its trailer begins, which Redis may take (docs/COMPATIBILITY.md), and
    /// the key then differs until the harness deletes it.
    pub(super) fn corrupt_restore(&mut self) -> Cmd {
        let p = self.pool();
        let (src, dst) = (self.key(p), self.key(p));
        let mangle = Mangle::Corrupt { at: self.rng.next_u64(), xor: self.rng.range(1, 255) as u8 };
        let payload =
            Arg::Dumped { req: vec![b"DUMP".to_vec(), src.clone()], from_redis: self.rng.chance(2), mangle };
        let a = vec![self.name("RESTORE"), b(&dst), b(b"0"), payload, self.name("REPLACE")];
        let c = Cmd::new(a, Cmp::CorruptRestore { dst: dst.clone() });
        self.finish(c, vec![src, dst])
    }

    /// WATCH of plain keys, maybe a command (which may touch them), maybe UNWATCH, then a
    /// transaction: EXEC runs it, or answers a null if a watched key was touched.
    fn watched_transaction(&mut self) -> Vec<Cmd> {
        let keys = self.keys(Pool::Plain, 1, 3);
        let mut a = vec![self.name("WATCH")];
        a.extend(keys.iter().map(|k| b(k)));
        let mut v = vec![self.finish(Cmd::new(a, Cmp::Exact), keys)];
        if self.rng.chance(2) {
            let mut between = self.command();
            // `BUG_WATCH_TOUCHES_NAMED_KEYS`: not a command that names keys it does not change.
            const NAMING: [&str; 6] = ["DEL", "UNLINK", "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"];
            while self.gates.watch_touches_named_keys
                && between.iter().any(|c| NAMING.contains(&c.name().as_str()))
            {
                between = self.command();
            }
            v.extend(between);
        }
        if self.rng.chance(6) {
            v.push(Cmd::new(vec![self.name("UNWATCH")], Cmp::Exact));
        }
        v.extend(self.transaction());
        v
    }
}
