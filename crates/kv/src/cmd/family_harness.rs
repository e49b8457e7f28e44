//! A harness for the hash and set commands' tests: commands run against a store in memory (any
//! `Mem`, so that a test may crash it; a store error is returned, not a panic), each sealed in a
//! batch of its own, replies decoded. The host is the string tests' [`TestHost`].

use super::observe::Telemetry;
use super::strings::tests::TestHost;
use super::*;
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use crate::store::VecMem;
use std::collections::BTreeMap;

pub(crate) struct Harness<M: Mem, H: Host = TestHost> {
    settings: Settings,
    pub(crate) watches: Watches,
    pub(crate) store: Store<M>,
    pub(crate) session: Session,
    pub(crate) now_ms: u64,
    output_limit: usize,
    pub(crate) host: H,
    /// INFO's errorstats and the per command records, kept across commands as the server
    /// keeps them.
    pub(crate) errors: ErrorStats,
    pub(crate) telemetry: Telemetry,
}

impl Harness<VecMem> {
    pub(crate) fn new() -> Harness<VecMem> {
        Harness::on(VecMem::new(16 << 20)).unwrap()
    }
}

impl<M: Mem> Harness<M> {
    pub(crate) fn on(mem: M) -> Result<Harness<M>, StoreError> {
        Harness::with_host(mem, TestHost { max_bulk: 1 << 20 })
    }
}

impl<M: Mem, H: Host> Harness<M, H> {
    /// A store on `mem` whose commands see `host`.
    pub(crate) fn with_host(mem: M, host: H) -> Result<Harness<M, H>, StoreError> {
        Ok(Harness {
            settings: Settings::default(),
            watches: Watches::default(),
            store: Store::open(mem, 1024)?,
            session: Session::new(7, "t".into(), true),
            now_ms: 1_000_000,
            output_limit: 1 << 30,
            host,
            errors: ErrorStats::default(),
            telemetry: Telemetry::default(),
        })
    }

    /// Runs one command and seals its batch: its reply.
    pub(crate) fn try_cmd(&mut self, args: &[&str]) -> Result<Value, StoreError> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.try_cmd_bytes(&a)
    }

    /// As [`Harness::try_cmd`], with arguments of any bytes.
    pub(crate) fn try_cmd_bytes(&mut self, args: &[&[u8]]) -> Result<Value, StoreError> {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
            now_ms: self.now_ms,
            max_ranges: 1024,
            max_group_bytes: 1 << 30,
            output_limit: self.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut self.errors,
            telemetry: &mut self.telemetry,
            cluster: None,
        };
        let o = execute(&mut cx, &mut self.session, &Args::Parsed { parser: &p, buf: &req }, &mut out)?;
        assert_ne!(o, Outcome::Retry);
        self.store.seal(1024)?;
        let (v, n) = decode(&out, &Limits::default()).unwrap().expect("a whole reply");
        assert_eq!(n, out.len(), "one reply for {args:?}");
        Ok(v)
    }

    pub(crate) fn cmd(&mut self, args: &[&str]) -> Value {
        self.try_cmd(args).unwrap()
    }

    pub(crate) fn cmd_bytes(&mut self, args: &[&[u8]]) -> Value {
        self.try_cmd_bytes(args).unwrap()
    }

    pub(crate) fn cmd_owned(&mut self, args: &[String]) -> Value {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        self.cmd(&a)
    }

    /// Frees the values removed in the background, a sealed step at a time, as the server
    /// does. Returns the values freed.
    pub(crate) fn lazyfree(&mut self) -> u64 {
        self.store.lazyfree_all(1 << 30, 1024)
    }

    pub(crate) fn encoding(&mut self, key: &str) -> String {
        match self.cmd(&["OBJECT", "ENCODING", key]) {
            Value::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    /// A set's members, sorted.
    pub(crate) fn members(&mut self, key: &str) -> Vec<String> {
        let mut m = strings(&self.cmd(&["SMEMBERS", key]));
        m.sort();
        m
    }
}

pub(crate) fn b(s: &str) -> Value {
    Value::bulk(s)
}
pub(crate) fn i(n: i64) -> Value {
    Value::Int(n)
}
pub(crate) fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}
/// The strings of an array (or set) reply.
pub(crate) fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) | Value::Set(a) => a
            .iter()
            .map(|x| match x {
                Value::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}
/// Pearson's chi-square of the counts of each value in `picks` against a uniform spread over
/// the values seen.
pub(crate) fn chi_square(picks: &[String]) -> f64 {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for p in picks {
        *counts.entry(p).or_default() += 1;
    }
    let e = picks.len() as f64 / counts.len() as f64;
    counts.values().map(|&c| (c as f64 - e).powi(2) / e).sum()
}
