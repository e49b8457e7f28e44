//! The differential test of `mojim kv` against a real `redis-server`: seeded random command
//! sequences, sent to both side by side, and the replies compared.
//!
//! The sequences (kv_differential/gen.rs) use a small key space, so that commands collide;
//! values of every size from empty to `[kv] max_bulk` (1 MiB here, Redis's
//! `proto-max-bulk-len` the same), binary and text; every command of mojim kv's table (a test
//! fails on one that is neither sent nor left out with its reason, `coverage::LEFT_OUT`) with
//! valid and invalid arguments (wrong arity, wrong type, bad numbers, bad options, odd cases of
//! the names): SORT of lists, sets and sorted sets by weights and fields, DUMP payloads of one
//! server restored on both (as they are, cut, or changed under a right checksum), scripts and
//! functions that call commands on the test's keys; pipelines; MULTI/EXEC/DISCARD with commands refused while queued and errors at run
//! time; FLUSHALL/FLUSHDB; expiries, absolute times chosen by the harness for the keys that
//! expire while it runs; HELLO 2/3; QUIT; SCAN iterated to the end; a bulk string past the
//! limit (both servers close the connection); Redis commands outside the subset (mojim kv
//! only). Between steps, at points where every request sent has been answered, mojim kv is
//! killed with SIGKILL and restarted, and so is its mirror (alone, both, and while a pipeline
//! of writes waits for it); after each, both whole keyspaces are compared, so every
//! acknowledged write must be there, and mojim kv must start. A second phase runs in a small
//! region, filled until writes get `-OOM` and kept there.
//!
//! Replies are compared exactly, but for the deliberate differences in `DELIBERATE`, each with
//! its reason. Known bugs of mojim kv that this test found are in `KNOWN_BUGS`: each one's case
//! is gated until it is fixed (`MOJIM_TEST_KNOWN_BUGS=1` runs them all, and the test fails;
//! `MOJIM_TEST_KNOWN_BUGS=BUG_SET_OPTIONS,...` runs those).
//!
//! Size: `MOJIM_TEST_SEED` (a number, or several separated by commas) picks the seeds, else
//! `SEEDS`; `MOJIM_TEST_OPS` the steps per seed (default `STEPS`, `OOM_STEPS`). A failure
//! prints the seed, the step, the requests, both replies and the steps before.

#[path = "kv_differential/clock.rs"]
mod clock;
mod common;
#[path = "kv_differential/compare.rs"]
mod compare;
#[path = "kv_differential/coverage.rs"]
mod coverage;
#[path = "kv_differential/gen.rs"]
mod gen;
#[path = "kv_differential/harness.rs"]
mod harness;
#[path = "kv_differential/redis.rs"]
mod redis;
#[path = "kv_differential/resp.rs"]
mod resp;
#[path = "kv_differential/stats.rs"]
mod stats;

use gen::{Gates, Mode, MAX_BULK};
use harness::{Harness, Options};
use redis::RedisServer;
use stats::Stats;
use std::collections::BTreeSet;
use std::time::Instant;

/// Where `mojim kv` and Redis may answer differently, and why. Every other reply is compared
/// exactly, and an unexplained difference fails the test.
const DELIBERATE: &[(&str, &str)] = &[
    (
        "order of KEYS, HKEYS, HVALS, HGETALL",
        "Redis leaves it unspecified: compared as sets (HGETALL as field/value pairs)",
    ),
    (
        "order of SMEMBERS, SINTER, SUNION, SDIFF, and of SPOP's and SRANDMEMBER's members when they return the \
         whole set",
        "Redis leaves it unspecified (its dictionary's order): compared as sets",
    ),
    (
        "which members SRANDMEMBER draws",
        "each server's own random draw: the same number of members (distinct for a positive count); SPOP, whose \
         draw would change the set, is sent only with counts that take none or all of it, or to keys that hold \
         no set",
    ),
    (
        "SSCAN's cursors",
        "each server's own: SSCAN is sent from cursor 0 with a COUNT larger than any set here (one page, cursor \
         0, on both; the members compared as sets), or with a cursor or option both refuse",
    ),
    (
        "SCAN's cursors and pages",
        "each server's own (mojim kv walks its buckets): SCAN is iterated from 0 to the end on each, with the \
         same options, and the sets of keys compared; only 0 and the server's own cursors are sent to it",
    ),
    (
        "TTL and PTTL values",
        "the servers run a command milliseconds apart, and set a relative expiry milliseconds apart: the same \
         sign (-2, -1 exactly), and apart by at most the longest step so far (at least 3 s) and this one's time; \
         each TTL is also checked against a PTTL just before it, rounded as Redis rounds it",
    ),
    (
        "DBSIZE while a key may have expired unremoved",
        "each server counts an expired key until its own expiry pass (or a read) removes it: exact only while \
         no key can have expired since the last FLUSHALL (a FLUSHDB may have flushed another database than \
         the one holding it), else each at least the live keys SCAN finds",
    ),
    (
        "INFO, CONFIG GET (but save, appendonly, databases, maxmemory-policy, timeout), COMMAND, CLIENT \
         ID/INFO/LIST, WAIT, and their errors",
        "they describe the server (ids, versions, memory, the command table; WAIT counts mojim kv's mirror as a \
         replica, Redis has none): the kind of reply only (an error's first word)",
    ),
    (
        "errors of CLIENT, CONFIG and COMMAND subcommands",
        "mojim kv words them as Redis 6 did (`unknown subcommand or wrong number of arguments for 'SETNAME'`), \
         Redis 7 names the subcommand (`wrong number of arguments for 'client|setname' command`): the first word",
    ),
    (
        "SENTINEL",
        "mojim kv's own (its fail-over for Redis clients); a Redis that is not a Sentinel does not know it: not \
         sent",
    ),
    ("HELLO", "its server, proto, mode and role fields; the id and version are each server's"),
    ("TIME", "each server's clock: two numbers, seconds apart at most"),
    (
        "the error for a bulk string past the limit",
        "both answer what came before, then `ERR Protocol error: invalid bulk length`, and close; mojim kv adds \
         the limit to the message",
    ),
    (
        "-OOM",
        "the memory accounting differs (mojim kv's heap is the region; Redis has no maxmemory here): a request \
         mojim kv refuses with -OOM (an EXEC, the whole transaction) is not sent to Redis, and the keys it names \
         are compared afterwards: it must have changed nothing",
    ),
    (
        "member ranges (ZRANGEBYLEX and the others) over a sorted set whose scores differ",
        "Redis leaves the answer unspecified (over a skiplist it depends on the nodes' random levels): member \
         ranges are sent over sets whose scores are all 0, and over others only whole (`-` `+`) or refused",
    ),
    (
        "ZRANDMEMBER, ZSCAN",
        "a draw, and each server's own cursors: ZRANDMEMBER is sent for the whole set (compared as a multiset) \
         or for nothing, ZSCAN for its errors and for keys with nothing to scan",
    ),
    (
        "Redis commands outside mojim kv's subset",
        "sent to mojim kv only: it must refuse them as Redis refuses a command it does not know, and change \
         nothing",
    ),
    (
        "HRANDFIELD's draws, HSCAN's cursors",
        "as SRANDMEMBER's and SSCAN's: HRANDFIELD of the whole hash compared as a set of fields or of pairs, \
         other counts by their number; HSCAN from cursor 0 with a COUNT larger than any hash here",
    ),
    (
        "EXPIRETIME and PEXPIRETIME",
        "a relative expiry is set milliseconds apart: as TTL and PTTL (-2, -1 exactly, times close)",
    ),
    (
        "RANDOMKEY, MEMORY USAGE, DUMP, FUNCTION DUMP, OBJECT REFCOUNT, and the HELP subcommands",
        "each server's own draw, bytes (the region's blocks; Redis's allocations), payload bytes (mojim kv \
         writes strings uncompressed), shared integers (Redis's), and help lines: the kind of reply only, and \
         MEMORY USAGE's null for a key that may have expired unremoved (Redis measures it). A payload is \
         compared by restoring it: RESTORE and FUNCTION RESTORE are sent one server's payload, and the \
         restored value is compared. A payload changed under a right checksum is restored in a step of its \
         own: mojim kv reads it whole, and refuses as bad data what Redis may take (a length read on into \
         the trailer, bytes left unread, a sorted set's score that is not a number: docs/COMPATIBILITY.md); \
         the key is then deleted on both (a sorted set's payload is not changed so: it would be every time)",
    ),
    (
        "OBJECT IDLETIME",
        "mojim kv does not track when keys were last read and refuses it for a key that exists: sent for \
         missing keys only",
    ),
    (
        "LCS past proto-max-bulk-len",
        "Redis refuses a table of counts larger than proto-max-bulk-len (1 MiB here), mojim kv only past its \
         output limit: where Redis refuses, mojim kv's answer is taken",
    ),
    (
        "SORT's sources, orders and ties",
        "only the sort:* keys are sorted, which hold no number in hexadecimal (Redis's strtod reads 0x10, mojim \
         kv refuses it) and no sorted set whose encoding OBJECT ENCODING could then show (Redis's SORT converts \
         a small sorted set to a skiplist: docs/COMPATIBILITY.md); a set not sorted comes in each server's own \
         order, and so do elements whose weights tie under ALPHA (Redis's comparison answers 0: the order of \
         its dictionary, or of its partial quicksort under LIMIT): compared as a multiset (by its number under \
         a LIMIT)",
    ),
    (
        "SORT after a number that overflowed",
        "Redis's SORT checks errno after strtod without clearing it, and refuses every element once anything \
         before set ERANGE (INCRBYFLOAT k 1e400, a score of 1e-320): each SORT is sent right after a ZADD XX of \
         a key that does not exist, which clears it and changes nothing",
    ),
    (
        "FUNCTION LIST's order, and which library FUNCTION RESTORE names as existing",
        "each server's own order of the libraries (Redis's dictionary's): compared as a set; a refusal may name \
         another of the payload's libraries (or functions) that exist",
    ),
    (
        "the script cache and the libraries across a restart of mojim kv",
        "they live in its heap, not in the region, and are lost (docs/COMPATIBILITY.md): Redis's are flushed \
         after each restart",
    ),
    (
        "commands on keys near their expiry instant",
        "not a reply difference but a rule of the harness: the servers run a command milliseconds apart, so \
         keys that expire during the test (e:*) are touched only away from their instant; a step that runs \
         into one anyway is not compared, and those keys are deleted on both",
    ),
];

/// Bugs of `mojim kv` this test found. Each is `true` while it is open: its one case is then
/// not generated (or, for TTL, the rounding up is accepted). Set it to `false` once fixed
/// (`MOJIM_TEST_KNOWN_BUGS` ungates them for a run: `1` all, or names separated by commas).
///
/// `TTL k` rounds the time left up to a second; Redis rounds it to the nearest
/// (`SET k v PXAT <now + 3600123>`, `TTL k`: mojim kv 3601, Redis 3600).
const BUG_TTL_ROUNDS_UP: bool = false;
/// `DECRBY k -9223372036854775808`: mojim kv `-ERR value is not an integer or out of range`,
/// Redis `-ERR decrement would overflow`.
const BUG_DECRBY_MIN_MESSAGE: bool = false;
/// `EXPIREAT k -5` (a time before 1970; PEXPIREAT too) on an existing key: Redis deletes it and
/// answers 1; mojim kv answers `-ERR invalid expire time in 'expireat' command` and keeps it.
const BUG_EXPIREAT_NEGATIVE: bool = false;
/// `SET k <max_bulk bytes>`, `APPEND k x`: Redis refuses (`-ERR string exceeds maximum allowed
/// size (proto-max-bulk-len)`); mojim kv makes a string longer than `[kv] max_bulk`.
const BUG_APPEND_PAST_MAX_BULK: bool = false;
/// `HELLO 3 SETNAME "a b"`: Redis refuses the name (`-ERR Client names cannot contain spaces,
/// newlines or special characters.`, as CLIENT SETNAME does); mojim kv takes it.
const BUG_HELLO_SETNAME_UNCHECKED: bool = false;
/// SET's options are read unlike Redis's: an expiry's number is checked as soon as it is read,
/// where Redis checks it after every option (`SET k v EX abc FOO`: mojim kv `-ERR value is not
/// an integer or out of range`, Redis `-ERR syntax error`), and a repeated EX or PX is a syntax
/// error, where Redis takes the last (`SET k v PX 100000 PX 200000`: mojim kv `-ERR syntax
/// error`, Redis `+OK` and a PTTL near 200000).
const BUG_SET_OPTIONS: bool = false;
/// EXPIRE and the others check the time before the options, Redis the options first
/// (`EXPIRE k abc FOO`: mojim kv `-ERR value is not an integer or out of range`, Redis `-ERR
/// Unsupported option FOO`; the same with `NX XX`).
const BUG_EXPIRE_OPTION_ORDER: bool = false;
/// The largest time in milliseconds is refused: `SET k v PXAT 9223372036854775807` and
/// `PEXPIREAT k 9223372036854775807` answer `-ERR invalid expire time`; Redis takes them (`+OK`,
/// `:1`).
const BUG_LARGEST_EXPIRY: bool = false;
/// A subcommand of CLIENT, CONFIG or COMMAND that does not exist, or has the wrong number of
/// arguments, is queued in a transaction, where Redis refuses it when it is queued (and EXEC
/// then aborts): `MULTI`, `CLIENT NOSUCH`, `EXEC`: mojim kv `+QUEUED` and runs it; Redis `-ERR
/// unknown subcommand 'NOSUCH'. Try CLIENT HELP.` and `-EXECABORT ...`.
const BUG_SUBCOMMANDS_QUEUED: bool = false;
/// `EXPIRE k -9223372036854775808` (seconds whose milliseconds overflow): Redis `-ERR invalid
/// expire time in 'expire' command`; mojim kv deletes the key (`:1`).
const BUG_EXPIRE_NEGATIVE_OVERFLOW: bool = false;
/// `COMMAND COUNT`, `COMMAND LIST` and `CLIENT LIST` take arguments they do not have:
/// `COMMAND COUNT extra`: mojim kv `:62`, Redis `-ERR wrong number of arguments for
/// 'command|count' command`; `COMMAND LIST extra`, `CLIENT LIST extra`: mojim kv answers, Redis
/// `-ERR syntax error`.
const BUG_SUBCOMMAND_EXTRA_ARGS: bool = false;
/// Without a password, AUTH and HELLO's AUTH take any user: `AUTH bob x`: mojim kv `+OK`, Redis
/// `-WRONGPASS invalid username-password pair or user is disabled.` (only `default` exists).
const BUG_AUTH_ANY_USER: bool = false;
/// An unknown command's error lists its arguments unlike Redis: Redis lists them as they are
/// until the list passes 128 bytes (the last one cut); mojim kv lists up to 16 of up to 128
/// bytes each, and replaces bytes that are not UTF-8 (`FOOBAR "\xc6"`: mojim kv `... '\xef\xbf\xbd'`,
/// Redis `... '\xc6'`).
const BUG_UNKNOWN_COMMAND_ARGS: bool = false;
/// A hash of the small encoding moves to a table when a command's final fields need it; Redis
/// moves it when any field or value the command is given passes `hash-max-listpack-value`, even
/// one the command does not keep (`HSET h f <65 bytes> f x`, or `HSETNX h f <65 bytes>` of a
/// field that exists: OBJECT ENCODING then says `listpack` on mojim kv, `hashtable` on Redis).
const BUG_HASH_ENCODING_BY_ARGUMENTS: bool = false;
/// MEMORY's subcommands are not checked as Redis checks them: `MEMORY NOSUCH`: mojim kv `-ERR
/// unknown subcommand or wrong number of arguments for 'NOSUCH'. Try MEMORY HELP.`, Redis
/// `-ERR unknown subcommand 'NOSUCH'. Try MEMORY HELP.` (`MEMORY USAGE` without a key alike).
const BUG_MEMORY_SUBCOMMANDS: bool = false;
/// An error raised by `redis.call` in a tail call (`return redis.call('INCR', KEYS[1])` on a key
/// that is not a number) lacks where it was raised: mojim kv `-ERR value is not an integer or out
/// of range`, Redis `... script: <sha>, on @user_script:1.` (a call that is not a tail call is
/// placed alike).
const BUG_SCRIPT_TAIL_CALL_ERROR: bool = true;
/// A script's write of a global (`x = 1`, `redis.x = 1`), and its read of a missing one, are
/// placed unlike Redis's: `x = 1`: mojim kv `-ERR sandbox:52: Attempt to modify a readonly table
/// ...`, Redis `-ERR user_script:1: Attempt to ...`; `return nosuch`: mojim kv `-ERR Script
/// attempted to access nonexistent global variable 'nosuch' ...`, Redis `-ERR user_script:1:
/// Script attempted ...`; `rawset(_G, 'y', 1)`: mojim kv `-ERR user_script:1: Attempt to modify
/// ...`, Redis without the place.
const BUG_SCRIPT_GLOBAL_ERRORS: bool = false;
/// A script's number past the integers, or NaN, becomes an integer unlike Redis's (a C cast,
/// which on x86-64 gives the smallest integer): `return 1e20`: mojim kv `:9223372036854775807`,
/// Redis `:-9223372036854775808`; `return 0/0`: mojim kv `:0`, Redis the same smallest integer.
const BUG_SCRIPT_NUMBER_TO_INTEGER: bool = false;
/// An error raised by a helper written in Rust (`redis.sha1hex()`, `redis.setresp(5)`,
/// `bit.band({})`) reaches the client as `-ERR runtime error: <message> stack traceback: ...`;
/// Redis answers `-ERR <message> script: ...` (`bit.band`'s with the place first, `user_script:1:
/// bad argument #1 ...`). (Seen by hand, not sent: `pcall(redis.sha1hex)` gives the script a
/// userdata where Redis gives a string, and cjson's messages name tokens unlike Redis's, `the
/// end` for `T_END`.)
const BUG_SCRIPT_HELPER_ERRORS: bool = true;
/// `MULTI`, `SCRIPT DEBUG NO`, `EXEC`: Redis refuses it in the transaction (`-ERR SCRIPT DEBUG must
/// be called outside a pipeline`: replies wait to be sent), mojim kv answers `+OK`.
const BUG_SCRIPT_DEBUG_IN_EXEC: bool = false;
/// `RESTORE k 9223372036854775807 <payload> REPLACE` (a TTL whose end, from now, is past the
/// integers): Redis's sum wraps to a time past, so the key is not made (and the one it replaces
/// goes); mojim kv makes it, expiring at the largest time.
const BUG_RESTORE_TTL_OVERFLOW: bool = false;
/// BITCOUNT reads its unit before its end: `BITCOUNT k 0 x FOO` on a string: mojim kv `-ERR
/// syntax error`, Redis `-ERR value is not an integer or out of range` (both ends first).
const BUG_BITCOUNT_ARGUMENT_ORDER: bool = false;
/// A database number past a C `int` (SELECT, MOVE, COPY ... DB, SWAPDB; `redis.call('SELECT',
/// ...)` in a script): `SELECT 9999999999`: mojim kv `-ERR DB index is out of range`, Redis `-ERR
/// value is out of range, value must between -2147483648 and 2147483647` (SWAPDB: `-ERR invalid
/// first DB index`; COPY: mojim kv `-ERR value is not an integer or out of range`).
const BUG_DB_INDEX_INT: bool = false;
/// WATCH: DEL and UNLINK touched every key they name, BLPOP, BRPOP, BZPOPMIN and BZPOPMAX every
/// key they wait on; Redis touches the keys they delete, the key they pop (`WATCH k`, `DEL k
/// other`, `MULTI`, `PING`, `EXEC` with `other` there and `k` not: mojim kv `*-1`, Redis
/// `[+PONG]`).
const BUG_WATCH_TOUCHES_NAMED_KEYS: bool = false;

/// Seeds run when `MOJIM_TEST_SEED` is not set.
const SEEDS: &[u64] = &[1, 2, 3];
/// Steps per seed in the main phase, and in the OOM phase.
const STEPS: usize = 3000;
const OOM_STEPS: usize = 1500;

/// Whether the known bug `name` (a `BUG_` constant, `open` its value) keeps its case gated:
/// `MOJIM_TEST_KNOWN_BUGS=1` (or `all`) runs every gated case, or a list of names (commas) those.
fn gated(name: &str, open: bool) -> bool {
    let run = std::env::var("MOJIM_TEST_KNOWN_BUGS").unwrap_or_default();
    let run = run == "1" || run == "all" || run.split(',').any(|n| n.trim() == name);
    open && !run
}

fn seeds() -> Vec<u64> {
    match std::env::var("MOJIM_TEST_SEED") {
        Ok(v) => v
            .split(',')
            .map(|s| s.trim().parse().expect("MOJIM_TEST_SEED: numbers separated by commas"))
            .collect(),
        Err(_) => SEEDS.to_vec(),
    }
}

fn steps(default: usize) -> usize {
    std::env::var("MOJIM_TEST_OPS").map_or(default, |v| v.parse().expect("MOJIM_TEST_OPS is a number"))
}

fn options(test: &'static str, seed: u64, mode: Mode, steps: usize, region: u64) -> Options {
    Options {
        test,
        seed,
        steps,
        mode,
        region,
        // Several restarts per seed, of each kind in turn.
        faults: (steps / 400).max(4),
        gates: Gates {
            decrby_min: gated("BUG_DECRBY_MIN_MESSAGE", BUG_DECRBY_MIN_MESSAGE),
            expireat_negative: gated("BUG_EXPIREAT_NEGATIVE", BUG_EXPIREAT_NEGATIVE),
            hello_setname: gated("BUG_HELLO_SETNAME_UNCHECKED", BUG_HELLO_SETNAME_UNCHECKED),
            unknown_command_args: gated("BUG_UNKNOWN_COMMAND_ARGS", BUG_UNKNOWN_COMMAND_ARGS),
            set_options: gated("BUG_SET_OPTIONS", BUG_SET_OPTIONS),
            expire_option_order: gated("BUG_EXPIRE_OPTION_ORDER", BUG_EXPIRE_OPTION_ORDER),
            largest_expiry: gated("BUG_LARGEST_EXPIRY", BUG_LARGEST_EXPIRY),
            subcommands_queued: gated("BUG_SUBCOMMANDS_QUEUED", BUG_SUBCOMMANDS_QUEUED),
            expire_overflow: gated("BUG_EXPIRE_NEGATIVE_OVERFLOW", BUG_EXPIRE_NEGATIVE_OVERFLOW),
            subcommand_extra_args: gated("BUG_SUBCOMMAND_EXTRA_ARGS", BUG_SUBCOMMAND_EXTRA_ARGS),
            auth_any_user: gated("BUG_AUTH_ANY_USER", BUG_AUTH_ANY_USER),
            hash_encoding_by_args: gated("BUG_HASH_ENCODING_BY_ARGUMENTS", BUG_HASH_ENCODING_BY_ARGUMENTS),
            memory_subcommands: gated("BUG_MEMORY_SUBCOMMANDS", BUG_MEMORY_SUBCOMMANDS),
            script_tail_call_error: gated("BUG_SCRIPT_TAIL_CALL_ERROR", BUG_SCRIPT_TAIL_CALL_ERROR),
            script_global_errors: gated("BUG_SCRIPT_GLOBAL_ERRORS", BUG_SCRIPT_GLOBAL_ERRORS),
            script_number_to_integer: gated("BUG_SCRIPT_NUMBER_TO_INTEGER", BUG_SCRIPT_NUMBER_TO_INTEGER),
            script_helper_errors: gated("BUG_SCRIPT_HELPER_ERRORS", BUG_SCRIPT_HELPER_ERRORS),
            script_debug_in_exec: gated("BUG_SCRIPT_DEBUG_IN_EXEC", BUG_SCRIPT_DEBUG_IN_EXEC),
            restore_ttl_overflow: gated("BUG_RESTORE_TTL_OVERFLOW", BUG_RESTORE_TTL_OVERFLOW),
            bitcount_argument_order: gated("BUG_BITCOUNT_ARGUMENT_ORDER", BUG_BITCOUNT_ARGUMENT_ORDER),
            db_index_int: gated("BUG_DB_INDEX_INT", BUG_DB_INDEX_INT),
            watch_touches_named_keys: gated("BUG_WATCH_TOUCHES_NAMED_KEYS", BUG_WATCH_TOUCHES_NAMED_KEYS),
        },
        ttl_may_round_up: gated("BUG_TTL_ROUNDS_UP", BUG_TTL_ROUNDS_UP),
        append_guard: gated("BUG_APPEND_PAST_MAX_BULK", BUG_APPEND_PAST_MAX_BULK),
    }
}

fn report(test: &str, redis: &RedisServer, s: &Stats, t0: Instant) {
    println!("{test}: {s}; {:.0} s, against {}", t0.elapsed().as_secs_f64(), redis.version);
}

fn announce(test: &str) {
    println!("{test}: deliberate differences from Redis:");
    for (what, why) in DELIBERATE {
        println!("  - {what}: {why}");
    }
    println!("{test}: the cases of known mojim kv bugs are gated (MOJIM_TEST_KNOWN_BUGS=1, or a list of BUG_ names, runs them)");
}

#[test]
fn mojim_kv_answers_as_redis_does_through_restarts() {
    const TEST: &str = "mojim_kv_answers_as_redis_does_through_restarts";
    let Some(redis) = RedisServer::start("kv-diff-redis-main", MAX_BULK) else { return };
    announce(TEST);
    let t0 = Instant::now();
    let mut total = Stats::default();
    for seed in seeds() {
        println!("{TEST}: seed {seed} (replay with MOJIM_TEST_SEED={seed})");
        let o = options(TEST, seed, Mode::Main, steps(STEPS), 64 << 20);
        total.add(&Harness::new(o, &redis).run());
    }
    report(TEST, &redis, &total, t0);
    assert!(
        total.kv_restarts + total.both_restarts > 0 && total.mirror_restarts > 0,
        "no restarts: {total:?}"
    );
}

#[test]
fn under_oom_pressure_mojim_kv_refuses_whole_requests_and_changes_nothing() {
    const TEST: &str = "under_oom_pressure_mojim_kv_refuses_whole_requests_and_changes_nothing";
    let Some(redis) = RedisServer::start("kv-diff-redis-oom", MAX_BULK) else { return };
    let t0 = Instant::now();
    let mut total = Stats::default();
    for seed in seeds() {
        println!("{TEST}: seed {seed} (replay with MOJIM_TEST_SEED={seed})");
        let o = options(TEST, seed, Mode::Oom, steps(OOM_STEPS), 2 << 20);
        let s = Harness::new(o, &redis).run();
        assert!(
            s.oom_refusals > 0,
            "seed {seed}: the region never filled (no -OOM): the phase tested nothing"
        );
        total.add(&s);
    }
    report(TEST, &redis, &total, t0);
}

/// Every command of `mojim kv`'s table is sent by a run of the default size (`SEEDS`, `STEPS`,
/// `OOM_STEPS`), or listed in `coverage::LEFT_OUT` with its reason; and no command is both.
#[test]
fn every_command_of_mojim_kv_is_sent_or_left_out_with_a_reason() {
    const TEST: &str = "every_command_of_mojim_kv_is_sent_or_left_out_with_a_reason";
    let mut sent = BTreeSet::new();
    for &seed in SEEDS {
        for (mode, steps, region) in [(Mode::Main, STEPS, 64 << 20), (Mode::Oom, OOM_STEPS, 2 << 20)] {
            let o = options(TEST, seed, mode, steps, region);
            sent.extend(coverage::sent(o.seed, o.mode, o.steps, o.faults, o.gates));
        }
    }
    let table: BTreeSet<String> = mojim_kv::cmd::SPECS.iter().map(|s| s.name.to_string()).collect();
    let left_out: BTreeSet<String> = coverage::LEFT_OUT.iter().map(|(n, _)| n.to_string()).collect();
    let missing: Vec<&String> =
        table.iter().filter(|n| !sent.contains(*n) && !left_out.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "mojim kv has commands the differential test neither sends nor leaves out: {missing:?}; send them \
         (kv_differential/gen.rs's MAIN and OOM tables) or list them in coverage::LEFT_OUT with the reason"
    );
    let both: Vec<&String> = left_out.intersection(&sent).collect();
    assert!(both.is_empty(), "coverage::LEFT_OUT lists commands the test sends: {both:?}");
    let unknown: Vec<&String> = left_out.difference(&table).collect();
    assert!(unknown.is_empty(), "coverage::LEFT_OUT lists commands mojim kv does not have: {unknown:?}");
    println!(
        "{TEST}: {} of mojim kv's {} commands sent; left out:",
        table.len() - left_out.len(),
        table.len()
    );
    for (name, why) in coverage::LEFT_OUT {
        println!("  - {name}: {why}");
    }
}
