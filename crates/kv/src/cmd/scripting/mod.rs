//! Lua scripts and functions: `EVAL`, `EVALSHA` (and their `_RO` forms), `SCRIPT`, `FCALL`
//! (and `FCALL_RO`), `FUNCTION`, as Redis 7.0 runs them: Lua 5.1 in a sandbox (`state.rs`,
//! `sandbox.lua`), commands called through the server's own dispatch in the caller's batch
//! (`run.rs`), Redis's conversions (`convert.rs`), a time limit past which other clients may
//! kill a script that has not written (`busy.rs`).
//!
//! The script cache and the libraries are kept in the server's heap, not in the region: a
//! restart (or a promoted mirror) starts with none, and clients load them again
//! (`NOSCRIPT` tells an `EVALSHA` client to).

mod busy;
mod convert;
mod functions;
mod libs;
mod run;
mod shebang;
mod state;
#[cfg(test)]
mod tests;

pub use busy::Answered;

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec};
use super::{show, Cx, Outcome, Session};
use crate::resp::Reply;
use crate::store::{Mem, StoreError};
use functions::{Libraries, Policy};
use state::{Kind, State};
use std::collections::HashMap;

const EVAL_FLAGS: &[&str] =
    &["noscript", "skip_monitor", "may_replicate", "no_mandatory_keys", "stale", "movablekeys"];
const EVAL_RO_FLAGS: &[&str] =
    &["readonly", "noscript", "skip_monitor", "no_mandatory_keys", "stale", "movablekeys"];

pub(super) const SPECS: &[Spec] = &[
    spec("EVAL", -3, EVAL_FLAGS, (0, 0, 0), Group::Scripts),
    spec("EVALSHA", -3, EVAL_FLAGS, (0, 0, 0), Group::Scripts),
    spec("EVAL_RO", -3, EVAL_RO_FLAGS, (0, 0, 0), Group::Scripts),
    spec("EVALSHA_RO", -3, EVAL_RO_FLAGS, (0, 0, 0), Group::Scripts),
    spec("FCALL", -3, EVAL_FLAGS, (0, 0, 0), Group::Scripts),
    spec("FCALL_RO", -3, EVAL_RO_FLAGS, (0, 0, 0), Group::Scripts),
    spec("SCRIPT", -2, &["noscript"], (0, 0, 0), Group::Scripts),
    spec("FUNCTION", -2, &["noscript"], (0, 0, 0), Group::Scripts),
];

/// Most bytes of `EVAL` scripts the cache holds (their text); past it `EVAL` of a new script
/// is refused until `SCRIPT FLUSH`.
pub const SCRIPT_CACHE_BYTES: usize = 256 << 20;

struct Cached {
    flags: shebang::ScriptFlags,
    func: mlua::Function,
}

/// The scripting engine of a server: the Lua states, the script cache, the libraries.
#[derive(Default)]
pub struct Scripts {
    eval: Option<State>,
    cache: HashMap<String, Cached>,
    cache_bytes: usize,
    funcs: Option<State>,
    libraries: Libraries,
    /// The client whose script is to run again alone (it may not ask twice).
    alone_for: Option<u64>,
}

impl Scripts {
    /// Scripts in the cache (`INFO`'s `number_of_cached_scripts`).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Bytes the `EVAL` state's Lua uses (`used_memory_lua`).
    pub fn eval_memory(&self) -> usize {
        self.eval.as_ref().map_or(0, |s| s.lua.used_memory())
    }

    /// Bytes the libraries' Lua uses (`used_memory_vm_functions`).
    pub fn functions_memory(&self) -> usize {
        self.funcs.as_ref().map_or(0, |s| s.lua.used_memory())
    }
}

/// `INFO memory`'s lines on scripts (none while a script runs: it holds the engine).
pub fn info_memory(host: &dyn super::Host, t: &mut String) {
    use std::fmt::Write as _;
    let Some(Ok(s)) = host.scripts().map(|c| c.try_borrow()) else { return };
    let (eval, funcs) = (s.eval_memory(), s.functions_memory());
    let _ = write!(
        t,
        "used_memory_lua:{eval}\r\nused_memory_vm_eval:{eval}\r\nused_memory_vm_functions:{funcs}\r\n\
         used_memory_vm_total:{}\r\nused_memory_scripts_eval:{}\r\nnumber_of_cached_scripts:{}\r\n\
         number_of_functions:{}\r\nnumber_of_libraries:{}\r\n",
        eval + funcs,
        s.cache_bytes,
        s.cache.len(),
        s.libraries.functions(),
        s.libraries.len(),
    );
}

fn state(slot: &mut Option<State>, kind: Kind) -> Result<&State, String> {
    if slot.is_none() {
        *slot = Some(State::new(kind).map_err(|e| format!("ERR cannot make a Lua state: {e}"))?);
    }
    Ok(slot.as_ref().expect("made above"))
}

/// SHA1 of `b` in lower-case hex (a script's name).
pub fn sha1hex(b: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs a script command.
pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<Outcome, StoreError> {
    match spec.name {
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" => {
            eval(cx, s, a, r, spec.name.starts_with("EVALSHA"), spec.name.ends_with("_RO"))
        }
        "FCALL" | "FCALL_RO" => fcall(cx, s, a, r, spec.name == "FCALL_RO"),
        "SCRIPT" => {
            // In a transaction (the only place a SCRIPT command meets `deny_blocking`).
            script(cx, a, r, s.deny_blocking);
            Ok(Outcome::Done)
        }
        "FUNCTION" => {
            function(cx, a, r);
            Ok(Outcome::Done)
        }
        other => unreachable!("{other} is not a script command"),
    }
}

/// A script's keys, then its arguments.
type KeysAndArgs<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

/// `numkeys` and the keys and arguments after it; the error to answer otherwise.
fn keys_and_args<'a>(a: &Args<'a>, bad_number: &str) -> Result<KeysAndArgs<'a>, String> {
    let Some(n) = int(a.get(2)) else { return Err(bad_number.to_string()) };
    if n > a.len() as i64 - 3 {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    if n < 0 {
        return Err("ERR Number of keys can't be negative".into());
    }
    let n = n as usize;
    Ok((a.from(3).take(n).collect(), a.from(3 + n).collect()))
}

/// The keys a script command declares (`EVAL script numkeys key...`), for `COMMAND GETKEYS`;
/// `None` for other commands.
pub fn declared_keys<'a>(spec: &Spec, a: &Args<'a>) -> Option<Vec<&'a [u8]>> {
    if spec.group != Group::Scripts || matches!(spec.name, "SCRIPT" | "FUNCTION") {
        return None;
    }
    Some(keys_and_args(a, "").map(|(k, _)| k).unwrap_or_default())
}

fn unavailable(r: &mut Reply) {
    r.error("ERR scripts are not available in this server");
}

fn eval<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    a: &Args,
    r: &mut Reply,
    by_sha: bool,
    ro: bool,
) -> Result<Outcome, StoreError> {
    cx.read_keys = true;
    if by_sha && a.get(1).len() != 40 {
        r.error("NOSCRIPT No matching script. Please use EVAL.");
        return Ok(Outcome::Done);
    }
    let (keys, argv) = match keys_and_args(a, super::NOT_INT) {
        Ok(k) => k,
        Err(e) => {
            r.error(&e);
            return Ok(Outcome::Done);
        }
    };
    let host = cx.host;
    let Some(cell) = host.scripts() else {
        unavailable(r);
        return Ok(Outcome::Done);
    };
    let mut guard = cell.borrow_mut();
    let eng = &mut *guard;
    let st = match state(&mut eng.eval, Kind::Eval) {
        Ok(st) => st,
        Err(e) => {
            r.error(&e);
            return Ok(Outcome::Done);
        }
    };
    let body = a.get(1);
    let sha = if by_sha { String::from_utf8_lossy(body).to_ascii_lowercase() } else { sha1hex(body) };
    if !eng.cache.contains_key(&sha) {
        if by_sha {
            r.error("NOSCRIPT No matching script. Please use EVAL.");
            return Ok(Outcome::Done);
        }
        if let Err(e) = compile(&mut eng.cache, &mut eng.cache_bytes, st, &sha, body) {
            r.error(&e);
            return Ok(Outcome::Done);
        }
    }
    let c = &eng.cache[&sha];
    let declared_ro = !c.flags.compat && c.flags.flags & shebang::NO_WRITES != 0;
    if ro && !c.flags.compat && !declared_ro {
        r.error("ERR Can not execute a script with write flag using *_ro command.");
        return Ok(Outcome::Done);
    }
    let inv = run::Invocation {
        eval: true,
        name: sha.clone(),
        func: c.func.clone(),
        keys,
        argv,
        read_only: ro || declared_ro,
        command: a.to_owned_vec(),
        counts: (eng.libraries.len(), eng.libraries.functions()),
        may_run_alone: !s.deny_blocking && eng.alone_for != Some(s.id),
    };
    let o = run::run_script(cx, s, st, inv, r)?;
    eng.alone_for = (o == Outcome::Alone).then_some(s.id);
    Ok(o)
}

fn compile(
    cache: &mut HashMap<String, Cached>,
    bytes: &mut usize,
    st: &State,
    sha: &str,
    body: &[u8],
) -> Result<(), String> {
    let flags = shebang::script_flags(body).map_err(|e| format!("ERR {e}"))?;
    if *bytes + body.len() > SCRIPT_CACHE_BYTES {
        return Err(format!(
            "ERR the script cache holds {} bytes of scripts, and may hold {SCRIPT_CACHE_BYTES}: SCRIPT FLUSH it",
            *bytes
        ));
    }
    let func = st
        .compile(&body[flags.shebang_len..], "@user_script")
        .map_err(|e| format!("ERR Error compiling script (new function): {e}"))?;
    *bytes += body.len();
    cache.insert(sha.to_string(), Cached { flags, func });
    Ok(())
}

fn fcall<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    a: &Args,
    r: &mut Reply,
    ro: bool,
) -> Result<Outcome, StoreError> {
    cx.read_keys = true;
    let host = cx.host;
    let Some(cell) = host.scripts() else {
        unavailable(r);
        return Ok(Outcome::Done);
    };
    let guard = cell.borrow();
    let Some(f) = guard.libraries.find(a.get(1)) else {
        r.error("ERR Function not found");
        return Ok(Outcome::Done);
    };
    let (keys, argv) = match keys_and_args(a, "ERR Bad number of keys provided") {
        Ok(k) => k,
        Err(e) => {
            r.error(&e);
            return Ok(Outcome::Done);
        }
    };
    let Some(st) = guard.funcs.as_ref() else {
        r.error("ERR Function not found");
        return Ok(Outcome::Done);
    };
    let declared_ro = f.flags & shebang::NO_WRITES != 0;
    if ro && !declared_ro {
        r.error("ERR Can not execute a script with write flag using *_ro command.");
        return Ok(Outcome::Done);
    }
    let inv = run::Invocation {
        eval: false,
        name: String::from_utf8_lossy(&f.name).into_owned(),
        func: f.callback.clone(),
        keys,
        argv,
        read_only: ro || declared_ro,
        command: a.to_owned_vec(),
        counts: (guard.libraries.len(), guard.libraries.functions()),
        may_run_alone: !s.deny_blocking && guard.alone_for != Some(s.id),
    };
    let o = run::run_script(cx, s, st, inv, r)?;
    drop(guard);
    cell.borrow_mut().alone_for = (o == Outcome::Alone).then_some(s.id);
    Ok(o)
}

fn subcommand_error(a: &Args, r: &mut Reply) {
    let name = String::from_utf8_lossy(a.get(0)).to_ascii_uppercase();
    r.error(&format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {name} HELP.",
        show(a.get(1), 128)
    ));
}

/// `SCRIPT LOAD`, `EXISTS`, `FLUSH`, `KILL`, `DEBUG NO`, `HELP`; `in_exec`: run by EXEC.
fn script<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, in_exec: bool) {
    let host = cx.host;
    let Some(cell) = host.scripts() else { return unavailable(r) };
    let mut eng = cell.borrow_mut();
    let sub = a.get(1);
    match () {
        _ if is(sub, "HELP") && a.len() == 2 => r.help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Print this help.",
        ]),
        _ if is(sub, "FLUSH") => {
            if a.len() > 3 || (a.len() == 3 && !is(a.get(2), "SYNC") && !is(a.get(2), "ASYNC")) {
                return r.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
            eng.cache.clear();
            eng.cache_bytes = 0;
            eng.eval = None;
            r.ok();
        }
        _ if is(sub, "EXISTS") => {
            r.array(a.len() - 2);
            for sha in a.from(2) {
                let key = String::from_utf8_lossy(sha).to_ascii_lowercase();
                r.int(i64::from(eng.cache.contains_key(&key)));
            }
        }
        _ if is(sub, "LOAD") && a.len() == 3 => {
            let body = a.get(2);
            let sha = sha1hex(body);
            if !eng.cache.contains_key(&sha) {
                let eng = &mut *eng;
                let st = match state(&mut eng.eval, Kind::Eval) {
                    Ok(st) => st,
                    Err(e) => return r.error(&e),
                };
                if let Err(e) = compile(&mut eng.cache, &mut eng.cache_bytes, st, &sha, body) {
                    return r.error(&e);
                }
            }
            r.bulk(sha.as_bytes());
        }
        // A running script is killed from its hook (busy.rs): here none runs.
        _ if is(sub, "KILL") && a.len() == 2 => r.error("NOTBUSY No scripts in execution right now."),
        _ if is(sub, "DEBUG") && a.len() == 3 => {
            // Redis refuses it while replies to the client wait to be sent, as they always do in
            // EXEC (its reply's header).
            if in_exec {
                r.error("ERR SCRIPT DEBUG must be called outside a pipeline")
            } else if is(a.get(2), "NO") {
                r.ok()
            } else {
                r.error("ERR mojim kv has no script debugger (SCRIPT DEBUG NO is the only mode)")
            }
        }
        _ => subcommand_error(a, r),
    }
}

/// `FUNCTION STATS`' reply: the running script (if any, and what it was started with) and the
/// engine's counts.
fn function_stats(running: Option<&run::Run>, counts: (usize, usize), r: &mut Reply) {
    r.map(2);
    r.bulk(b"running_script");
    match running.filter(|run| run.active) {
        None => r.null(),
        Some(run) => {
            r.map(3);
            r.bulk(b"name");
            r.bulk(run.name.as_bytes());
            r.bulk(b"command");
            r.array(run.command.len());
            for c in &run.command {
                r.bulk(c);
            }
            r.bulk(b"duration_ms");
            r.int(run.started.map_or(0, |t| t.elapsed().as_millis() as i64));
        }
    }
    r.bulk(b"engines");
    r.map(1);
    r.bulk(b"LUA");
    r.map(2);
    r.bulk(b"libraries_count");
    r.int(counts.0 as i64);
    r.bulk(b"functions_count");
    r.int(counts.1 as i64);
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries.",
    "STATS",
    "    Return information about the current function running.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries.",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload.",
    "HELP",
    "    Print this help.",
];

/// `FUNCTION LOAD`, `DELETE`, `FLUSH`, `KILL`, `LIST`, `STATS`, `DUMP`, `RESTORE`, `HELP`.
fn function<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) {
    let host = cx.host;
    let Some(cell) = host.scripts() else { return unavailable(r) };
    let mut guard = cell.borrow_mut();
    let eng = &mut *guard;
    let sub = a.get(1);
    match () {
        _ if is(sub, "HELP") && a.len() == 2 => r.help(FUNCTION_HELP),
        _ if is(sub, "LOAD") => {
            let mut replace = false;
            let mut i = 2;
            while i < a.len() - 1 {
                if is(a.get(i), "REPLACE") {
                    replace = true;
                    i += 1;
                    continue;
                }
                return r.error(&format!("ERR Unknown option given: {}", show(a.get(i), 128)));
            }
            if i >= a.len() {
                return r.error("ERR Function code is missing");
            }
            let st = match state(&mut eng.funcs, Kind::Functions) {
                Ok(st) => st,
                Err(e) => return r.error(&e),
            };
            match eng.libraries.load(st, a.get(i), replace) {
                Ok(name) => r.bulk(&name),
                Err(e) => r.error(&format!("ERR {e}")),
            }
        }
        _ if is(sub, "DELETE") && a.len() == 3 => {
            if eng.libraries.delete(a.get(2)) {
                r.ok()
            } else {
                r.error("ERR Library not found")
            }
        }
        _ if is(sub, "FLUSH") => {
            if a.len() > 3 {
                return subcommand_error(a, r);
            }
            if a.len() == 3 && !is(a.get(2), "SYNC") && !is(a.get(2), "ASYNC") {
                return r.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
            }
            eng.libraries.clear();
            r.ok();
        }
        _ if is(sub, "KILL") && a.len() == 2 => r.error("NOTBUSY No scripts in execution right now."),
        _ if is(sub, "STATS") && a.len() == 2 => {
            function_stats(None, (eng.libraries.len(), eng.libraries.functions()), r)
        }
        _ if is(sub, "LIST") => list(&eng.libraries, a, r),
        _ if is(sub, "DUMP") && a.len() == 2 => r.bulk(&eng.libraries.dump()),
        _ if is(sub, "RESTORE") && (3..=4).contains(&a.len()) => {
            let policy =
                match a.len() {
                    3 => Policy::Append,
                    _ if is(a.get(3), "APPEND") => Policy::Append,
                    _ if is(a.get(3), "REPLACE") => Policy::Replace,
                    _ if is(a.get(3), "FLUSH") => Policy::Flush,
                    _ => return r.error(
                        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                    ),
                };
            let st = match state(&mut eng.funcs, Kind::Functions) {
                Ok(st) => st,
                Err(e) => return r.error(&e),
            };
            match eng.libraries.restore(st, a.get(2), policy) {
                Ok(()) => r.ok(),
                Err(e) => r.error(&format!("ERR {e}")),
            }
        }
        _ => subcommand_error(a, r),
    }
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`.
fn list(libs: &Libraries, a: &Args, r: &mut Reply) {
    let (mut code, mut pattern) = (false, None);
    let mut i = 2;
    while i < a.len() {
        let arg = a.get(i);
        if !code && is(arg, "WITHCODE") {
            code = true;
        } else if pattern.is_none() && is(arg, "LIBRARYNAME") {
            if i + 1 >= a.len() {
                return r.error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(a.get(i).to_ascii_lowercase());
        } else {
            return r.error(&format!("ERR Unknown argument {}", show(arg, 128)));
        }
        i += 1;
    }
    let chosen: Vec<_> = libs
        .iter()
        .filter(|(name, _)| {
            pattern.as_ref().is_none_or(|p| super::glob::matches(p, &name.to_ascii_lowercase()))
        })
        .collect();
    r.array(chosen.len());
    for (name, lib) in chosen {
        r.map(if code { 4 } else { 3 });
        r.bulk(b"library_name");
        r.bulk(name);
        r.bulk(b"engine");
        r.bulk(b"LUA");
        r.bulk(b"functions");
        r.array(lib.functions.len());
        for f in &lib.functions {
            r.map(3);
            r.bulk(b"name");
            r.bulk(&f.name);
            r.bulk(b"description");
            match &f.description {
                Some(d) => r.bulk(d),
                None => r.null(),
            }
            r.bulk(b"flags");
            let flags: Vec<&str> =
                shebang::FLAGS.iter().filter(|(_, bit)| f.flags & bit != 0).map(|(n, _)| *n).collect();
            r.set(flags.len());
            for n in flags {
                r.simple(n.as_bytes());
            }
        }
        if code {
            r.bulk(b"library_code");
            r.bulk(&lib.code);
        }
    }
}
