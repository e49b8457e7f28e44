//! Running a script: its `KEYS` and `ARGV`, `redis.call` through the server's own dispatch (in
//! the caller's batch, so the script's writes are one group with it), the time limit past which
//! other clients are answered `-BUSY` and may kill the script, and its value as the reply.
//!
//! A command's own error is the script's to handle, as in Redis (the script's earlier writes
//! stay); a store error (the heap is full, the group too large, a damaged store) stops the
//! script, and the caller's savepoint undoes all of it, as for any command.

use super::convert::{self, error_table, fmt_g17};
use super::state::State;
use crate::cmd::{self, args, Args, Cx, Host, Outcome, Session, Spec};
use crate::resp::{Proto, Reply};
use crate::store::{Mem, StoreError};
use mlua::{HookTriggers, Lua, Table, Value, VmState};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

/// The registry key of the running script's `redis.call` (valid while it runs).
pub const CALL_KEY: &str = "mojim.call";
/// The registry key of the running script's poll of the other clients.
const BUSY_KEY: &str = "mojim.busy";
/// VM instructions between two looks at the clock (Redis's).
const HOOK_EVERY: u32 = 100_000;
/// How long `FUNCTION LOAD` may run a library's code (Redis's).
pub const LOAD_TIMEOUT_MS: u128 = 500;
/// Commands (or one subcommand of them) Redis refuses inside scripts that `mojim kv` does not
/// have: a script calling one is told it may not, as Redis tells it.
const REDIS_NOSCRIPT: &[(&str, Option<&str>)] = &[
    ("ACL", None),
    ("BGREWRITEAOF", None),
    ("BGSAVE", None),
    ("BZPOPMAX", None),
    ("BZPOPMIN", None),
    ("CLUSTER", Some("RESET")),
    ("DEBUG", None),
    ("FAILOVER", None),
    ("LATENCY", None),
    ("MODULE", None),
    ("MONITOR", None),
    ("PSUBSCRIBE", None),
    ("PSYNC", None),
    ("PUNSUBSCRIBE", None),
    ("REPLCONF", None),
    ("REPLICAOF", None),
    ("RESET", None),
    ("ROLE", None),
    ("SAVE", None),
    ("SHUTDOWN", None),
    ("SLAVEOF", None),
    ("SSUBSCRIBE", None),
    ("SUBSCRIBE", None),
    ("SUNSUBSCRIBE", None),
    ("SYNC", None),
    ("UNSUBSCRIBE", None),
];

/// Scripts between two steps of garbage collection (Redis's).
const GC_EVERY: u64 = 50;

/// The message of a killed script.
pub const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// What the running script shares with the functions it calls and with the clients that may
/// kill it.
#[derive(Default)]
pub struct Run {
    /// A script runs.
    pub active: bool,
    /// It is an `EVAL` (else a function).
    pub eval: bool,
    /// Its name (the SHA1 of an `EVAL`, the function's name).
    pub name: String,
    /// The command that runs it (`FUNCTION STATS`).
    pub command: Vec<Vec<u8>>,
    /// When it started.
    pub started: Option<Instant>,
    /// It passed the time limit: other clients are answered `-BUSY`.
    pub timed_out: bool,
    /// `SCRIPT KILL` or `FUNCTION KILL` asked it to stop.
    pub killed: bool,
    /// It ran a write command (it cannot be killed any more).
    pub wrote: bool,
    /// It may not write (`EVAL_RO`, `FCALL_RO`, `no-writes`).
    pub read_only: bool,
    /// The protocol of its calls' replies (`redis.setresp`).
    pub resp: Proto,
    /// A store error stopped it: the whole script is undone.
    pub abort: Option<StoreError>,
    /// `FUNCTION LOAD` runs a library's code: the functions it registered.
    pub loading: Option<Loading>,
    /// Libraries and functions now, for `FUNCTION STATS` during a script.
    pub counts: (usize, usize),
    /// It passed its time limit while other clients' replies waited in its batch: it stops,
    /// is undone, and runs again alone.
    pub alone: bool,
}

impl Run {
    /// Whether the script must stop (killed, a store error, or to run again alone).
    pub fn must_stop(&self) -> bool {
        self.killed || self.abort.is_some() || self.alone
    }
}

/// A library's code being run by `FUNCTION LOAD`.
#[derive(Default)]
pub struct Loading {
    /// The functions it registered so far.
    pub functions: Vec<super::state::Registered>,
}

/// The run state, shared.
pub type Shared = Rc<RefCell<Run>>;

/// One invocation.
pub struct Invocation<'a> {
    /// `EVAL` or `FCALL`.
    pub eval: bool,
    /// The script's name (its SHA1, or the function's name).
    pub name: String,
    /// The compiled chunk, or the function's callback.
    pub func: mlua::Function,
    /// `KEYS`.
    pub keys: Vec<&'a [u8]>,
    /// `ARGV`.
    pub argv: Vec<&'a [u8]>,
    /// It may not write.
    pub read_only: bool,
    /// The whole command (`FUNCTION STATS`).
    pub command: Vec<Vec<u8>>,
    /// Libraries and functions (`FUNCTION STATS` while it runs).
    pub counts: (usize, usize),
    /// It may ask to run again alone (not inside `EXEC`, not already a second run).
    pub may_run_alone: bool,
}

fn fail_table(lua: &Lua, msg: &str) -> mlua::Result<(Value, bool)> {
    Ok((Value::Table(error_table(lua, msg.as_bytes())?), true))
}

/// `redis.call`: one command, as the server runs it, in the script's session.
fn call<M: Mem>(
    lua: &Lua,
    cx: &mut Cx<M>,
    sess: &mut Session,
    shared: &Shared,
    (n, a): (usize, Table),
) -> mlua::Result<(Value, bool)> {
    if shared.borrow().must_stop() {
        return fail_table(lua, KILLED);
    }
    if n == 0 {
        return fail_table(lua, "Please specify at least one argument for this redis lib call");
    }
    let mut argv: Vec<Vec<u8>> = Vec::with_capacity(n.min(1 << 16));
    for i in 1..=n {
        match a.raw_get::<Value>(i)? {
            Value::Number(n) => argv.push(fmt_g17(n).into_bytes()),
            Value::Integer(i) => argv.push(i.to_string().into_bytes()),
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            _ => return fail_table(lua, "Lua redis lib command arguments must be strings or integers"),
        }
    }
    drop(a);
    let mut b = [0u8; 32];
    let name = String::from_utf8_lossy(&argv[0]).to_ascii_uppercase();
    let sub = argv.get(1).map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
    let redis_noscript =
        REDIS_NOSCRIPT.iter().any(|(c, s)| *c == name && s.is_none_or(|s| sub.as_deref() == Some(s)));
    let Some(spec): Option<&Spec> = args::upper(&argv[0], &mut b).and_then(cmd::find_spec) else {
        if redis_noscript {
            return fail_table(lua, "This Redis command is not allowed from script");
        }
        return fail_table(lua, "Unknown Redis command called from script");
    };
    let n = argv.len() as i32;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return fail_table(lua, "Wrong number of args calling Redis command from script");
    }
    if let Err(e) = cmd::spec::check_subcommand(spec.name, argv.len(), argv.get(1).map(|v| v.as_slice())) {
        let msg = if e.contains("unknown subcommand") {
            "Unknown Redis command called from script"
        } else {
            "Wrong number of args calling Redis command from script"
        };
        return fail_table(lua, msg);
    }
    let has = |f: &str| spec.flags.contains(&f);
    // A subcommand Redis flags `noscript` of a command that runs here (CLUSTER RESET) as well.
    let sub_noscript =
        REDIS_NOSCRIPT.iter().any(|(c, s)| *c == name && s.is_some_and(|s| sub.as_deref() == Some(s)));
    if has("noscript") || spec.group == cmd::Group::Scripts || sub_noscript {
        return fail_table(lua, "This Redis command is not allowed from script");
    }
    let write = has("write") || has("may_replicate");
    {
        let mut run = shared.borrow_mut();
        if write && run.read_only {
            return fail_table(lua, "Write commands are not allowed from read-only scripts.");
        }
        run.wrote |= has("write");
        sess.proto = run.resp;
    }
    // The script's commands run as the user who called it.
    if let Err(e) = cx.settings.acl.sync(cx.store) {
        shared.borrow_mut().abort = Some(e);
        return fail_table(lua, KILLED);
    }
    if let Err(d) = cmd::acl::check(&cx.settings.acl, sess, spec, &Args::Owned(&argv)) {
        cmd::acl::log_refusal(&mut cx.settings.acl, sess, &d, &Args::Owned(&argv), "lua", cx.now_ms);
        let why = d.message();
        let why = why.strip_prefix("NOPERM this user").unwrap_or(&why);
        return fail_table(lua, &format!("The user executing the script{why}"));
    }
    // Cluster mode: a script's command may touch only keys this node serves now, as Redis 7.0
    // checks each one (its declared keys were routed, the others were not): not another
    // shard's, not one a slot move sent on (ASK), not one in flight between two shards.
    if let Some(view) = cx.cluster {
        match cmd::redirect::check(cx, view, sess, spec, &Args::Owned(&argv)) {
            Ok(crate::cluster::redirect::Route::Serve) => {}
            Ok(crate::cluster::redirect::Route::Down) => {
                return fail_table(lua, "Script attempted to execute a command while the cluster is down")
            }
            Ok(_) => return fail_table(lua, "Script attempted to access a non local key in a cluster node"),
            Err(e) => {
                shared.borrow_mut().abort = Some(e);
                return fail_table(lua, KILLED);
            }
        }
    }
    cx.store.select(sess.db.min(cx.databases() - 1));
    let sp = cx.store.savepoint();
    let mut out = Vec::new();
    let argv_ref = Args::Owned(&argv);
    let start = std::time::Instant::now();
    let res = cmd::dispatch(cx, sess, spec, &argv_ref, &mut out).and_then(|_| cx.check_group());
    if res.is_ok() {
        // Counted in commandstats and shown to monitors (as `lua`), as Redis does.
        let ending =
            if out.first() == Some(&b'-') { cmd::observe::Ending::Failed } else { cmd::observe::Ending::Ok };
        cmd::observe::record(cx, sess, spec, &argv_ref, start.elapsed().as_nanos() as u64, ending);
    }
    match res {
        Ok(()) => convert::reply_to_lua(lua, &out),
        Err(StoreError::OutputLimit(limit)) => {
            // This command alone is undone; the script may go on.
            if let Err(e) = cx.store.rollback_to(&sp) {
                shared.borrow_mut().abort = Some(e);
                return fail_table(lua, KILLED);
            }
            fail_table(
                lua,
                &format!(
                    "ERR the reply of {} would pass [kv] output_limit ({limit} bytes)",
                    spec.name.to_ascii_lowercase()
                ),
            )
        }
        Err(e) => {
            let msg = format!("ERR {e}");
            shared.borrow_mut().abort = Some(e);
            fail_table(lua, &msg)
        }
    }
}

fn array<'a>(lua: &Lua, items: impl Iterator<Item = &'a [u8]>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (i, v) in items.enumerate() {
        t.raw_set(i + 1, lua.create_string(v)?)?;
    }
    Ok(t)
}

/// The hook: every [`HOOK_EVERY`] instructions, past the time limit, lets the other clients in
/// (to kill the script), and stops a killed one.
fn set_hook(lua: &Lua, shared: &Shared, threshold_ms: u64) -> mlua::Result<()> {
    let s = shared.clone();
    lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |lua, _| {
        if s.borrow().must_stop() {
            return Err(mlua::Error::runtime(KILLED));
        }
        let timed_out = {
            let mut run = s.borrow_mut();
            if let (Some(started), None) = (run.started, run.loading.as_ref()) {
                if !run.timed_out
                    && threshold_ms > 0
                    && started.elapsed().as_millis() >= u128::from(threshold_ms)
                {
                    run.timed_out = true;
                    tracing::warn!(
                        script = %run.name,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "slow script: still running; other clients are answered -BUSY and may end it with {}",
                        if run.eval { "SCRIPT KILL" } else { "FUNCTION KILL" }
                    );
                }
            }
            if let (Some(started), Some(_)) = (run.started, run.loading.as_ref()) {
                if started.elapsed().as_millis() > LOAD_TIMEOUT_MS {
                    return Err(mlua::Error::runtime("FUNCTION LOAD timeout"));
                }
            }
            run.timed_out
        };
        if timed_out {
            if let Value::Function(busy) = lua.named_registry_value::<Value>(BUSY_KEY)? {
                busy.call::<()>(())?;
            }
            if s.borrow().must_stop() {
                return Err(mlua::Error::runtime(KILLED));
            }
        }
        Ok(VmState::Continue)
    })
}

/// Runs a library's code for `FUNCTION LOAD` (with its time limit): the functions it
/// registered, or Redis's error.
pub fn load_library(st: &State, code: &[u8]) -> Result<Vec<super::state::Registered>, String> {
    let f = st.compile(code, "@user_function").map_err(|e| format!("Error compiling function: {e}"))?;
    let api = st.library_api.clone().expect("the libraries' state has a library API");
    let _ = st.env_mt.raw_set("__index", api);
    {
        let mut run = st.shared.borrow_mut();
        *run = Run { started: Some(Instant::now()), loading: Some(Loading::default()), ..Run::default() };
    }
    let hooked = set_hook(&st.lua, &st.shared, 0);
    let res: mlua::Result<()> = hooked.and_then(|()| f.call(()));
    st.lua.remove_hook();
    let _ = st.env_mt.raw_set("__index", st.globals.clone());
    let loading = std::mem::take(&mut *st.shared.borrow_mut()).loading.unwrap_or_default();
    match res {
        Ok(()) => Ok(loading.functions),
        Err(e) => Err(format!("Error registering functions: {}", error_message(&e))),
    }
}

/// An error that came back from Lua, as Redis's `luaExtractErrorInformation` gives it: a
/// message with its code.
fn error_message(e: &mlua::Error) -> String {
    let text = super::state::error_text(e);
    if text.starts_with("ERR ")
        || text.split(' ').next().is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_uppercase()))
    {
        text
    } else {
        format!("ERR {text}")
    }
}

/// Runs an invocation and writes its reply ([`Outcome::Alone`]: none, it is to run again
/// alone). Returns the store error that stopped it (the caller undoes the whole command).
pub fn run_script<M: Mem>(
    cx: &mut Cx<M>,
    caller: &Session,
    st: &State,
    inv: Invocation,
    r: &mut Reply,
) -> Result<Outcome, StoreError> {
    let lua = &st.lua;
    let made = (|| -> mlua::Result<(Table, Table)> {
        Ok((array(lua, inv.keys.iter().copied())?, array(lua, inv.argv.iter().copied())?))
    })();
    let (keys, argv) = match made {
        Ok(k) => k,
        Err(e) => {
            r.error(&format!("ERR Error running script {}, {}", inv.name, super::state::error_text(&e)));
            return Ok(Outcome::Done);
        }
    };
    if inv.eval {
        let _ = st.globals.raw_set("KEYS", keys.clone());
        let _ = st.globals.raw_set("ARGV", argv.clone());
    }
    *st.shared.borrow_mut() = Run {
        active: true,
        eval: inv.eval,
        name: inv.name.clone(),
        command: inv.command,
        started: Some(Instant::now()),
        read_only: inv.read_only,
        counts: inv.counts,
        ..Run::default()
    };
    let mut sess = Session::new(caller.id, caller.addr.clone(), true);
    sess.db = caller.db;
    // The caller's ASKING holds for every command of the script (an importing slot's keys).
    sess.asking = caller.asking;
    sess.deny_blocking = true;
    sess.in_script = true;
    sess.started = true;
    sess.user = caller.user.clone();
    let host: &dyn Host = cx.host;
    let shared = st.shared.clone();
    let threshold = cx.settings.busy_reply_ms;
    let cx_in: &mut Cx<M> = &mut *cx;
    let result: mlua::Result<(bool, Value)> = lua.scope(|scope| {
        let s = shared.clone();
        let call_fn =
            scope.create_function_mut(move |lua, a: (usize, Table)| call(lua, cx_in, &mut sess, &s, a))?;
        let s2 = shared.clone();
        let may_run_alone = inv.may_run_alone;
        let busy_fn = scope.create_function(move |_, ()| {
            // Replies of other clients wait in this batch: they cannot go before the script
            // ends, and their clients could not see -BUSY. The script stops, to run again alone.
            if may_run_alone && host.others_waiting() {
                s2.borrow_mut().alone = true;
                return Ok(());
            }
            super::busy::serve(host, &s2);
            Ok(())
        })?;
        lua.set_named_registry_value(CALL_KEY, call_fn)?;
        lua.set_named_registry_value(BUSY_KEY, busy_fn)?;
        if threshold > 0 {
            set_hook(lua, &shared, threshold)?;
        }
        let res = st.runner.call::<(bool, Value)>((
            inv.func.clone(),
            st.handler.clone(),
            keys.clone(),
            argv.clone(),
        ));
        lua.remove_hook();
        lua.unset_named_registry_value(CALL_KEY)?;
        lua.unset_named_registry_value(BUSY_KEY)?;
        res
    });
    let run = std::mem::take(&mut *st.shared.borrow_mut());
    // A step of garbage collection every so many scripts, as Redis does, so that a long
    // collection does not fall on one script.
    let runs = st.runs.get() + 1;
    st.runs.set(runs);
    if runs.is_multiple_of(GC_EVERY) {
        for _ in 0..GC_EVERY {
            let _ = lua.gc_step();
        }
    }
    if inv.eval {
        let _ = st.globals.raw_set("KEYS", Value::Nil);
        let _ = st.globals.raw_set("ARGV", Value::Nil);
    }
    if let Some(e) = run.abort {
        return Err(e);
    }
    if run.alone {
        tracing::info!(script = %inv.name, "a slow script is run again alone, after the replies waiting in its batch");
        return Ok(Outcome::Alone);
    }
    let limit = cx.output_limit;
    match result {
        Ok((true, v)) => {
            let mark = r.buf.len();
            if convert::lua_to_reply(&v, run.resp, r, limit, &st.raw_next).is_err() {
                r.buf.truncate(mark);
                return Err(StoreError::OutputLimit(limit));
            }
        }
        Ok((false, e)) => {
            let (mut msg, mut place) = (None, None);
            if let Value::Table(t) = &e {
                if let Ok(Value::String(m)) = t.raw_get::<Value>("err") {
                    msg = Some(m.as_bytes().to_vec());
                }
                if let (Ok(Value::String(src)), Ok(line)) =
                    (t.raw_get::<Value>("source"), t.raw_get::<Value>("line"))
                {
                    let line = match line {
                        Value::Integer(i) => i.to_string(),
                        Value::Number(n) => (n as i64).to_string(),
                        _ => String::new(),
                    };
                    place = Some(format!(" script: {}, on {}:{line}.", inv.name, src.to_string_lossy()));
                }
            }
            if run.killed {
                msg = Some(KILLED.as_bytes().to_vec());
            }
            match msg {
                Some(m) => {
                    let mut text = m;
                    if let Some(p) = place {
                        text.extend_from_slice(p.as_bytes());
                    }
                    r.error_bytes(&text);
                }
                None => {
                    let text = match &e {
                        Value::String(s) => s.to_string_lossy(),
                        _ => "execution failure".to_string(),
                    };
                    let text: String = text.chars().take(100).collect();
                    r.error(&format!("ERR Error running script {}, {text}", inv.name));
                }
            }
        }
        Err(e) => {
            let text = if run.killed { KILLED.to_string() } else { error_message(&e) };
            r.error(&text);
        }
    }
    Ok(Outcome::Done)
}
