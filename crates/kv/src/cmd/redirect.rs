//! Cluster mode's check before a command runs or is queued: its keys (as `COMMAND GETKEYS`
//! finds them: the table's places, the keys after a count, a script's declared keys) go to
//! [`cluster::redirect::route`], and a command not served here is answered with the redirect.
//! `EXEC` checks the keys of every queued command together, as Redis does.

use super::args::{upper, Args};
use super::{find_spec, key_args, scripting, server, Cx, Session, Spec};
use crate::cluster::redirect::{route, Presence, Route, Slots};
use crate::cluster::slot::key_slot;
use crate::cluster::view::CachedView;
use crate::store::{Mem, StoreError};

/// Calls `f` with each key `a` names, in order.
pub(super) fn each_key<'k>(spec: &Spec, a: &'k Args, f: &mut dyn FnMut(&'k [u8])) {
    if let Some(keys) = scripting::declared_keys(spec, a) {
        keys.into_iter().for_each(f);
        return;
    }
    key_args(spec, a).for_each(&mut *f);
    if spec.flags.contains(&"movablekeys") {
        let mut keys = Vec::new();
        let _ = server::movable_keys(spec.name, a, &mut keys);
        keys.into_iter().for_each(f);
    }
}

/// Calls `f` with each key of the request: the command's, or at `EXEC` the queued commands'.
fn each_request_key(s: &Session, spec: &Spec, a: &Args, f: &mut dyn FnMut(&Spec, &[u8])) {
    match (&s.multi, spec.name) {
        (Some(m), "EXEC") => {
            for c in &m.queue {
                let mut b = [0u8; 32];
                if let Some(sp) = upper(&c[0], &mut b).and_then(find_spec) {
                    each_key(sp, &Args::Owned(c), &mut |k| f(sp, k));
                }
            }
        }
        _ => each_key(spec, a, &mut |k| f(spec, k)),
    }
}

/// Where the request is served (Redis's `getNodeByQuery`). Store errors reading whether keys
/// are here are returned.
pub(super) fn check<M: Mem>(
    cx: &mut Cx<M>,
    view: &CachedView,
    s: &Session,
    spec: &'static Spec,
    a: &Args,
) -> Result<Route, StoreError> {
    // A transaction's commands were checked one by one when queued; at EXEC together, on the
    // topology of now.
    if spec.name == "EXEC" && s.multi.is_none() {
        return Ok(Route::Serve);
    }
    let mut slots = Slots::None;
    let mut shard_channels = false;
    each_request_key(s, spec, a, &mut |sp, k| {
        shard_channels |= matches!(sp.name, "SPUBLISH" | "SSUBSCRIBE" | "SUNSUBSCRIBE");
        slots.add(key_slot(k));
    });
    let mut failed = None;
    // Asked only of a slot being moved: which keys are here, and whether they are several.
    let presence = || {
        // Only db 0 exists in cluster mode (SELECT refuses the others).
        cx.store.select(0);
        let mut p = Presence::default();
        let mut first: Option<Vec<u8>> = None;
        each_request_key(s, spec, a, &mut |_, k| {
            match &first {
                None => first = Some(k.to_vec()),
                Some(f) => p.several |= f.as_slice() != k,
            }
            match cx.store.get(k, cx.now_ms) {
                Ok(Some(_)) => p.existing += 1,
                Ok(None) => {
                    p.missing += 1;
                    match super::cluster_stage::is_staged(cx, k) {
                        Ok(staged) => p.staged += usize::from(staged),
                        Err(e) => failed = Some(e),
                    }
                }
                Err(e) => failed = Some(e),
            }
        });
        p
    };
    let r = route(view.topology(), view.table(), view.me(), s.tls, slots, s.asking, shard_channels, presence);
    match failed {
        Some(e) => Err(e),
        None => Ok(r),
    }
}
