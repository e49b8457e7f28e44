//! `bit`: LuaBitOp's operations on 32-bit integers (numbers are taken modulo 2^32, rounded as
//! LuaBitOp rounds them).

use mlua::{Lua, MultiValue, Table, Value};

/// A number's 32 bits as LuaBitOp takes them: the low word of `n + 2^52 + 2^51`.
pub fn tobit(n: f64) -> i32 {
    (n + 6755399441055744.0).to_bits() as u32 as i32
}

fn arg(args: &MultiValue, i: usize, name: &str) -> mlua::Result<i32> {
    match args.get(i) {
        Some(Value::Number(n)) => Ok(tobit(*n)),
        Some(Value::Integer(n)) => Ok(tobit(*n as f64)),
        Some(Value::String(s)) => match s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()) {
            Some(n) => Ok(tobit(n)),
            None => Err(bad(i, name, "string")),
        },
        other => Err(bad(i, name, other.map_or("no value", |v| v.type_name()))),
    }
}

fn bad(i: usize, name: &str, got: &str) -> mlua::Error {
    mlua::Error::runtime(format!("bad argument #{} to '{name}' (number expected, got {got})", i + 1))
}

fn fold(args: &MultiValue, name: &str, f: fn(i32, i32) -> i32) -> mlua::Result<f64> {
    let mut acc = arg(args, 0, name)?;
    for i in 1..args.len() {
        acc = f(acc, arg(args, i, name)?);
    }
    Ok(f64::from(acc))
}

/// The `bit` table.
pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("tobit", lua.create_function(|_, a: MultiValue| Ok(f64::from(arg(&a, 0, "tobit")?)))?)?;
    t.set("bnot", lua.create_function(|_, a: MultiValue| Ok(f64::from(!arg(&a, 0, "bnot")?)))?)?;
    t.set("band", lua.create_function(|_, a: MultiValue| fold(&a, "band", |x, y| x & y))?)?;
    t.set("bor", lua.create_function(|_, a: MultiValue| fold(&a, "bor", |x, y| x | y))?)?;
    t.set("bxor", lua.create_function(|_, a: MultiValue| fold(&a, "bxor", |x, y| x ^ y))?)?;
    let shift = |name: &'static str, f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, a: MultiValue| {
            let (x, n) = (arg(&a, 0, name)?, arg(&a, 1, name)? as u32 & 31);
            Ok(f64::from(f(x, n)))
        })
    };
    t.set("lshift", shift("lshift", |x, n| ((x as u32) << n) as i32)?)?;
    t.set("rshift", shift("rshift", |x, n| ((x as u32) >> n) as i32)?)?;
    t.set("arshift", shift("arshift", |x, n| x >> n)?)?;
    t.set("rol", shift("rol", |x, n| (x as u32).rotate_left(n) as i32)?)?;
    t.set("ror", shift("ror", |x, n| (x as u32).rotate_right(n) as i32)?)?;
    t.set(
        "bswap",
        lua.create_function(|_, a: MultiValue| Ok(f64::from(arg(&a, 0, "bswap")?.swap_bytes())))?,
    )?;
    t.set(
        "tohex",
        lua.create_function(|_, a: MultiValue| {
            let x = arg(&a, 0, "tohex")? as u32;
            let n = if a.len() > 1 { arg(&a, 1, "tohex")? } else { 8 };
            let (upper, n) = (n < 0, n.unsigned_abs().min(8) as usize);
            let s = if upper { format!("{x:08X}") } else { format!("{x:08x}") };
            Ok(s[8 - n..].to_string())
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn luabitop_semantics() {
        let lua = mlua::Lua::new();
        lua.globals().set("bit", super::open(&lua).unwrap()).unwrap();
        let ok: bool = lua
            .load(
                "return bit.tobit(1) == 1 and bit.band(1) == 1 and bit.bxor(1,2) == 3 \
                 and bit.bor(1,2,4,8,16,32,64,128) == 255 and bit.tobit(0xffffffff) == -1 \
                 and bit.lshift(1, 31) == -2147483648 and bit.rshift(-1, 28) == 15 \
                 and bit.arshift(-256, 4) == -16 and bit.tohex(255) == '000000ff' \
                 and bit.tohex(-1, -4) == 'FFFF' and bit.bswap(0x12345678) == 0x78563412 \
                 and bit.rol(0x12345678, 12) == 0x45678123 and bit.bnot(0) == -1",
            )
            .eval()
            .unwrap();
        assert!(ok);
        assert!(lua.load("return bit.band({})").exec().unwrap_err().to_string().contains("bad argument #1"));
    }
}
