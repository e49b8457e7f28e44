//! The keys a live slot move has in flight, held by the source (Mojim's own `CLUSTER`
//! subcommands, used by `mojim kv cluster move-slots`).
//!
//! A key moves in three steps, each one atomic group:
//! 1. `CLUSTER STAGEKEYS fence key ...` on the source takes each key out of database 0 into the
//!    stage (database [`STAGE_DB`], which cluster mode never lets a client select) and answers
//!    its `DUMP` payload and `PEXPIRETIME`;
//! 2. the tool `RESTORE`s it on the target, in a script that first runs `CLUSTER MOVEFENCE
//!    fence`;
//! 3. `CLUSTER UNSTAGEKEYS fence key ...` on the source drops it from the stage.
//!
//! The fence is the tool run's number (its slot-move lock's etcd revision, which grows with
//! every run). Each shard keeps the highest it has seen (database [`FENCE_DB`], in the region)
//! and refuses a lower one, in the same group as the step it guards: so a run frozen past its
//! lease and woken cannot stage, write or unstage anything once a later run touched the shard.
//!
//! While a key is staged the source answers a command on it `TRYAGAIN` (see
//! [`crate::cluster::redirect::route`]), not `ASK`: so at every moment a key has one home that
//! serves it (the source's database 0, or the target), and no client can reach a copy the move
//! left behind. The stage is in the region, so a source's fail-over keeps it, and a tool run
//! cut short finds its keys in flight with `CLUSTER GETSTAGEDKEYS slot count` and runs them
//! again: `STAGEKEYS` of a key staged already answers the staged value.

use super::args::{int, Args};
use super::keys::{dump_payload, move_entry};
use super::notify::GENERIC;
use super::{show, Cx, NOT_INT};
use crate::cluster::slot::key_slot;
use crate::cluster::topology::SLOTS;
use crate::cluster::view::CachedView;
use crate::resp::Reply;
use crate::store::{kind_name, Mem, StoreError};

use crate::cluster::STAGE_DB;

/// The database that holds the highest slot-move fence this shard has seen (cluster mode never
/// lets a client select it).
pub(super) const FENCE_DB: usize = crate::store::DBS - 2;
/// The fence's key there; its value is the number in decimal.
const FENCE_KEY: &[u8] = b"slot-move-fence";

/// `CLUSTER STAGEKEYS`, `GETSTAGEDKEYS` or `UNSTAGEKEYS`; false for another subcommand.
pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    view: &CachedView,
    sub: &[u8],
    a: &Args,
    r: &mut Reply,
) -> Result<bool, StoreError> {
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if !(is("STAGEKEYS") || is("GETSTAGEDKEYS") || is("UNSTAGEKEYS") || is("MOVEFENCE")) {
        return Ok(false);
    }
    let one_db = cx.store.databases() <= STAGE_DB;
    if one_db && !is("GETSTAGEDKEYS") {
        r.error(
            "ERR this store has one database (layout version 1): a live slot move stages keys in a database of \
             their own; copy the data into a new store to move its slots",
        );
        return Ok(true);
    }
    if is("GETSTAGEDKEYS") {
        match (int(a.get(2)), int(a.get(3))) {
            (None, _) | (_, None) => r.error(NOT_INT),
            (Some(slot), Some(max)) if !(0..i64::from(SLOTS)).contains(&slot) || max < 0 => {
                r.error("ERR Invalid slot or number of keys")
            }
            // A store of one database stages nothing.
            _ if one_db || cx.store.db_keys(STAGE_DB) == 0 => r.array(0),
            (Some(slot), Some(max)) => {
                let mut keys = Vec::new();
                // Expired ones too: they stay staged until the move drops them.
                super::cluster::keys_in_slot(cx, STAGE_DB, true, slot as u16, max as usize, &mut |k| {
                    keys.push(k.to_vec())
                })?;
                cx.reply_room(r, keys.iter().map(|k| k.len() + 16).sum())?;
                r.array(keys.len());
                keys.iter().for_each(|k| r.bulk(k));
            }
        }
        return Ok(true);
    }
    // The run's fence, then every key of a slot this shard is moving away: checked before
    // anything changes.
    let fence = match int(a.get(2)) {
        Some(n) if n > 0 => n as u64,
        _ => {
            r.error(&format!(
                "ERR slot-move fence '{}' is not a positive integer (CLUSTER {} fence ...)",
                show(a.get(2), 32),
                show(sub, 16).to_ascii_uppercase()
            ));
            return Ok(true);
        }
    };
    if let Err(e) = pass_fence(cx, fence)? {
        r.error(&e);
        return Ok(true);
    }
    if is("MOVEFENCE") {
        r.ok();
        return Ok(true);
    }
    let mine = view.my_shard().map(|s| s.id.as_str());
    for k in a.from(3) {
        let slot = key_slot(k);
        let away = view.topology().moving(slot).is_some_and(|m| Some(m.from.as_str()) == mine);
        if !away {
            r.error(&format!(
                "ERR key '{}' is in slot {slot}, which is not moving away from this shard: only `mojim kv cluster \
                 move-slots` stages keys, for the moves it recorded",
                show(k, 64)
            ));
            return Ok(true);
        }
    }
    if is("UNSTAGEKEYS") {
        cx.store.select(STAGE_DB);
        let mut n = 0;
        for k in a.from(3) {
            if let Some(f) = cx.store.find(k)? {
                cx.store.remove(&f)?;
                n += 1;
            }
        }
        cx.store.select(0);
        r.int(n);
        return Ok(true);
    }
    r.array(a.len() - 3);
    for k in a.from(3) {
        stage(cx, k, r)?;
    }
    Ok(true)
}

/// Raises this shard's slot-move fence to `fence`, or refuses a fence below it (a run that a
/// later one has overtaken); database 0 is selected after.
fn pass_fence<M: Mem>(cx: &mut Cx<M>, fence: u64) -> Result<Result<(), String>, StoreError> {
    cx.store.select(FENCE_DB);
    let r = raise_fence(cx, fence);
    cx.store.select(0);
    r
}

fn raise_fence<M: Mem>(cx: &mut Cx<M>, fence: u64) -> Result<Result<(), String>, StoreError> {
    let old = cx.store.find(FENCE_KEY)?;
    let seen = match &old {
        Some(f) => {
            let mut v = Vec::new();
            cx.store.value_into(f, &mut v)?;
            std::str::from_utf8(&v).ok().and_then(|t| t.parse::<u64>().ok()).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "the slot-move fence at {} is not a number: {:?}",
                    f.entry,
                    show(&v, 32)
                ))
            })?
        }
        None => 0,
    };
    if fence < seen {
        return Ok(Err(format!(
            "ERR slot-move fence {fence} is behind this shard's {seen}: a later `mojim kv cluster move-slots` ran \
             since, and this one must stop (run it again to go on with the recorded moves)"
        )));
    }
    if fence > seen {
        cx.store.put(
            FENCE_KEY,
            crate::store::KIND_STRING,
            0,
            &[fence.to_string().as_bytes()],
            0,
            old.as_ref(),
        )?;
    }
    Ok(Ok(()))
}

/// Stages `key` (if it is live in database 0 and not staged yet) and answers the staged value
/// as [payload, PEXPIRETIME] (-1: no expiry), or a null when neither holds it live.
fn stage<M: Mem>(cx: &mut Cx<M>, key: &[u8], r: &mut Reply) -> Result<(), StoreError> {
    cx.store.select(STAGE_DB);
    let staged = cx.store.find(key)?;
    let found = match staged {
        // Staged by a run cut short: the same again.
        Some(f) if !f.head.expired(cx.now_ms) => Some(f),
        // It expired in flight: nothing to write on the target, but it stays staged (the
        // source answers TRYAGAIN) until UNSTAGEKEYS, so that no client writes the key on the
        // target before whatever this move wrote there is settled.
        Some(_) => None,
        None => {
            cx.store.select(0);
            match cx.store.get(key, cx.now_ms)? {
                Some(f) => {
                    move_entry(cx, &f, key, 0, STAGE_DB)?;
                    // A transaction that watches it sees it change; it leaves the keyspace as
                    // Redis's MIGRATE deletes it.
                    cx.watches.touch(0, key);
                    cx.notify(GENERIC, "del", key);
                    cx.store.select(STAGE_DB);
                    cx.store.get(key, cx.now_ms)?
                }
                None => None,
            }
        }
    };
    let Some(f) = found else {
        cx.store.select(0);
        r.null();
        return Ok(());
    };
    let payload = dump_payload(cx, &f)?;
    cx.store.select(0);
    let Some(payload) = payload else {
        // Every kind a store holds has a serializer: another kind byte is damage.
        return Err(StoreError::Corrupt(format!(
            "the entry at {} (key '{}') is of kind {}, which no DUMP serializer writes",
            f.entry,
            show(key, 64),
            kind_name(f.head.kind)
        )));
    };
    let at = if f.head.expire_ms == 0 { -1 } else { f.head.expire_ms as i64 };
    cx.reply_room(r, payload.len() + 32)?;
    r.array(2);
    r.bulk(&payload);
    r.int(at);
    Ok(())
}

/// Whether `key` is staged (in flight to the target of its slot's move), for the routing of a
/// slot moving away. A key that expired in flight counts until the move drops it: were the
/// source to answer ASK, a client could write the key on the target before the move's own
/// write of it lands there (and is undone by its expiry in the past).
pub(super) fn is_staged<M: Mem>(cx: &mut Cx<M>, key: &[u8]) -> Result<bool, StoreError> {
    if cx.store.databases() <= STAGE_DB || cx.store.db_keys(STAGE_DB) == 0 {
        return Ok(false);
    }
    cx.store.select(STAGE_DB);
    let found = cx.store.find(key);
    cx.store.select(0);
    Ok(found?.is_some())
}
