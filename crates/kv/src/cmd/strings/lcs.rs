//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: the longest common subsequence of
//! two strings, by Redis's dynamic programming over a table of (len1 + 1) · (len2 + 1) counts,
//! walked back the way Redis walks it (so that IDX names the same ranges). The table is the
//! command's memory: one that would pass the client's output limit (or 512 MiB) is refused
//! before anything is allocated.

use super::{Args, Cx, Reply, NOT_INT, SYNTAX};
use crate::cmd::args::{int, is};
use crate::store::{Mem, StoreError, KIND_STRING};

/// Bytes of table an LCS may use at most, whatever the output limit.
const MAX_TABLE: u64 = 512 << 20;

pub(super) fn lcs<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut strings = [Vec::new(), Vec::new()];
    for (i, s) in strings.iter_mut().enumerate() {
        match cx.store.get(a.get(1 + i), cx.now_ms)? {
            None => {}
            Some(f) if f.head.kind != KIND_STRING => {
                r.error("ERR The specified keys must contain string values");
                return Ok(());
            }
            Some(f) => cx.store.value_into(&f, s)?,
        }
    }
    let (mut idx, mut len_only, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut i = 3;
    while i < a.len() {
        let o = a.get(i);
        match () {
            _ if is(o, "IDX") => idx = true,
            _ if is(o, "LEN") => len_only = true,
            _ if is(o, "WITHMATCHLEN") => with_len = true,
            _ if is(o, "MINMATCHLEN") && i + 1 < a.len() => {
                let Some(n) = int(a.get(i + 1)) else {
                    r.error(NOT_INT);
                    return Ok(());
                };
                min_len = n.max(0);
                i += 1;
            }
            _ => {
                r.error(SYNTAX);
                return Ok(());
            }
        }
        i += 1;
    }
    if idx && len_only {
        r.error("ERR If you want both the length and indexes, please just use IDX.");
        return Ok(());
    }
    let [sa, sb] = &strings;
    let (alen, blen) = (sa.len(), sb.len());
    if alen >= u32::MAX as usize - 1 || blen >= u32::MAX as usize - 1 {
        r.error("ERR String too long for LCS");
        return Ok(());
    }
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    let limit = MAX_TABLE.min(cx.output_limit as u64);
    if cells * 4 > limit {
        r.error(&format!(
            "ERR Insufficient memory, transient memory for LCS exceeds the limit: strings of {alen} and \
             {blen} bytes need a table of {} bytes, more than {limit} (the output limit, [kv] output_limit, \
             or 512 MiB): compare shorter strings",
            cells * 4
        ));
        return Ok(());
    }
    // table[i * (blen + 1) + j]: the LCS length of a[..i] and b[..j].
    let w = blen + 1;
    let mut t = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            t[i * w + j] = if sa[i - 1] == sb[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let total = t[alen * w + blen];
    if len_only {
        r.int(i64::from(total));
        return Ok(());
    }
    let mut result = vec![0u8; total as usize];
    let mut matches = 0usize;
    let mark = if idx {
        r.map(2);
        r.bulk(b"matches");
        Some(r.deferred())
    } else {
        None
    };
    // Walk back from the end: a match extends the current range down, a mismatch (or the
    // start of either string) ends it.
    let (mut i, mut j, mut k) = (alen, blen, total as usize);
    let mut range: Option<(usize, usize, usize, usize)> = None;
    while i > 0 && j > 0 {
        let mut emit = false;
        if sa[i - 1] == sb[j - 1] {
            result[k - 1] = sa[i - 1];
            match range {
                None => range = Some((i - 1, i - 1, j - 1, j - 1)),
                // The match just above-left of the range's start extends it down.
                Some((as_, ae, bs, be)) if as_ == i && bs == j => range = Some((as_ - 1, ae, bs - 1, be)),
                // (Not reached: a match always follows a match diagonally or a range's end.)
                Some(_) => emit = true,
            }
            if range.is_some_and(|(as_, _, bs, _)| as_ == 0 || bs == 0) {
                emit = true;
            }
            (i, j, k) = (i - 1, j - 1, k - 1);
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit {
            if let Some(cur) = range.take() {
                emit_range(cx, r, cur, with_len, min_len, mark.is_some(), &mut matches)?;
            }
        }
    }
    match mark {
        Some(mark) => {
            r.bulk(b"len");
            r.int(i64::from(total));
            r.end_deferred(mark, matches);
        }
        None => {
            cx.reply_room(r, result.len() + 16)?;
            r.bulk(&result);
        }
    }
    Ok(())
}

/// Appends a range of matches (`a_start`, `a_end`, `b_start`, `b_end`) to IDX's reply, if it
/// is long enough and IDX was asked for.
fn emit_range<M: Mem>(
    cx: &Cx<M>,
    r: &mut Reply,
    (as_, ae, bs, be): (usize, usize, usize, usize),
    with_len: bool,
    min_len: i64,
    idx: bool,
    matches: &mut usize,
) -> Result<(), StoreError> {
    let len = ae - as_ + 1;
    if !idx || (len as i64) < min_len {
        return Ok(());
    }
    cx.reply_room(r, 128)?;
    r.array(2 + usize::from(with_len));
    r.array(2);
    r.int(as_ as i64);
    r.int(ae as i64);
    r.array(2);
    r.int(bs as i64);
    r.int(be as i64);
    if with_len {
        r.int(len as i64);
    }
    *matches += 1;
    Ok(())
}
