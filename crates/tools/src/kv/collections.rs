//! The workloads on lists, sets and sorted sets, and the collections they run on:
//!
//! | workload | an operation | on |
//! |---|---|---|
//! | `lpush-rpop` | `LPUSH queue value`, and as the connection's next operation `RPOP queue` | one of [`QUEUES`] queues, chosen uniformly, empty at the start |
//! | `zadd` | `ZADD zset score member` | a random member of the loaded ones, a random score |
//! | `zrange` | `ZRANGE zset start start+9 WITHSCORES` | `start` uniform over the ranks |
//! | `sadd` | `SADD set member` | a member not in the set (the next number) |
//! | `sismember` | `SISMEMBER set member` | a random member of the loaded ones |
//!
//! A job queue's LPUSH and RPOP are **two operations**, each timed from its batch's write to its
//! own reply. A connection's RPOP follows its own LPUSH of the same queue, so it never finds the
//! queue empty (a nil counts as a miss: an acknowledged push lost). The value is a `--sizes`
//! value; the queues are deleted after each run.
//!
//! The sorted set `bench:zset` and the set `bench:set` hold `--members` members, `m` and 15
//! digits ([`MEMBER_BYTES`] bytes), loaded (with random integer scores) before the first run
//! that needs them, 1000 members per ZADD or SADD, pipelined ([`super::fill`]). ZADD changes a
//! member's score, so the sorted set keeps its size (a `:1`, a member that was missing, counts
//! as a miss); SADD adds members numbered from `--members` up, removed (SREM) after the run;
//! SISMEMBER's `:0` and a ZRANGE of fewer than 10 members count as misses.

use super::client::RespClient;
use super::fill::{self, PER_COMMAND};
use super::keys::Rng;
use super::probe::{self, Need};
use super::resp::{self, Reply};
use super::targets::Wait;
use super::ycsb::Workload;
use mojim::error::Result;

/// Queues of `lpush-rpop`.
pub const QUEUES: u64 = 4;
/// The sorted set of `zadd` and `zrange`.
pub const ZSET_KEY: &[u8] = b"bench:zset";
/// The set of `sadd` and `sismember`.
pub const SET_KEY: &[u8] = b"bench:set";
/// Bytes of a member's name.
pub const MEMBER_BYTES: usize = 16;
/// Members a `zrange` reads.
pub const ZRANGE_LEN: u64 = 10;
/// Scores are drawn from 0 .. this.
const SCORES: u64 = 1_000_000_000;

/// The name of queue `q`.
pub fn queue_key(q: u64) -> Vec<u8> {
    format!("bench:queue:{q}").into_bytes()
}

/// Member `n`'s name: `m` and 15 digits.
pub fn member(n: u64) -> [u8; MEMBER_BYTES] {
    let mut b = *b"m000000000000000";
    let mut v = n;
    for d in b[1..].iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    assert!(v == 0, "member {n} has more than 15 digits");
    b
}

/// One operation on a collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollOp {
    /// LPUSH of a value onto a queue.
    Lpush { queue: u64 },
    /// RPOP of a queue.
    Rpop { queue: u64 },
    /// ZADD of a member with a score.
    Zadd { member: u64, score: u64 },
    /// ZRANGE from a rank, WITHSCORES.
    Zrange { start: u64 },
    /// SADD of a member.
    Sadd { member: u64 },
    /// SISMEMBER of a member.
    Sismember { member: u64 },
}

impl std::fmt::Display for CollOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CollOp::Lpush { .. } => "LPUSH",
            CollOp::Rpop { .. } => "RPOP",
            CollOp::Zadd { .. } => "ZADD",
            CollOp::Zrange { .. } => "ZRANGE",
            CollOp::Sadd { .. } => "SADD",
            CollOp::Sismember { .. } => "SISMEMBER",
        })
    }
}

impl CollOp {
    /// Whether the operation changes the data (and is followed by the target's wait).
    pub fn writes(self) -> bool {
        !matches!(self, CollOp::Zrange { .. } | CollOp::Sismember { .. })
    }

    /// Appends the request; `value` is the value an LPUSH pushes.
    pub fn encode(self, out: &mut Vec<u8>, value: &[u8]) {
        let mut num = [0u8; 20];
        match self {
            CollOp::Lpush { queue } => resp::encode_command(out, &[b"LPUSH", &queue_key(queue), value]),
            CollOp::Rpop { queue } => resp::encode_command(out, &[b"RPOP", &queue_key(queue)]),
            CollOp::Zadd { member: m, score } => {
                resp::encode_command(out, &[b"ZADD", ZSET_KEY, itoa(&mut num, score), &member(m)])
            }
            CollOp::Zrange { start } => {
                let mut end = [0u8; 20];
                let end = itoa(&mut end, start + ZRANGE_LEN - 1);
                resp::encode_command(out, &[b"ZRANGE", ZSET_KEY, itoa(&mut num, start), end, b"WITHSCORES"])
            }
            CollOp::Sadd { member: m } => resp::encode_command(out, &[b"SADD", SET_KEY, &member(m)]),
            CollOp::Sismember { member: m } => {
                resp::encode_command(out, &[b"SISMEMBER", SET_KEY, &member(m)])
            }
        }
    }

    /// Checks a reply other than an error: `Some(true)` for a miss (see the module's
    /// documentation), `Some(false)` for a hit, `None` for a reply this operation cannot have.
    pub fn check(self, r: &Reply) -> Option<bool> {
        match (self, r) {
            (CollOp::Lpush { .. }, Reply::Int(n)) if *n >= 1 => Some(false),
            (CollOp::Rpop { .. }, Reply::Bulk(v)) => Some(v.is_none()),
            (CollOp::Zadd { .. }, Reply::Int(n)) if (0..=1).contains(n) => Some(*n == 1),
            // RESP2: member, score, member, score ...
            (CollOp::Zrange { .. }, Reply::Array(Some(a))) if a.len() as u64 <= 2 * ZRANGE_LEN => {
                Some(a.len() as u64 != 2 * ZRANGE_LEN)
            }
            (CollOp::Sadd { .. }, Reply::Int(1)) => Some(false),
            (CollOp::Sismember { .. }, Reply::Int(n)) if (0..=1).contains(n) => Some(*n == 0),
            _ => None,
        }
    }
}

/// `v` in decimal, in `buf`.
fn itoa(buf: &mut [u8; 20], mut v: u64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// The operations of one run of a workload on collections.
pub struct CollSource {
    workload: Workload,
    members: u64,
    rng: Rng,
    /// The next member SADD adds.
    next_new: u64,
}

impl CollSource {
    /// Operations of `w` (one of [`super::ycsb::COLLECTION_WORKLOADS`]) on collections of
    /// `members` loaded members.
    pub fn new(w: Workload, members: u64, seed: u64) -> CollSource {
        assert!(!w.on_strings(), "{} is a workload on strings", w.name());
        assert!(members >= ZRANGE_LEN, "checked by --members");
        CollSource { workload: w, members, rng: Rng(seed | 1), next_new: members }
    }

    /// The next operation of a connection whose next operation must be the RPOP of `*pop`, if
    /// it is set (it is then cleared; an LPUSH sets it).
    pub fn next_op(&mut self, pop: &mut Option<u64>) -> CollOp {
        let any = |rng: &mut Rng, n: u64| rng.next() % n;
        match self.workload {
            Workload::LpushRpop => match pop.take() {
                Some(queue) => CollOp::Rpop { queue },
                None => {
                    let queue = any(&mut self.rng, QUEUES);
                    *pop = Some(queue);
                    CollOp::Lpush { queue }
                }
            },
            Workload::Zadd => {
                CollOp::Zadd { member: any(&mut self.rng, self.members), score: any(&mut self.rng, SCORES) }
            }
            Workload::Zrange => CollOp::Zrange { start: any(&mut self.rng, self.members - ZRANGE_LEN + 1) },
            Workload::Sadd => {
                self.next_new += 1;
                CollOp::Sadd { member: self.next_new - 1 }
            }
            Workload::Sismember => CollOp::Sismember { member: any(&mut self.rng, self.members) },
            w => unreachable!("{} is a workload on strings", w.name()),
        }
    }

    /// Members SADD added so far.
    pub fn added(&self) -> std::ops::Range<u64> {
        self.members..self.next_new
    }

    /// A uniform draw for the caller (value offsets).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

/// Which collection a workload runs on (and which must be loaded before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collection {
    /// `bench:zset`.
    Zset,
    /// `bench:set`.
    Set,
}

/// The commands `w` needs a target to have, if it runs on a collection.
pub fn need(w: Workload) -> Option<Need> {
    let probes = match w {
        Workload::LpushRpop => probe::LIST,
        Workload::Zadd | Workload::Zrange => probe::ZSET,
        Workload::Sadd | Workload::Sismember => probe::SET,
        _ => return None,
    };
    Some(Need { flag: "--workloads", value: w.name(), probes })
}

/// The loaded collection `w` runs on, if any.
pub fn collection_of(w: Workload) -> Option<Collection> {
    match w {
        Workload::Zadd | Workload::Zrange => Some(Collection::Zset),
        Workload::Sadd | Workload::Sismember => Some(Collection::Set),
        _ => None,
    }
}

/// Loads `bench:zset` or `bench:set` with members `0 .. members` (replacing what it held),
/// then waits for the target's replica; `target` names the server in progress and errors.
pub fn load(addr: &str, target: &str, what: Collection, members: u64, wait: Wait, seed: u64) -> Result<()> {
    let mut c = RespClient::connect(addr, super::load::STALL)?;
    let key = match what {
        Collection::Zset => ZSET_KEY,
        Collection::Set => SET_KEY,
    };
    super::expect_reply(&mut c, target, &[b"DEL", key], |v| matches!(v, resp::Value::Int(_)))?;
    let mut rng = Rng(seed | 1);
    match what {
        Collection::Zset => {
            fill::variadic(&mut c, target, b"ZADD", key, 0..members, Some(&mut |_| rng.next() % SCORES))?
        }
        Collection::Set => fill::variadic(&mut c, target, b"SADD", key, 0..members, None)?,
    }
    let card: &[u8] = if what == Collection::Zset { b"ZCARD" } else { b"SCARD" };
    super::expect_reply(&mut c, target, &[card, key], |v| *v == resp::Value::Int(members as i64))?;
    super::wait_for_replica(&mut c, target, wait)
}

/// Undoes what a run of `w` added: the members SADD added, the queues' leftovers.
pub fn clean_up(addr: &str, target: &str, w: Workload, added: std::ops::Range<u64>) -> Result<()> {
    let mut c = RespClient::connect(addr, super::load::STALL)?;
    match w {
        Workload::LpushRpop => {
            let keys: Vec<Vec<u8>> = (0..QUEUES).map(queue_key).collect();
            let mut args: Vec<&[u8]> = vec![b"DEL"];
            args.extend(keys.iter().map(|k| &k[..]));
            super::expect_reply(&mut c, target, &args, |v| matches!(v, resp::Value::Int(_)))
        }
        Workload::Sadd => {
            let mut m = added.start;
            while m < added.end {
                let n = (added.end - m).min(PER_COMMAND);
                let items: Vec<[u8; MEMBER_BYTES]> = (m..m + n).map(member).collect();
                let mut args: Vec<&[u8]> = vec![b"SREM", SET_KEY];
                args.extend(items.iter().map(|x| &x[..]));
                super::expect_reply(&mut c, target, &args, |v| *v == resp::Value::Int(n as i64))?;
                m += n;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_sixteen_bytes_in_order() {
        assert_eq!(&member(0), b"m000000000000000");
        assert_eq!(&member(1_234_567), b"m000000001234567");
        assert!(member(41) < member(42) && member(99) < member(100));
        let mut b = [0u8; 20];
        assert_eq!(itoa(&mut b, 0), b"0");
        assert_eq!(itoa(&mut b, u64::MAX), u64::MAX.to_string().as_bytes());
    }

    #[test]
    fn a_connection_pops_the_queue_it_pushed_onto_next() {
        let mut src = CollSource::new(Workload::LpushRpop, 100, 3);
        let (mut a, mut b) = (None, None);
        let mut seen = [0u64; QUEUES as usize];
        for _ in 0..1000 {
            let pa = src.next_op(&mut a);
            let pb = src.next_op(&mut b);
            let CollOp::Lpush { queue: qa } = pa else { panic!("{pa:?}") };
            let CollOp::Lpush { queue: qb } = pb else { panic!("{pb:?}") };
            assert_eq!(src.next_op(&mut b), CollOp::Rpop { queue: qb });
            assert_eq!(src.next_op(&mut a), CollOp::Rpop { queue: qa });
            seen[qa as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "every queue is used: {seen:?}");
    }

    #[test]
    fn operations_stay_inside_the_loaded_members() {
        for w in [Workload::Zadd, Workload::Zrange, Workload::Sismember] {
            let mut src = CollSource::new(w, 50, 9);
            let mut none = None;
            for _ in 0..5000 {
                match src.next_op(&mut none) {
                    CollOp::Zadd { member, score } => assert!(member < 50 && score < SCORES),
                    CollOp::Zrange { start } => assert!(start + ZRANGE_LEN <= 50, "{start}"),
                    CollOp::Sismember { member } => assert!(member < 50),
                    other => panic!("{} issued {other:?}", w.name()),
                }
            }
        }
        let mut src = CollSource::new(Workload::Sadd, 50, 9);
        let ops: Vec<CollOp> = (0..3).map(|_| src.next_op(&mut None)).collect();
        assert_eq!(ops, [50, 51, 52].map(|member| CollOp::Sadd { member }));
        assert_eq!(src.added(), 50..53);
    }

    #[test]
    fn requests_are_the_commands_the_module_documents() {
        let mut out = Vec::new();
        CollOp::Zrange { start: 7 }.encode(&mut out, b"");
        CollOp::Zadd { member: 3, score: 12 }.encode(&mut out, b"");
        CollOp::Lpush { queue: 2 }.encode(&mut out, b"job");
        let mut want = Vec::new();
        resp::encode_command(&mut want, &[b"ZRANGE", b"bench:zset", b"7", b"16", b"WITHSCORES"]);
        resp::encode_command(&mut want, &[b"ZADD", b"bench:zset", b"12", b"m000000000000003"]);
        resp::encode_command(&mut want, &[b"LPUSH", b"bench:queue:2", b"job"]);
        assert_eq!(out, want);
    }

    #[test]
    fn replies_are_checked_and_misses_counted() {
        let full = Reply::Array(Some(vec![Reply::Bulk(Some(b"x")); 20]));
        let short = Reply::Array(Some(vec![Reply::Bulk(Some(b"x")); 4]));
        let z = CollOp::Zrange { start: 0 };
        assert_eq!((z.check(&full), z.check(&short)), (Some(false), Some(true)));
        let r = CollOp::Rpop { queue: 0 };
        assert_eq!(
            (r.check(&Reply::Bulk(Some(b"v"))), r.check(&Reply::Bulk(None))),
            (Some(false), Some(true))
        );
        let s = CollOp::Sismember { member: 0 };
        assert_eq!((s.check(&Reply::Int(1)), s.check(&Reply::Int(0))), (Some(false), Some(true)));
        assert_eq!(CollOp::Sadd { member: 0 }.check(&Reply::Int(0)), None, "a new member was there");
        assert_eq!(CollOp::Zadd { member: 0, score: 0 }.check(&Reply::Int(1)), Some(true));
        assert_eq!(CollOp::Lpush { queue: 0 }.check(&Reply::Simple(b"OK")), None);
    }
}
