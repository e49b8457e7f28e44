//! `mojim kv`'s command layer driven as its server drives it: random commands from two clients
//! run through `cmd::execute` against a store in a small region (1 to 4 MiB, so that the heap
//! and the journal fill up), batches sealed at turn ends, expiry passes, flush sweeps,
//! savepoints rolled back to, the clock moved, torn writes and restarts. Checked:
//! - nothing panics, and nothing a client sends makes `execute`, `seal`, an expiry pass, a
//!   sweep or a rollback fail: the only error allowed is the memory's simulated crash, once
//!   one is armed (anything else would stop the server);
//! - every command appends exactly one well-formed RESP reply (`resp::decode` takes all of it;
//!   no CR or LF inside a simple string or an error), or none when it asks to be retried, and a
//!   retry in an empty batch runs;
//! - every sealed group is at most `max_ranges` ranges, all inside the region;
//! - after every seal, `Store::open` of a copy of the image succeeds, with the same key count,
//!   used bytes and heap top, and every key of the key space reads back the same (kind, expiry,
//!   value, or a tree's fields in order) through both;
//! - a rollback to a savepoint gives back the state at the savepoint;
//! - a crash at any point (a restart from the image, or a torn write then a restart, or a
//!   crash during the restart's repair too) leaves a region that `Store::repair` and
//!   `Store::open` open, holding exactly the last sealed state;
//! - at the end, walking every bucket finds `keys()` entries, each one found by its key.
//!
//! Input layout (bytes; a field past the end ends the input):
//! ```text
//! 0  region and limits: size 1 + (b & 3) MiB; max_group_bytes [64 KiB, 256 KiB, 1 MiB, 1 GiB]
//!    by (b >> 2) & 3; max_ranges [1024, 64, 8, 2] by (b >> 4) & 3; bit 6: the password "pw"
//!    is configured (clients start unauthenticated); bit 7: sweep lazily (see 0xF5)
//! 1  output_limit [1 GiB, 1 MiB, 64 KiB, 4 KiB] by b & 3; hash encoding limits
//!    (hash_max_entries, hash_max_value) [(128, 64), (8, 64), (128, 4), (2, 2)] by (b >> 2) & 3
//! then operations, each an opcode byte and its operands:
//!   0x00..=0xEF  a command: the name is (SPECS ++ UNKNOWN)[op % their count]; then a byte h:
//!                h & 15 = n; bit 4: client 1 (else client 0); bit 5: fit the arity (exactly
//!                its arguments, or its least plus n), else n arguments; bit 6: the name in
//!                lower case; bit 7: the arguments as a queued transaction holds them
//!                (`Args::Owned`), else as parsed from the request's RESP encoding; then
//!                each argument, a byte a:
//!                  0b00xx_xxxx  KEYS[a & 15]
//!                  0b01xx_xxxx  WORDS[a & 63] (options, subcommands, patterns)
//!                  0b10xx_xxxx  NUMBERS[a & 63] (near 0, near the i64 and u64 limits, odd forms)
//!                  0b11_1x_xxxx LENS[a & 15] bytes, each the next input byte
//!                  0b11_0x_xxxx a & 31 bytes copied from the input (binary)
//!   0xF0 | 0xF8  end the turn: seal the batch (its replies are sent); after a batch that
//!                flushed, sweep as the server does (unless lazy)
//!   0xF1 | 0xF9  take a savepoint (forgotten at the next seal)
//!   0xF2 | 0xFA  roll back to the savepoint, if one is held
//!   0xF3 | 0xFB  move the clock, byte c: c & 0x40: to EXTREME_MS[c & 3]; else by
//!                DELTAS_MS[c & 15], backwards if c & 0x80
//!   0xF4 | 0xFC  an expiry pass in the batch, as the server's (savepoint, `expire_buckets`
//!                from its cursor while `batch_has_room`), byte b: 1024 buckets if b & 0x80,
//!                else (b & 0x7F) + 1
//!   0xF5 | 0xFD  end the turn, then sweep stale bucket words (`Store::sweep`), byte b:
//!                1 << (b & 15) buckets a step, and seal
//!   0xF6 | 0xFE  crash and restart from the image, byte b: a crash during the restart's
//!                repair after b writes first (0: none)
//!   0xF7 | 0xFF  arm a torn write: the memory fails every write after the next b writes
//!                (the byte), tearing the first one; the failure is then a crash and restart
//! ```
//! The store's hash key is fixed (written into the superblock after formatting), so that a run
//! is the same every time.
//!
//! Replay a failure: `cargo +nightly fuzz run kv_commands artifacts/kv_commands/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_kv::cmd::{
    client::Conn, execute, Args, Auth, Cx, Encodings, Host, Outcome, Replication, Sentinel, Session, Settings, Stats,
    Watches, SPECS,
};
use mojim_kv::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use mojim_kv::store::layout::{HASH_KEY_CRC_OFF, HASH_KEY_OFF};
use mojim_kv::store::{Mem, Savepoint, Store, StoreError, VecMem};
use std::cell::RefCell;
use std::sync::OnceLock;

const KEYS: [&[u8]; 16] = [
    b"k0",
    b"k1",
    b"k2",
    b"k3",
    b"h0",
    b"h1",
    b"h2",
    b"",
    b"\x00\xff\r\n",
    b"k*",
    b"k0 ",
    b"K0",
    b"{tag}h",
    b"\xff\xfe\xfd",
    &[b'L'; 200],
    &[b'M'; 1000],
];

const WORDS: [&[u8]; 64] = [
    b"NX",
    b"XX",
    b"GT",
    b"LT",
    b"GET",
    b"KEEPTTL",
    b"EX",
    b"PX",
    b"EXAT",
    b"PXAT",
    b"MATCH",
    b"COUNT",
    b"TYPE",
    b"string",
    b"hash",
    b"ASYNC",
    b"SYNC",
    b"ALL",
    b"everything",
    b"default",
    b"SETNAME",
    b"GETNAME",
    b"ID",
    b"INFO",
    b"LIST",
    b"SETINFO",
    b"REPLY",
    b"ON",
    b"NO-EVICT",
    b"SET",
    b"RESETSTAT",
    b"DOCS",
    b"AUTH",
    b"mojim",
    b"MASTER",
    b"MASTERS",
    b"SENTINELS",
    b"REPLICAS",
    b"GET-MASTER-ADDR-BY-NAME",
    b"*",
    b"k*",
    b"h?",
    b"[a-z]*",
    b"\\",
    b"[",
    b"*\\",
    b"[^k]?",
    b"maxmemory",
    b"*max*",
    b"server",
    b"keyspace",
    b"replication",
    b"stats",
    b"clients",
    b"pw",
    b"HELP",
    b"OFF",
    b"lib-name",
    b"x",
    b"list",
    b"get",
    b"memory",
    b"persistence",
    b"SLAVES",
];

const NUMBERS: [&[u8]; 64] = [
    b"0",
    b"1",
    b"-1",
    b"2",
    b"3",
    b"5",
    b"10",
    b"100",
    b"1000",
    b"-100",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775806",
    b"-9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"4611686018427387904",
    b"9223372036854775",
    b"9223372036854776",
    b"-9223372036854775",
    b"1700000000",
    b"1700000000000",
    b"1700000000001",
    b"86400",
    b"2147483647",
    b"2147483648",
    b"4294967295",
    b"4294967296",
    b"65535",
    b"65536",
    b"+1",
    b" 1",
    b"01",
    b"-0",
    b"1e3",
    b"0x10",
    b"1.5",
    b"",
    b"-",
    b"00",
    b"4",
    b"7",
    b"16",
    b"64",
    b"128",
    b"129",
    b"1024",
    b"-2",
    b"-1000",
    b"99999999999999",
    b"3000000000000",
    b"1\x00",
    b"12345678901234567890123",
    b"6",
    b"8",
    b"9",
    b"11",
    b"20",
    b"50",
    b"500",
    b"-10",
    b"1099511627776",
];

/// Lengths of filled values: empty, around the small classes and the hash encoding's limit,
/// and large enough to fill a 1 MiB region's heap in a few commands.
const LENS: [usize; 16] = [0, 1, 7, 8, 15, 16, 63, 64, 65, 127, 128, 1000, 4096, 16384, 65536, 200_000];

/// Names that are no command.
const UNKNOWN: [&[u8]; 6] =
    [b"LPUSH", b"", b"GETX", b"GETGETGETGETGETGETGETGETGETGETGET", b"\xffGET", b"get\x00"];

const DELTAS_MS: [u64; 16] = [
    0,
    1,
    2,
    999,
    1000,
    1001,
    1500,
    60_000,
    3_600_000,
    86_400_000,
    1 << 32,
    1 << 40,
    1 << 50,
    i64::MAX as u64 / 2,
    i64::MAX as u64,
    u64::MAX,
];
const EXTREME_MS: [u64; 4] = [0, 1, i64::MAX as u64 - 1, u64::MAX];

const START_MS: u64 = 1_700_000_000_000;
/// Buckets an expiry pass looks at (the server's).
const EXPIRE_BUCKETS: u64 = 1024;
/// The fixed hash key.
const HASH_KEY: [u8; 16] = *b"mojim-kv-fuzzing";
const PASSWORD: &[u8] = b"pw";
/// Replies are decoded whatever their size.
const UNBOUNDED: Limits = Limits { max_bulk: usize::MAX, max_args: usize::MAX, max_inline: usize::MAX };
/// Requests are parsed with room for the largest the input makes.
const REQUEST_LIMITS: Limits = Limits { max_bulk: 1 << 20, max_args: 1024, max_inline: 64 << 10 };

struct FuzzHost {
    password: bool,
}

impl Host for FuzzHost {
    fn replication(&self) -> Replication {
        Replication {
            mode: "sync".into(),
            mirror: "127.0.0.1:7000".into(),
            state: "online".into(),
            durable_replicas: 1,
            ..Default::default()
        }
    }
    fn connected_clients(&self) -> usize {
        2
    }
    fn listen_addr(&self) -> String {
        "127.0.0.1:6379".into()
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn sentinel(&self) -> Sentinel {
        Sentinel {
            name: "mojim".into(),
            master: ("127.0.0.1".into(), 6379),
            sentinels: vec![("127.0.0.1".into(), 6379)],
            serving: true,
        }
    }
    fn authenticate(&self, _client: &str, user: &[u8], password: &[u8]) -> Auth {
        match self.password {
            false => Auth::NoPassword,
            true if user == b"default" && password == PASSWORD => Auth::Accepted,
            true => Auth::Refused,
        }
    }
    fn fixed_setting(&self, name: &str) -> String {
        name.to_string()
    }
    fn reset_stats(&self) {}
    fn my_conn(&self) -> Conn {
        Conn::default()
    }
    fn other_clients(&self, _f: &mut dyn FnMut(&Session, &Conn)) {}
    fn kill_clients(&self, _ids: &[u64]) {}
    fn pause(&self, _until_ms: u64, _all: bool) {}
    fn paused(&self, _now_ms: u64, _write: bool) -> bool {
        false
    }
}

/// What one key holds, read through the store's API.
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    kind: u8,
    encoding: u8,
    expire_ms: u64,
    /// A plain value's bytes (a small hash's field list too).
    value: Vec<u8>,
    /// A tree's fields, in its order.
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The state a store shows: its counters and every key of the key space.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Snapshot {
    keys: u64,
    used: u64,
    heap_top: u64,
    views: Vec<Option<View>>,
}

fn view<M: Mem>(s: &mut Store<M>, key: &[u8]) -> Result<Option<View>, StoreError> {
    let Some(f) = s.find(key)? else { return Ok(None) };
    let mut v = View {
        kind: f.head.kind,
        encoding: f.head.encoding,
        expire_ms: f.head.expire_ms,
        value: Vec::new(),
        fields: Vec::new(),
    };
    match s.tree_of(&f)? {
        Some(t) => s.tree_each(&t, |k, x| {
            v.fields.push((k.to_vec(), x.to_vec()));
            Ok(())
        })?,
        None => s.value_into(&f, &mut v.value)?,
    }
    Ok(Some(v))
}

fn snapshot<M: Mem>(s: &mut Store<M>) -> Result<Snapshot, StoreError> {
    let views = KEYS.iter().map(|k| view(s, k)).collect::<Result<_, _>>()?;
    Ok(Snapshot { keys: s.keys(), used: s.used_bytes(), heap_top: s.heap_top_bytes(), views })
}

/// Every range inside the region, at most `max` of them.
fn check_group(what: &str, group: &[mojim_core::Range], max: usize, size: u64) {
    assert!(group.len() <= max, "{what}: {} ranges, max_ranges is {max}", group.len());
    for r in group {
        assert!(
            r.offset.checked_add(r.len).is_some_and(|e| e <= size),
            "{what}: range {}+{} outside the {size}-byte region",
            r.offset,
            r.len
        );
    }
}

/// No CR or LF inside a line.
fn check_lines(v: &Value) {
    match v {
        Value::Simple(s) | Value::Error(s) | Value::Double(s) => {
            assert!(!s.contains(&b'\r') && !s.contains(&b'\n'), "CR or LF in a line: {v:?}")
        }
        Value::Array(a) | Value::Set(a) | Value::Push(a) => a.iter().for_each(check_lines),
        Value::Map(m) => m.iter().for_each(|(k, x)| {
            check_lines(k);
            check_lines(x);
        }),
        Value::Int(_) | Value::Bulk(_) | Value::Null | Value::Bool(_) => {}
    }
}

/// Exactly one well-formed reply; SUBSCRIBE and its kin answer one confirmation per name (one
/// for none), each well-formed.
fn check_reply(args: &[Vec<u8>], bytes: &[u8]) {
    let show = || {
        args.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned()).collect::<Vec<_>>()
    };
    let name = args.first().map(|n| n.to_ascii_uppercase()).unwrap_or_default();
    let several = matches!(
        &name[..],
        b"SUBSCRIBE" | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE" | b"SUNSUBSCRIBE"
    );
    let mut at = 0;
    let mut replies = 0;
    while at < bytes.len() || replies == 0 {
        let (v, n) = match decode(&bytes[at..], &UNBOUNDED) {
            Ok(Some(x)) => x,
            Ok(None) => panic!("{:?}: an incomplete reply {:?}", show(), String::from_utf8_lossy(bytes)),
            Err(e) => panic!("{:?}: a malformed reply ({e}) {:?}", show(), String::from_utf8_lossy(bytes)),
        };
        check_lines(&v);
        at += n;
        replies += 1;
        assert!(
            several || replies == 1,
            "{:?}: more than one reply: {:?}",
            show(),
            String::from_utf8_lossy(bytes)
        );
    }
}

#[derive(Debug)]
enum Op {
    Command { args: Vec<Vec<u8>>, client: usize, owned: bool },
    Seal,
    Savepoint,
    Rollback,
    Clock(u8),
    Expire(u8),
    Sweep(u8),
    Restart(u8),
    Arm(u8),
}

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    fn arg(&mut self) -> Option<Vec<u8>> {
        let a = self.byte()?;
        Some(match a >> 6 {
            0 => KEYS[usize::from(a & 15)].to_vec(),
            1 => WORDS[usize::from(a & 63)].to_vec(),
            2 => NUMBERS[usize::from(a & 63)].to_vec(),
            _ if a & 0x20 != 0 => vec![self.byte()?; LENS[usize::from(a & 15)]],
            _ => {
                let n = usize::from(a & 31).min(self.data.len());
                let (v, rest) = self.data.split_at(n);
                self.data = rest;
                v.to_vec()
            }
        })
    }

    fn op(&mut self) -> Option<Op> {
        let op = self.byte()?;
        if op >= 0xF0 {
            return Some(match op & 7 {
                0 => Op::Seal,
                1 => Op::Savepoint,
                2 => Op::Rollback,
                3 => Op::Clock(self.byte()?),
                4 => Op::Expire(self.byte()?),
                5 => Op::Sweep(self.byte()?),
                6 => Op::Restart(self.byte()?),
                _ => Op::Arm(self.byte()?),
            });
        }
        let i = usize::from(op) % (SPECS.len() + UNKNOWN.len());
        let h = self.byte()?;
        let n = usize::from(h & 15);
        let (mut name, arity) = match SPECS.get(i) {
            Some(s) => (s.name.as_bytes().to_vec(), s.arity),
            None => (UNKNOWN[i - SPECS.len()].to_vec(), 1),
        };
        if h & 0x40 != 0 {
            name.make_ascii_lowercase();
        }
        let argc = match h & 0x20 != 0 {
            true if arity < 0 => (-arity) as usize - 1 + n,
            true => arity as usize - 1,
            false => n,
        };
        let mut args = vec![name];
        for _ in 0..argc {
            args.push(self.arg()?);
        }
        Some(Op::Command { args, client: usize::from(h >> 4 & 1), owned: h & 0x80 != 0 })
    }
}

struct Client {
    session: Session,
    /// Replies of this turn (sent when it ends).
    out: Vec<u8>,
}

struct Harness {
    host: FuzzHost,
    store: Store<VecMem>,
    size: u64,
    clients: [Client; 2],
    next_id: u64,
    now_ms: u64,
    max_group_bytes: u64,
    max_ranges: usize,
    output_limit: usize,
    settings: Settings,
    watches: Watches,
    lazy_sweep: bool,
    expire_cursor: u64,
    /// A savepoint taken in this batch, and the state then.
    savepoint: Option<(Savepoint, Snapshot)>,
    /// The state of the last sealed batch: what a restart finds.
    sealed: Snapshot,
    /// A torn write is armed: the memory may fail.
    armed: bool,
}

/// Images of new, empty stores with the fixed hash key, by size (1 to 4 MiB), made once.
static FRESH: [OnceLock<Vec<u8>>; 4] = [const { OnceLock::new() }; 4];

/// Opens a new store of `mib` MiB (1 to 4), with the fixed hash key.
fn fresh_store(mib: usize, max_ranges: usize) -> Store<VecMem> {
    let image = FRESH[mib - 1].get_or_init(|| {
        let s = Store::open(VecMem::new((mib as u64) << 20), max_ranges)
            .expect("a store is made in a zeroed region");
        assert!(s.opened().formatted);
        let mut image = s.mem().image();
        image[HASH_KEY_OFF..HASH_KEY_OFF + 16].copy_from_slice(&HASH_KEY);
        image[HASH_KEY_CRC_OFF..HASH_KEY_CRC_OFF + 4]
            .copy_from_slice(&crc32c::crc32c(&HASH_KEY).to_le_bytes());
        image
    });
    Store::open(VecMem::from_bytes(image.clone()), max_ranges).expect("the new store opens")
}

/// A copy of a memory that shares its bytes: reads see `base` under the writes made to the
/// copy, which stay here. Opening a sealed store writes nothing, so this copy costs little.
struct Overlay<'a> {
    base: &'a VecMem,
    writes: RefCell<Vec<(u64, Vec<u8>)>>,
}

impl Mem for Overlay<'_> {
    fn size(&self) -> u64 {
        self.base.size()
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError> {
        self.base.read(off, out)?;
        let end = off + out.len() as u64;
        for (w, data) in self.writes.borrow().iter() {
            let (lo, hi) = (off.max(*w), end.min(w + data.len() as u64));
            if lo < hi {
                out[(lo - off) as usize..(hi - off) as usize]
                    .copy_from_slice(&data[(lo - w) as usize..(hi - w) as usize]);
            }
        }
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        if off.checked_add(data.len() as u64).is_none_or(|e| e > self.size()) {
            return Err(StoreError::Mem(format!("a write of {}+{} past the region", off, data.len())));
        }
        self.writes.borrow_mut().push((off, data.to_vec()));
        Ok(())
    }
}

impl Harness {
    fn new(c0: u8, c1: u8) -> Harness {
        let mib = 1 + usize::from(c0 & 3);
        let max_group_bytes = [64 << 10, 256 << 10, 1 << 20, 1 << 30][usize::from(c0 >> 2 & 3)];
        let max_ranges = [1024, 64, 8, 2][usize::from(c0 >> 4 & 3)];
        let password = c0 & 0x40 != 0;
        let output_limit = [1 << 30, 1 << 20, 64 << 10, 4 << 10][usize::from(c1 & 3)];
        let (hash_max_entries, hash_max_value) =
            [(128, 64), (8, 64), (128, 4), (2, 2)][usize::from(c1 >> 2 & 3)];
        let mut store = fresh_store(mib, max_ranges);
        let sealed = snapshot(&mut store).expect("an empty store reads");
        let client =
            |id| Client { session: Session::new(id, format!("127.0.0.1:{id}"), !password), out: Vec::new() };
        Harness {
            host: FuzzHost { password },
            store,
            size: (mib as u64) << 20,
            clients: [client(1), client(2)],
            next_id: 3,
            now_ms: START_MS,
            max_group_bytes,
            max_ranges,
            output_limit,
            settings: Settings {
                encodings: Encodings { hash_max_entries, hash_max_value, ..Encodings::default() },
                ..Settings::default()
            },
            watches: Watches::default(),
            lazy_sweep: c0 & 0x80 != 0,
            expire_cursor: 0,
            savepoint: None,
            sealed,
            armed: false,
        }
    }

    fn run(&mut self, op: Op) -> Result<(), StoreError> {
        match op {
            Op::Command { args, client, owned } => self.command(&args, client, owned),
            Op::Seal => self.turn_end(),
            Op::Savepoint => {
                let sp = self.store.savepoint();
                let snap = snapshot(&mut self.store)?;
                self.savepoint = Some((sp, snap));
                Ok(())
            }
            Op::Rollback => {
                let Some((sp, snap)) = self.savepoint.take() else { return Ok(()) };
                self.store.rollback_to(&sp)?;
                assert_eq!(snapshot(&mut self.store)?, snap, "a rollback to a savepoint gave another state");
                self.savepoint = Some((sp, snap));
                Ok(())
            }
            Op::Clock(c) => {
                self.now_ms = match c {
                    _ if c & 0x40 != 0 => EXTREME_MS[usize::from(c & 3)],
                    _ if c & 0x80 != 0 => self.now_ms.saturating_sub(DELTAS_MS[usize::from(c & 15)]),
                    _ => self.now_ms.saturating_add(DELTAS_MS[usize::from(c & 15)]),
                };
                Ok(())
            }
            Op::Expire(b) => {
                self.expire(if b & 0x80 != 0 { EXPIRE_BUCKETS } else { u64::from(b & 0x7F) + 1 })
            }
            Op::Sweep(b) => {
                self.turn_end()?;
                self.sweep(1 << (b & 15))
            }
            Op::Restart(b) => {
                self.restart(b);
                Ok(())
            }
            Op::Arm(b) => {
                self.store.mem().crash_after(u64::from(b));
                self.armed = true;
                Ok(())
            }
        }
    }

    /// Runs one command from `client` as `run_client` does: the turn ends first when the
    /// batch has no room, and again (then the command runs again) when it asks for a retry,
    /// or after it flushed.
    fn command(&mut self, args: &[Vec<u8>], client: usize, owned: bool) -> Result<(), StoreError> {
        if !self.store.batch_has_room(self.max_group_bytes, self.max_ranges) {
            self.turn_end()?;
        }
        let mut req = Vec::new();
        let mut parser = Parser::new(REQUEST_LIMITS);
        if !owned {
            encode_request(args, &mut req);
            match parser.parse(&req) {
                Ok(Parsed::Request { len }) => assert_eq!(len, req.len(), "the request is one request"),
                other => panic!("a request within the limits does not parse: {other:?}"),
            }
        }
        let a = match owned {
            true => Args::Owned(args),
            false => Args::Parsed { parser: &parser, buf: &req },
        };
        let mut retried = false;
        loop {
            let c = &mut self.clients[client];
            let mark = c.out.len();
            let mut cx = Cx {
                store: &mut self.store,
                host: &self.host,
                now_ms: self.now_ms,
                max_ranges: self.max_ranges,
                max_group_bytes: self.max_group_bytes,
                output_limit: self.output_limit,
                read_keys: false,
                settings: &mut self.settings,
                databases: 16,
                watches: &mut self.watches,
                errors: &mut Default::default(),
            };
            let o = execute(&mut cx, &mut c.session, &a, &mut c.out)?;
            if o == Outcome::Retry {
                assert_eq!(c.out.len(), mark, "{args:?}: a retried command left a reply");
                assert!(!retried, "{args:?}: asked for a retry in an empty batch");
                retried = true;
                self.turn_end()?;
                continue;
            }
            check_reply(args, &c.out[mark..]);
            if TRACE.get().copied().unwrap_or(false) {
                let r = &c.out[mark..];
                eprintln!("  <- {:?}", String::from_utf8_lossy(&r[..r.len().min(120)]));
            }
            if matches!(o, Outcome::Close | Outcome::OverLimit) {
                self.reconnect(client);
            }
            if self.store.flushed_in_batch() {
                self.turn_end()?;
            }
            return Ok(());
        }
    }

    /// The client's connection is closed; a new one takes its place.
    fn reconnect(&mut self, client: usize) {
        let id = self.next_id;
        self.next_id += 1;
        self.clients[client] = Client {
            session: Session::new(id, format!("127.0.0.1:{id}"), !self.host.password),
            out: Vec::new(),
        };
    }

    /// The end of a turn: the batch is sealed and its replies go; after a batch that flushed,
    /// the server sweeps before the next one.
    fn turn_end(&mut self) -> Result<(), StoreError> {
        let flushed = self.store.flushed_in_batch();
        self.seal()?;
        for c in &mut self.clients {
            c.out.clear();
        }
        if flushed && !self.lazy_sweep {
            self.sweep(1 << 16)?;
        }
        Ok(())
    }

    /// Seals the batch; checks its group, and that a copy of the image opens holding what
    /// this store holds.
    fn seal(&mut self) -> Result<(), StoreError> {
        self.savepoint = None;
        let Some(group) = self.store.seal(self.max_ranges)? else { return Ok(()) };
        check_group("a sealed group", group, self.max_ranges, self.size);
        let copy = Overlay { base: self.store.mem(), writes: RefCell::new(Vec::new()) };
        let mut copy = Store::open(&copy, self.max_ranges)
            .unwrap_or_else(|e| panic!("a copy of the image after a seal does not open: {e}"));
        assert!(!copy.opened().formatted && copy.opened().undone == 0, "{:?}", copy.opened());
        let theirs =
            snapshot(&mut copy).unwrap_or_else(|e| panic!("the copy after a seal does not read: {e}"));
        let ours = snapshot(&mut self.store)?;
        assert_eq!(theirs, ours, "the copy after a seal holds another state");
        self.sealed = ours;
        self.walk();
        Ok(())
    }

    /// An expiry pass as the server's: from a savepoint, undone if it fails.
    fn expire(&mut self, buckets: u64) -> Result<(), StoreError> {
        let (max_group, max_ranges) = (self.max_group_bytes, self.max_ranges);
        let r = self.store.expire_buckets(
            self.expire_cursor,
            buckets,
            self.now_ms,
            |s| s.batch_has_room(max_group, max_ranges),
            |_, _| {},
        );
        match r {
            Ok((next, _)) => self.expire_cursor = next.unwrap_or(0),
            Err(e) if e.is_fatal() => return Err(e),
            Err(e) => panic!("an expiry pass failed (the server would undo it and log): {e}"),
        }
        Ok(())
    }

    /// Zeroes stale bucket words `step` buckets at a time, then seals (`sweep_stale`).
    fn sweep(&mut self, step: u64) -> Result<(), StoreError> {
        if !self.store.stale() {
            return Ok(());
        }
        let mut at = 0;
        loop {
            let (next, group) = self.store.sweep(at, step, self.max_ranges)?;
            check_group("a sweep's group", &group, self.max_ranges, self.size);
            if next == 0 {
                break;
            }
            at = next;
        }
        self.seal()
    }

    /// A crash now: the server starts again on the region as it is (repair, open, send the
    /// last group again, sweep), and finds the last sealed state. With `crash_after` > 0 the
    /// first repair itself is cut short after that many writes.
    fn restart(&mut self, crash_after: u8) {
        let mut image = self.store.mem().image();
        if crash_after > 0 {
            let mem = VecMem::from_bytes(image);
            mem.crash_after(u64::from(crash_after));
            if let Err(e) = Store::repair(&mem, self.max_ranges) {
                assert!(matches!(e, StoreError::Mem(_)), "a repair cut short failed otherwise: {e}");
            }
            image = mem.image();
        }
        let mem = VecMem::from_bytes(image);
        Store::repair(&mem, self.max_ranges).unwrap_or_else(|e| panic!("the region does not repair: {e}"));
        let mut store =
            Store::open(mem, self.max_ranges).unwrap_or_else(|e| panic!("the region does not open: {e}"));
        assert!(!store.opened().formatted, "a restart made a new store");
        let resend = store.take_resend();
        check_group("the group sent again", &resend, usize::MAX, self.size);
        let found =
            snapshot(&mut store).unwrap_or_else(|e| panic!("the store after a restart does not read: {e}"));
        assert_eq!(found, self.sealed, "a restart found another state than the last sealed one");
        self.store = store;
        self.armed = false;
        self.savepoint = None;
        self.expire_cursor = 0;
        for c in 0..2 {
            self.reconnect(c);
        }
        if !self.lazy_sweep {
            self.sweep(1 << 16).unwrap_or_else(|e| panic!("the sweep after a restart failed: {e}"));
        }
    }

    /// An error from the store: only the armed crash may cause one, and then the server
    /// stops and starts again.
    fn failed(&mut self, e: StoreError) {
        assert!(
            self.armed && matches!(e, StoreError::Mem(_)),
            "a store error with no crash armed (the server would stop): {e}"
        );
        self.restart(0);
    }

    /// Every bucket's entries add up to `keys()`, and each is found by its key.
    fn walk(&mut self) {
        let geo = *self.store.geometry();
        let mut words = vec![0u8; 8 * geo.buckets as usize];
        self.store.mem().read(geo.bucket_off, &mut words).expect("the bucket array reads");
        let mut found = Vec::new();
        for (b, w) in words.chunks_exact(8).enumerate() {
            if w == [0; 8] {
                continue;
            }
            self.store
                .bucket_entries(b as u64, |s, e, h| {
                    let mut k = Vec::new();
                    s.key_into(e, h, &mut k)?;
                    found.push((b, k, e, *h));
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("bucket {b} does not read: {e}"));
        }
        assert_eq!(found.len() as u64, self.store.keys(), "entries in the buckets against keys()");
        for (b, k, e, h) in found {
            let f = self.store.find(&k).expect("a key reads");
            assert_eq!(
                f.map(|f| f.entry),
                Some(e),
                "the entry at {e} in bucket {b}, key {:?} ({} bytes), {h:?}, is not what its key finds",
                String::from_utf8_lossy(&k[..k.len().min(40)]),
                k.len()
            );
        }
    }
}

/// `KV_COMMANDS_TRACE=1`: each operation is printed as it runs (to read a failing input).
static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn show_op(op: &Op) -> String {
    match op {
        Op::Command { args, client, owned } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| match a.len() {
                    0..=40 => format!("{:?}", String::from_utf8_lossy(a)),
                    n => format!("<{n} bytes of {:#04x}>", a[0]),
                })
                .collect();
            format!("client {client}{}: {}", if *owned { " (owned)" } else { "" }, a.join(" "))
        }
        other => format!("{other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let [c0, c1, ops @ ..] = data else { return };
    let mut h = Harness::new(*c0, *c1);
    let mut input = Input { data: ops };
    let trace = *TRACE.get_or_init(|| std::env::var_os("KV_COMMANDS_TRACE").is_some());
    while let Some(op) = input.op() {
        if trace {
            eprintln!("{}", show_op(&op));
        }
        if let Err(e) = h.run(op) {
            if trace {
                eprintln!("  -> {e}");
            }
            h.failed(e);
        }
    }
    if let Err(e) = h.turn_end() {
        h.failed(e);
    }
    h.restart(0);
    h.walk();
});
