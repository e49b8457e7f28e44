//! The libraries Redis gives its scripts besides Lua's own: `bit` (LuaBitOp), `cjson` and
//! `cmsgpack`, each written here to Redis's behaviour.

pub mod bit;
pub mod cjson;
pub mod cmsgpack;
