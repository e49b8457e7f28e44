-- The sandbox of a mojim kv Lua state, run once when the state is made, before any script.
--
-- Redis locks its globals with a change to its Lua VM (read-only tables). Plain Lua 5.1 has
-- none, so every table a script can reach is reached through an empty proxy whose metatable
-- reads from the real table and refuses writes; the functions that write tables without
-- metamethods (rawset, setmetatable, table.insert/remove/sort, setfenv) refuse a proxy; getfenv
-- answers the proxy where it would answer a real table; binary chunks are refused. The real
-- tables are reachable from nothing a script holds.
--
-- Arguments: P, the primitives the server gives (Rust functions); returns the proxies the
-- server keeps: the globals' proxy (a script's environment), its metatable (whose __index the
-- server points at the library API while FUNCTION LOAD runs), and the function that protects
-- a table.
local P = ...
local error, type, tostring, rawset, next, select, setmetatable, getmetatable =
  error, type, tostring, rawset, next, select, setmetatable, getmetatable
local pcall, xpcall, getfenv, setfenv, loadstring = pcall, xpcall, getfenv, setfenv, loadstring
local sbyte, tconcat = string.byte, table.concat
local resume = coroutine.resume
local tinsert, tremove, tsort = table.insert, table.remove, table.sort
local killed = P.killed

local G = getfenv(0)
G.dofile, G.loadfile, G.print, G.module, G.require = nil, nil, nil, nil, nil

-- proxy -> real table, real table -> proxy.
local real_of = setmetatable({}, { __mode = 'k' })
local proxy_of = setmetatable({}, { __mode = 'k' })

-- Redis's VM refuses a write to a read-only table placed as a Lua error is (`user_script:1: `)
-- when the script writes it (`level`: the script's frame from this function's caller), and
-- unplaced (level 0) when a C function (rawset, setmetatable, ...) does.
local function refuse(level)
  error('Attempt to modify a readonly table', level > 0 and level + 1 or 0)
end

-- The globals' __index, run by the VM for the script's read: placed at the script, as Redis's
-- luaL_error is.
local function nonexistent(_, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end

local frozen_mt = {}
-- proxy -> its metatable (scripts see `frozen_mt` in its place).
local mt_of = setmetatable({}, { __mode = 'k' })
local function protect(t)
  if real_of[t] then return t end
  local p = proxy_of[t]
  if p then return p end
  p = {}
  proxy_of[t], real_of[p] = p, t
  for k, v in next, t do
    if type(v) == 'table' then rawset(t, k, protect(v)) end
  end
  local mt = {
    __index = t,
    __newindex = function() refuse(2) end,
    __metatable = frozen_mt,
  }
  mt_of[p] = mt
  setmetatable(p, mt)
  return p
end
frozen_mt = protect({})

-- Makes missing keys of `t` an error, as Redis's globals.
local function strict(t)
  setmetatable(t, { __index = nonexistent })
  return t
end

-- A caught error is thrown again once the script is killed (or must stop): pcall cannot keep
-- a killed script alive.
local function caught(ok, ...)
  if not ok and killed() then error((...), 0) end
  return ok, ...
end

-- Redis's pcall: an error table's `err` is what the caller gets.
local function pcall_result(ok, ...)
  if ok then return true, ... end
  if killed() then error((...), 0) end
  local e = ...
  if type(e) == 'table' then
    local m = e.err
    if type(m) == 'string' or type(m) == 'number' then e = m end
  end
  return false, e
end

G.pcall = function(f, ...) return pcall_result(pcall(f, ...)) end
G.xpcall = function(f, h) return caught(xpcall(f, h)) end
coroutine.resume = function(co, ...) return caught(resume(co, ...)) end

G.setmetatable = function(t, mt)
  if real_of[t] then refuse(0) end
  return setmetatable(t, mt)
end
G.rawset = function(t, k, v)
  if real_of[t] then refuse(0) end
  return rawset(t, k, v)
end
G.next = function(t, k)
  return next(real_of[t] or t, k)
end
G.pairs = function(t)
  return G.next, t, nil
end
table.insert = function(t, ...)
  if real_of[t] then refuse(0) end
  return tinsert(t, ...)
end
table.remove = function(t, ...)
  if real_of[t] then refuse(0) end
  return tremove(t, ...)
end
table.sort = function(t, ...)
  if real_of[t] then refuse(0) end
  return tsort(t, ...)
end

-- Levels count from the caller of these wrappers.
local function level(f)
  if f == nil then return 2 end
  if type(f) == 'number' and f > 0 then return f + 1 end
  return f
end
G.getfenv = function(f)
  local e = getfenv(level(f))
  return proxy_of[e] or e
end
G.setfenv = function(f, t)
  if f == 0 then refuse(0) end
  local target = level(f)
  if proxy_of[getfenv(target)] then refuse(0) end
  return setfenv(target, t)
end

local globals -- the globals' proxy, set below
G.loadstring = function(s, name)
  if type(s) == 'string' and sbyte(s, 1) == 27 then
    return nil, 'binary chunks are not allowed'
  end
  local f, e = loadstring(s, name)
  if f then setfenv(f, globals) end
  return f, e
end
G.load = function(reader, name)
  local parts = {}
  while true do
    local piece = reader()
    if piece == nil or piece == '' then break end
    if type(piece) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = piece
  end
  return G.loadstring(tconcat(parts), name or '=(load)')
end

-- Runs `f(a, b)` under `handler`; (ok, value).
local function run(f, handler, a, b)
  return xpcall(function() return f(a, b) end, handler)
end

-- Adds where the error happened, as Redis's error handler does.
local where = P.where
local function handler(err)
  if type(err) ~= 'table' then err = { err = 'ERR ' .. tostring(err) } end
  local src, line = where()
  if src and not real_of[err] then
    rawset(err, 'source', src)
    rawset(err, 'line', line)
  end
  return err
end

-- redis.call raises a command's error (a table whose `err` is the error), redis.pcall returns it.
local redis = G.redis
if redis then
  local raw_call = P.call
  -- The arguments go as one table: a script may pass thousands.
  redis.call = function(...)
    local v, failed = raw_call(select('#', ...), { ... })
    if failed then error(v, 0) end
    return v
  end
  redis.pcall = function(...)
    local v, failed = raw_call(select('#', ...), { ... })
    if failed and killed() then error(v, 0) end
    return v
  end
end

-- The string metatable's __index is the string library's proxy.
local smt = getmetatable('')
smt.__index = protect(string)
smt.__metatable = frozen_mt

strict(G)
globals = protect(G)
rawset(G, '_G', globals)
local globals_mt = mt_of[globals]
-- The proxy's metatable is the server's to point elsewhere (FUNCTION LOAD's API); scripts see
-- `frozen_mt`.
return globals, globals_mt, protect, strict, run, handler
