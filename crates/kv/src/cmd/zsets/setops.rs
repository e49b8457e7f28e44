//! ZUNION ZINTER ZDIFF, ZUNIONSTORE ZINTERSTORE ZDIFFSTORE, ZINTERCARD: sorted sets (and sets,
//! whose members count with score 1) combined, with WEIGHTS and AGGREGATE SUM|MIN|MAX. The
//! result is built in the process (as Redis builds it in its memory) and answered, counted, or
//! stored as a new sorted set (`value::store_new`: an index built bottom up when it is large),
//! all in O(N) for N input members (plus the sort), within the limits of one group.

use super::score::parse_double;
use super::store_result;
use super::value::{self, Opened, Zset};
use super::{emit, members_header, nested};
use crate::cmd::args::{int, is, Args};
use crate::cmd::{Cx, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Reply;
use crate::store::{key_cmp, Found, Mem, StoreError, KIND_SET};
use std::collections::{HashMap, HashSet};

/// One input.
enum Input {
    /// No key.
    Empty,
    /// A sorted set.
    Zset(Zset),
    /// A set's members (score 1).
    Set(HashSet<Vec<u8>>),
}

impl Input {
    fn len(&self) -> u64 {
        match self {
            Input::Empty => 0,
            Input::Zset(z) => z.len(),
            Input::Set(s) => s.len() as u64,
        }
    }

    fn each<M: Mem>(
        &self,
        cx: &Cx<M>,
        mut f: impl FnMut(&[u8], f64) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            Input::Empty => Ok(()),
            Input::Zset(z) => z.walk(cx, 0, false, |s, m| f(m, s)),
            Input::Set(s) => {
                for m in s {
                    if !f(m, 1.0)? {
                        break;
                    }
                }
                Ok(())
            }
        }
    }

    fn find<M: Mem>(&self, cx: &Cx<M>, member: &[u8]) -> Result<Option<f64>, StoreError> {
        match self {
            Input::Empty => Ok(None),
            Input::Zset(z) => z.score(cx, member),
            Input::Set(s) => Ok(s.contains(member).then_some(1.0)),
        }
    }
}

/// The members of the set (`SADD`'s type) at `f`, as an input with score 1.
fn set_members<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<Option<HashSet<Vec<u8>>>, StoreError> {
    let v = crate::cmd::set_value::read(cx, f)?;
    let mut out = HashSet::with_capacity(v.len().min(1 << 20) as usize);
    v.each(cx, |m| {
        out.insert(m.to_vec());
        Ok(true)
    })?;
    Ok(Some(out))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Redis's aggregation: a sum that is NaN (inf + -inf) is 0; NaN never wins a MIN or MAX.
fn aggregate(target: &mut f64, v: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += v;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if v < *target {
                *target = v;
            }
        }
        Aggregate::Max => {
            if v > *target {
                *target = v;
            }
        }
    }
}

/// Runs one of this module's commands (`name` upper case).
pub(super) fn run<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, name: &str) -> Result<(), StoreError> {
    let store = name.ends_with("STORE");
    let card = name == "ZINTERCARD";
    let op = match name {
        "ZUNION" | "ZUNIONSTORE" => Op::Union,
        "ZDIFF" | "ZDIFFSTORE" => Op::Diff,
        _ => Op::Inter,
    };
    let at = if store { 2 } else { 1 };
    let Some(setnum) = int(a.get(at)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    if setnum < 1 {
        r.error(&format!("ERR at least 1 input key is needed for '{}' command", name.to_ascii_lowercase()));
        return Ok(());
    }
    if setnum > (a.len() - at - 1) as i64 {
        r.error(SYNTAX);
        return Ok(());
    }
    let setnum = setnum as usize;
    let mut inputs = Vec::with_capacity(setnum);
    for i in 0..setnum {
        let key = a.get(at + 1 + i);
        let input = match value::open(cx, key)? {
            Opened::Absent(_) => Input::Empty,
            Opened::Zset(z) => Input::Zset(z),
            Opened::WrongType => {
                let set = match cx.store.get(key, cx.now_ms)? {
                    Some(f) if f.head.kind == KIND_SET => set_members(cx, &f)?,
                    _ => None,
                };
                match set {
                    Some(s) => Input::Set(s),
                    None => {
                        r.error(WRONGTYPE);
                        return Ok(());
                    }
                }
            }
        };
        inputs.push((input, 1.0f64));
    }
    let (mut how, mut withscores, mut limit) = (Aggregate::Sum, false, 0u64);
    let mut j = at + 1 + setnum;
    while j < a.len() {
        let left = a.len() - j;
        let o = a.get(j);
        if op != Op::Diff && !card && left > setnum && is(o, "WEIGHTS") {
            for (k, input) in inputs.iter_mut().enumerate() {
                let Some(w) = parse_double(a.get(j + 1 + k)) else {
                    r.error("ERR weight value is not a float");
                    return Ok(());
                };
                input.1 = w;
            }
            j += 1 + setnum;
        } else if op != Op::Diff && !card && left >= 2 && is(o, "AGGREGATE") {
            how = match a.get(j + 1) {
                v if is(v, "SUM") => Aggregate::Sum,
                v if is(v, "MIN") => Aggregate::Min,
                v if is(v, "MAX") => Aggregate::Max,
                _ => {
                    r.error(SYNTAX);
                    return Ok(());
                }
            };
            j += 2;
        } else if !store && !card && is(o, "WITHSCORES") {
            withscores = true;
            j += 1;
        } else if card && left >= 2 && is(o, "LIMIT") {
            match int(a.get(j + 1)) {
                Some(l) if l >= 0 => limit = l as u64,
                _ => {
                    r.error("ERR LIMIT can't be negative");
                    return Ok(());
                }
            }
            j += 2;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
    }
    if op != Op::Diff {
        // Smallest first (the weights go with their inputs).
        inputs.sort_by_key(|(i, _)| i.len());
    }
    let mut items: Vec<(f64, Vec<u8>)> = Vec::new();
    let cxr: &Cx<M> = cx;
    match op {
        Op::Inter => {
            let mut count = 0u64;
            let (first, rest) = inputs.split_first().expect("at least one input");
            first.0.each(cxr, |m, s| {
                let mut score = first.1 * s;
                if score.is_nan() {
                    score = 0.0;
                }
                for (input, w) in rest {
                    match input.find(cxr, m)? {
                        Some(v) => aggregate(&mut score, v * w, how),
                        None => return Ok(true),
                    }
                }
                if card {
                    count += 1;
                    return Ok(limit == 0 || count < limit);
                }
                items.push((score, m.to_vec()));
                Ok(true)
            })?;
            if card {
                r.int(count as i64);
                return Ok(());
            }
        }
        Op::Union => {
            let mut acc: HashMap<Vec<u8>, f64> =
                HashMap::with_capacity(inputs.last().map_or(0, |i| i.0.len()).min(1 << 20) as usize);
            for (input, w) in &inputs {
                input.each(cxr, |m, s| {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    match acc.get_mut(m) {
                        Some(t) => aggregate(t, score, how),
                        None => {
                            acc.insert(m.to_vec(), score);
                        }
                    }
                    Ok(true)
                })?;
            }
            items = acc.into_iter().map(|(m, s)| (s, m)).collect();
        }
        Op::Diff => {
            let (first, rest) = inputs.split_first().expect("at least one input");
            first.0.each(cxr, |m, s| {
                for (input, _) in rest {
                    if input.find(cxr, m)?.is_some() {
                        return Ok(true);
                    }
                }
                items.push((s, m.to_vec()));
                Ok(true)
            })?;
        }
    }
    items.sort_by(|x, y| key_cmp(x.0, &x.1, y.0, &y.1));
    if store {
        let event = match op {
            Op::Union => "zunionstore",
            Op::Inter => "zinterstore",
            Op::Diff => "zdiffstore",
        };
        store_result(cx, a.get(1), &items, event)?;
        r.int(items.len() as i64);
        return Ok(());
    }
    members_header(r, items.len() as u64, withscores);
    let pairs = nested(r);
    for (s, m) in &items {
        emit(cx, r, m, withscores.then_some(*s), pairs)?;
    }
    Ok(())
}
