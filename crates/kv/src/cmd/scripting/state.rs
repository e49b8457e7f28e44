//! A Lua state as Redis makes one for its scripts: Lua 5.1's base, table, string and math
//! libraries, `cjson`, `bit` and `cmsgpack`, the `redis` API, a bounded memory, and the sandbox
//! (`sandbox.lua`): globals and every table reachable from them read-only, no file or OS
//! access, no binary chunks. `EVAL` scripts and libraries have a state each, as in Redis.

use super::convert::error_table;
use super::libs;
use super::run::{Run, Shared};
use super::shebang;
use crate::cmd::server::REDIS_VERSION;
use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};
use std::cell::Cell;
use std::rc::Rc;

/// Memory a Lua state may allocate at most: a script that asks for more gets Lua's
/// `not enough memory` error.
pub const LUA_MEMORY_LIMIT: usize = 512 << 20;

/// Which state: `EVAL`'s, or the libraries' (whose load runs against a smaller API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `EVAL`, `EVALSHA`.
    Eval,
    /// `FUNCTION LOAD`, `FCALL`.
    Functions,
}

/// A Lua state and the handles the server keeps into it.
pub struct State {
    /// The interpreter.
    pub lua: Lua,
    /// The globals' read-only proxy: every script's environment.
    pub env: Table,
    /// Its metatable, whose `__index` is the real globals (or the library API during a load).
    pub env_mt: Table,
    /// The real globals (`KEYS` and `ARGV` are set in them for `EVAL`).
    pub globals: Table,
    /// What a library's code sees while `FUNCTION LOAD` runs it (the libraries' state only).
    pub library_api: Option<Table>,
    /// `run(f, handler, a, b)`: `f(a, b)` under `handler`, (ok, value).
    pub runner: Function,
    /// Redis's error handler (adds where an error happened).
    pub handler: Function,
    /// What the running script shares with the functions it calls.
    pub shared: Shared,
    /// Lua's own `next` (scripts get one that sees through the sandbox's proxies).
    pub raw_next: Function,
    /// Scripts run (a garbage collection step every so many).
    pub runs: Cell<u64>,
}

fn fail(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

/// Redis's `REDIS_VERSION_NUM`: 0x00MMmmpp.
fn version_num() -> f64 {
    let mut parts = REDIS_VERSION.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b, c) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    f64::from((a << 16) | (b << 8) | c)
}

/// `redis.log` and the levels, `REDIS_VERSION` and `REDIS_VERSION_NUM`, into `t`.
fn log_and_version(lua: &Lua, t: &Table) -> mlua::Result<()> {
    t.set(
        "log",
        lua.create_function(|_, a: MultiValue| {
            if a.len() < 2 {
                return Err(fail("redis.log() requires two arguments or more."));
            }
            let level = match &a[0] {
                Value::Number(n) => *n as i64,
                Value::Integer(i) => *i,
                _ => return Err(fail("First argument must be a number (log level).")),
            };
            if !(0..=3).contains(&level) {
                return Err(fail("Invalid debug level."));
            }
            let text: Vec<String> = a
                .iter()
                .skip(1)
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.to_string_lossy()),
                    Value::Number(n) => Some(n.to_string()),
                    Value::Integer(i) => Some(i.to_string()),
                    _ => None,
                })
                .collect();
            let text = text.join(" ");
            match level {
                3 => tracing::warn!(script_log = %text),
                2 => tracing::info!(script_log = %text),
                _ => tracing::debug!(script_log = %text),
            }
            Ok(())
        })?,
    )?;
    for (name, v) in [("LOG_DEBUG", 0.0), ("LOG_VERBOSE", 1.0), ("LOG_NOTICE", 2.0), ("LOG_WARNING", 3.0)] {
        t.set(name, v)?;
    }
    t.set("REDIS_VERSION", REDIS_VERSION)?;
    t.set("REDIS_VERSION_NUM", version_num())?;
    Ok(())
}

/// The `redis` table of a running script (`call` and `pcall` are added by the sandbox).
fn redis_api(lua: &Lua, kind: Kind, shared: &Shared) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    log_and_version(lua, &t)?;
    let s = shared.clone();
    t.set(
        "setresp",
        lua.create_function(move |_, a: MultiValue| {
            if !s.borrow().active {
                return Err(fail("redis.setresp can only be called inside a script invocation"));
            }
            if a.len() != 1 {
                return Err(fail("redis.setresp() requires one argument."));
            }
            let n = match &a[0] {
                Value::Number(n) => *n as i64,
                Value::Integer(i) => *i,
                _ => 0,
            };
            let proto = match n {
                2 => crate::resp::Proto::Resp2,
                3 => crate::resp::Proto::Resp3,
                _ => return Err(fail("RESP version must be 2 or 3.")),
            };
            s.borrow_mut().resp = proto;
            Ok(())
        })?,
    )?;
    t.set(
        "sha1hex",
        lua.create_function(|_, a: MultiValue| {
            if a.len() != 1 {
                return Err(fail("wrong number of arguments"));
            }
            let bytes = match &a[0] {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Number(n) => super::convert::fmt_g(*n, 14).into_bytes(),
                Value::Integer(i) => i.to_string().into_bytes(),
                _ => Vec::new(),
            };
            Ok(super::sha1hex(&bytes))
        })?,
    )?;
    t.set(
        "error_reply",
        lua.create_function(|lua, a: MultiValue| {
            let msg = match (a.len(), a.front()) {
                (1, Some(Value::String(s))) => s.as_bytes().to_vec(),
                _ => return error_table(lua, b"wrong number or type of arguments"),
            };
            let msg = if msg.starts_with(b"-") { msg } else { [&b"-"[..], &msg].concat() };
            error_table(lua, &msg)
        })?,
    )?;
    t.set(
        "status_reply",
        lua.create_function(|lua, a: MultiValue| {
            let t = match (a.len(), a.front()) {
                (1, Some(Value::String(s))) => {
                    let t = lua.create_table()?;
                    t.raw_set("ok", s.clone())?;
                    t
                }
                _ => error_table(lua, b"wrong number or type of arguments")?,
            };
            Ok(t)
        })?,
    )?;
    let s = shared.clone();
    t.set(
        "set_repl",
        lua.create_function(move |_, a: MultiValue| {
            if !s.borrow().active {
                return Err(fail("redis.set_repl can only be called inside a script invocation"));
            }
            if a.len() != 1 {
                return Err(fail("redis.set_repl() requires two arguments."));
            }
            let flags = match &a[0] {
                Value::Number(n) => *n as i64,
                Value::Integer(i) => *i,
                _ => 0,
            };
            if flags & !3 != 0 {
                return Err(fail(
                    "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                ));
            }
            // Every write of a script is in its group, whatever it asks: nothing to change.
            Ok(())
        })?,
    )?;
    for (name, v) in
        [("REPL_NONE", 0.0), ("REPL_AOF", 1.0), ("REPL_SLAVE", 2.0), ("REPL_REPLICA", 2.0), ("REPL_ALL", 3.0)]
    {
        t.set(name, v)?;
    }
    t.set(
        "acl_check_cmd",
        lua.create_function(|_, a: MultiValue| {
            let Some(Value::String(name)) = a.front() else {
                return Err(fail("Please specify at least one argument for this redis lib call"));
            };
            let mut b = [0u8; 32];
            match crate::cmd::args::upper(&name.as_bytes(), &mut b).and_then(crate::cmd::find_spec) {
                // No ACLs: the default user may run every command.
                Some(_) => Ok(true),
                None => Err(fail("Invalid command passed to redis.acl_check_cmd()")),
            }
        })?,
    )?;
    if kind == Kind::Eval {
        t.set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    }
    Ok(t)
}

/// Redis's `math.random` and `math.randomseed`: `lrand48`'s sequence, one for the state,
/// whatever the platform.
fn random(lua: &Lua) -> mlua::Result<(Function, Function)> {
    let x = Rc::new(Cell::new(0x1234_ABCD_330Eu64));
    let next = {
        let x = x.clone();
        move || {
            let v = x.get().wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xB) & ((1 << 48) - 1);
            x.set(v);
            (v >> 17) as i64
        }
    };
    let random = lua.create_function(move |_, a: MultiValue| {
        const MAX: i64 = i32::MAX as i64;
        let r = (next() % MAX) as f64 / MAX as f64;
        let int = |v: &Value| match v {
            Value::Number(n) => Ok(*n as i64),
            Value::Integer(i) => Ok(*i),
            _ => Err(fail("bad argument to 'random' (number expected)")),
        };
        match a.len() {
            0 => Ok(r),
            1 => {
                let u = int(&a[0])?;
                if u < 1 {
                    return Err(fail("bad argument #1 to 'random' (interval is empty)"));
                }
                Ok((r * u as f64).floor() + 1.0)
            }
            2 => {
                let (l, u) = (int(&a[0])?, int(&a[1])?);
                if l > u {
                    return Err(fail("bad argument #2 to 'random' (interval is empty)"));
                }
                Ok((r * (u - l + 1) as f64).floor() + l as f64)
            }
            _ => Err(fail("wrong number of arguments")),
        }
    })?;
    let seed = lua.create_function(move |_, a: MultiValue| {
        let s = match a.front() {
            Some(Value::Number(n)) => *n as i64,
            Some(Value::Integer(i)) => *i,
            Some(Value::String(s)) => {
                s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()).map_or(0, |f| f as i64)
            }
            _ => return Err(fail("bad argument #1 to 'randomseed' (number expected)")),
        };
        x.set((((s as i32) as u32 as u64) << 16) | 0x330E);
        Ok(())
    })?;
    Ok((random, seed))
}

/// The `redis` table a library's code sees while `FUNCTION LOAD` runs it.
fn library_redis(lua: &Lua, shared: &Shared) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    log_and_version(lua, &t)?;
    let s = shared.clone();
    t.set(
        "register_function",
        lua.create_function(move |_, a: MultiValue| {
            let f = read_registration(&a)?;
            let mut run = s.borrow_mut();
            let Some(load) = run.loading.as_mut() else {
                return Err(fail("redis.register_function can only be called on FUNCTION LOAD command"));
            };
            if !shebang::valid_name(&f.name) {
                return Err(fail(
                    "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
                ));
            }
            if load.functions.iter().any(|g| g.name == f.name) {
                return Err(fail("Function already exists in the library"));
            }
            load.functions.push(f);
            Ok(())
        })?,
    )?;
    Ok(t)
}

/// A function `redis.register_function` was given.
pub struct Registered {
    /// Its name.
    pub name: Vec<u8>,
    /// `description`, if given.
    pub description: Option<Vec<u8>>,
    /// Its flags (`shebang::FLAGS`).
    pub flags: u32,
    /// The callback.
    pub callback: Function,
}

fn as_text(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Number(n) => Some(super::convert::fmt_g(*n, 14).into_bytes()),
        Value::Integer(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

fn read_registration(a: &MultiValue) -> mlua::Result<Registered> {
    match a.len() {
        2 => {
            let name = as_text(&a[0])
                .ok_or_else(|| fail("first argument to redis.register_function must be a string"))?;
            let Value::Function(callback) = &a[1] else {
                return Err(fail("second argument to redis.register_function must be a function"));
            };
            Ok(Registered { name, description: None, flags: 0, callback: callback.clone() })
        }
        1 => {
            let Value::Table(t) = &a[0] else {
                return Err(fail("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."));
            };
            let (mut name, mut description, mut flags, mut callback) = (None, None, 0, None);
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Some(key) = as_text(&k) else {
                    return Err(fail("named argument key given to redis.register_function is not a string"));
                };
                let key = String::from_utf8_lossy(&key).to_ascii_lowercase();
                match key.as_str() {
                    "function_name" => {
                        name = Some(as_text(&v).ok_or_else(|| {
                            fail("function_name argument given to redis.register_function must be a string")
                        })?)
                    }
                    "description" => {
                        description = Some(as_text(&v).ok_or_else(|| {
                            fail("description argument given to redis.register_function must be a string")
                        })?)
                    }
                    "callback" => match v {
                        Value::Function(f) => callback = Some(f),
                        _ => {
                            return Err(fail(
                                "callback argument given to redis.register_function must be a function",
                            ))
                        }
                    },
                    "flags" => {
                        let Value::Table(list) = v else {
                            return Err(fail(
                                "flags argument to redis.register_function must be a table representing function flags",
                            ));
                        };
                        for i in 1.. {
                            let f: Value = list.get(i)?;
                            if f.is_nil() {
                                break;
                            }
                            let f = as_text(&f).map(|b| String::from_utf8_lossy(&b).to_ascii_lowercase());
                            match f.and_then(|f| shebang::FLAGS.iter().find(|(n, _)| *n == f)) {
                                Some((_, bit)) => flags |= bit,
                                None => return Err(fail("unknown flag given")),
                            }
                        }
                    }
                    _ => return Err(fail("unknown argument given to redis.register_function")),
                }
            }
            let name =
                name.ok_or_else(|| fail("redis.register_function must get a function name argument"))?;
            let callback =
                callback.ok_or_else(|| fail("redis.register_function must get a callback argument"))?;
            Ok(Registered { name, description, flags, callback })
        }
        _ => Err(fail("wrong number of arguments to redis.register_function")),
    }
}

impl State {
    /// A new state of `kind`, sandboxed.
    pub fn new(kind: Kind) -> mlua::Result<State> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::new())?;
        lua.set_memory_limit(LUA_MEMORY_LIMIT)?;
        let shared: Shared = Rc::new(std::cell::RefCell::new(Run::default()));
        let globals = lua.globals();
        globals.set("redis", redis_api(&lua, kind, &shared)?)?;
        globals.set("cjson", libs::cjson::open(&lua)?)?;
        globals.set("bit", libs::bit::open(&lua)?)?;
        globals.set("cmsgpack", libs::cmsgpack::open(&lua)?)?;
        let raw_next: Function = globals.get("next")?;
        let math: Table = globals.get("math")?;
        let (random, seed) = random(&lua)?;
        math.set("random", random)?;
        math.set("randomseed", seed)?;
        let p = lua.create_table()?;
        let s = shared.clone();
        p.set("killed", lua.create_function(move |_, ()| Ok(s.borrow().must_stop()))?)?;
        p.set(
            "call",
            lua.create_function(|lua, a: (usize, Table)| -> mlua::Result<(Value, bool)> {
                match lua.named_registry_value::<Value>(super::run::CALL_KEY)? {
                    Value::Function(f) => f.call::<(Value, bool)>(a),
                    _ => Ok((
                        Value::Table(error_table(
                            lua,
                            b"redis.call/pcall can only be called inside a script invocation",
                        )?),
                        true,
                    )),
                }
            })?,
        )?;
        p.set(
            "where",
            lua.create_function(|lua, ()| {
                for level in 1..64 {
                    let found = lua.inspect_stack(level, |d| {
                        let src = d.source();
                        let name = src.source.as_deref().unwrap_or("").to_string();
                        (name, d.current_line())
                    });
                    let Some((src, line)) = found else { break };
                    if src.starts_with("@user_") {
                        return Ok((Some(src), line.map(|l| l as i64)));
                    }
                }
                Ok((None, None))
            })?,
        )?;
        let prelude = lua
            .load(include_str!("sandbox.lua"))
            .set_name("=sandbox")
            .set_mode(ChunkMode::Text)
            .into_function()?;
        let (env, env_mt, protect, strict, runner, handler): (
            Table,
            Table,
            Function,
            Function,
            Function,
            Function,
        ) = prelude.call(p)?;
        let library_api = match kind {
            Kind::Eval => None,
            Kind::Functions => {
                let r = library_redis(&lua, &shared)?;
                strict.call::<Table>(r.clone())?;
                let api = lua.create_table()?;
                api.raw_set("redis", r)?;
                strict.call::<Table>(api.clone())?;
                protect.call::<Table>(api.clone())?;
                Some(api)
            }
        };
        lua.set_globals(env.clone())?;
        Ok(State {
            lua,
            env,
            env_mt,
            globals,
            library_api,
            runner,
            handler,
            shared,
            raw_next,
            runs: Cell::new(0),
        })
    }

    /// Compiles `code` (text only) as a chunk named `name` in the sandbox.
    pub fn compile(&self, code: &[u8], name: &str) -> Result<Function, String> {
        self.lua
            .load(code)
            .set_name(name)
            .set_mode(ChunkMode::Text)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| error_text(&e))
    }
}

/// The message of a Lua error, without mlua's wrapping (tracebacks, "runtime error: ").
pub fn error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        // A Lua error that reaches Rust through a call has the stack's traceback appended
        // (mlua's message handler): Redis's text has none.
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => {
            m.split_once("\nstack traceback:").map_or(m.as_str(), |(m, _)| m).to_string()
        }
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::WithContext { cause, .. } => error_text(cause),
        other => other.to_string(),
    }
}
