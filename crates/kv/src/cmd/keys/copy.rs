//! COPY source destination [DB n] [REPLACE]: a key's value, expiry and type copied to another
//! key (in this database or another), the two sharing nothing after: a string's, small hash's,
//! small set's or small sorted set's bytes, a large hash's or set's tree node by node
//! (`store::tree::copy`), a chained list's elements into a new chain, a large sorted set's index
//! (`Store::zindex_copy`).

use super::super::args::{is, Args};
use super::super::notify::{GENERIC, NEW};
use super::super::{Cx, Session, SYNTAX};
use crate::resp::Reply;
use crate::store::{
    kind_name, Found, Mem, StoreError, ENC_INTSET, ENC_LISTPACK, ENC_PLAIN, ENC_QUICKLIST, ENC_TREE,
    ENC_ZSET_INDEX, KIND_HASH, KIND_LIST, KIND_SET, KIND_STRING, KIND_ZSET,
};

/// The value a copy of `f` holds: its bytes, or a new tree's handle; `None` for a kind that
/// cannot be copied yet.
fn copy_value<M: Mem>(cx: &mut Cx<M>, f: &Found) -> Result<Option<Vec<u8>>, StoreError> {
    let mut v = Vec::new();
    match (f.head.kind, f.head.encoding) {
        // A string's value is whole, whatever its encoding says of it.
        (KIND_STRING, _) | (KIND_HASH | KIND_ZSET, ENC_PLAIN) | (KIND_SET, ENC_INTSET | ENC_LISTPACK) => {
            cx.store.value_into(f, &mut v)?
        }
        (KIND_HASH | KIND_SET, ENC_TREE) => {
            let t = cx.store.tree_of(f)?.expect("a hash or set of the tree encoding holds a tree");
            v.extend_from_slice(&cx.store.tree_copy(&t)?.encode());
        }
        (KIND_ZSET, ENC_ZSET_INDEX) => {
            let z = cx.store.zindex_of(f)?.expect("a sorted set of the index encoding holds an index");
            v.extend_from_slice(&cx.store.zindex_copy(&z)?.encode());
        }
        (KIND_LIST, ENC_QUICKLIST) => {
            let elems = super::super::lists::elements(cx, f, usize::MAX)?;
            let fill = crate::store::list_pack::Fill(cx.settings.encodings.list_max_size);
            v.extend_from_slice(&cx.store.ql_new(&elems, fill)?.encode());
        }
        (KIND_LIST, _) => cx.store.value_into(f, &mut v)?,
        _ => return Ok(None),
    }
    Ok(Some(v))
}

pub(in crate::cmd) fn copy<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let (src, dst) = (a.get(1), a.get(2));
    let (mut to, mut replace) = (s.db, false);
    let mut i = 3;
    while i < a.len() {
        let o = a.get(i);
        if is(o, "REPLACE") {
            replace = true;
        } else if is(o, "DB") && i + 1 < a.len() {
            match super::super::args::db_index(a.get(i + 1), cx.databases()) {
                Ok(db) => to = db,
                Err(e) => {
                    r.error(&e);
                    return Ok(());
                }
            }
            i += 1;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
        i += 1;
    }
    if cx.cluster.is_some() && (s.db != 0 || to != 0) {
        r.error("ERR Copying to another database is not allowed in cluster mode");
        return Ok(());
    }
    if to == s.db && src == dst {
        r.error("ERR source and destination objects are the same");
        return Ok(());
    }
    let Some(f) = cx.store.get(src, cx.now_ms)? else {
        r.int(0);
        return Ok(());
    };
    cx.store.select(to);
    let taken = cx.store.get(dst, cx.now_ms);
    cx.store.select(s.db);
    let taken_live = taken?;
    if taken_live.is_some() && !replace {
        r.int(0);
        return Ok(());
    }
    let Some(value) = copy_value(cx, &f)? else {
        r.error(&format!(
            "ERR mojim kv cannot COPY a {} yet: only strings, hashes, lists, sets and sorted sets are copied",
            kind_name(f.head.kind)
        ));
        return Ok(());
    };
    cx.store.select(to);
    // The destination afresh (the copy allocated blocks); an expired key there is replaced.
    let put = cx.store.find(dst).and_then(|old| {
        let h = &f.head;
        cx.store.put_encoded(dst, h.kind, h.encoding, h.expire_ms, &[&value], 0, old.as_ref())
    });
    cx.store.select(s.db);
    put?;
    if to != s.db && taken_live.is_none() {
        // New in the other database (`notify::after` sees only this one).
        cx.notify_in(to, NEW, "new", dst);
    }
    cx.notify_in(to, GENERIC, "copy_to", dst);
    cx.watches.touch(to, dst);
    r.int(1);
    Ok(())
}
