//! Libraries of functions (`FUNCTION LOAD`, `FCALL`): each library's code, and the functions
//! its code registered, found by name ignoring case. They live in the server's heap, as the
//! script cache does: a restart starts with none (`FUNCTION DUMP` and `FUNCTION RESTORE` carry
//! them across).

use super::run::load_library;
use super::shebang;
use super::state::State;
use crate::cmd::rdb;
use std::collections::{BTreeMap, HashMap};

/// A registered function.
pub struct Function {
    /// Its name, as registered.
    pub name: Vec<u8>,
    /// Its description.
    pub description: Option<Vec<u8>>,
    /// Its flags (`shebang::FLAGS`).
    pub flags: u32,
    /// The Lua function.
    pub callback: mlua::Function,
}

/// A library: its code (with its `#!` line) and functions, in the order registered.
pub struct Library {
    /// The whole code `FUNCTION LOAD` was given.
    pub code: Vec<u8>,
    /// Its functions.
    pub functions: Vec<Function>,
}

/// Every library, by name.
#[derive(Default)]
pub struct Libraries {
    libs: BTreeMap<Vec<u8>, Library>,
    /// Function name (lower case) -> its library.
    index: HashMap<Vec<u8>, Vec<u8>>,
}

/// The opcode of a library in a `FUNCTION DUMP` payload (RDB's `FUNCTION2`).
const OPCODE_FUNCTION2: u8 = 245;
/// Redis 7.0's release candidates' opcode, which it no longer loads.
const OPCODE_FUNCTION_PRE_GA: u8 = 246;

impl Libraries {
    /// Libraries.
    pub fn len(&self) -> usize {
        self.libs.len()
    }

    /// Functions.
    pub fn functions(&self) -> usize {
        self.index.len()
    }

    /// The libraries, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Library)> {
        self.libs.iter()
    }

    /// A function by name (any case).
    pub fn find(&self, name: &[u8]) -> Option<&Function> {
        let lib = self.index.get(&name.to_ascii_lowercase())?;
        self.libs.get(lib)?.functions.iter().find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Removes every library.
    pub fn clear(&mut self) {
        self.libs.clear();
        self.index.clear();
    }

    fn unlink(&mut self, name: &[u8]) -> Option<Library> {
        let lib = self.libs.remove(name)?;
        for f in &lib.functions {
            self.index.remove(&f.name.to_ascii_lowercase());
        }
        Some(lib)
    }

    fn link(&mut self, name: Vec<u8>, lib: Library) {
        for f in &lib.functions {
            self.index.insert(f.name.to_ascii_lowercase(), name.clone());
        }
        self.libs.insert(name, lib);
    }

    /// `FUNCTION DELETE`: whether it was there.
    pub fn delete(&mut self, name: &[u8]) -> bool {
        self.unlink(name).is_some()
    }

    /// `FUNCTION LOAD`: runs the code and adds the library (replacing one of its name when
    /// `replace`); its name, or Redis's error (without its code). Nothing changes on error.
    pub fn load(&mut self, st: &State, code: &[u8], replace: bool) -> Result<Vec<u8>, String> {
        let meta = shebang::library_meta(code)?;
        if !shebang::valid_name(&meta.name) {
            return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
        }
        if !meta.engine.eq_ignore_ascii_case(b"lua") {
            return Err(format!("Engine '{}' not found", String::from_utf8_lossy(&meta.engine)));
        }
        if self.libs.contains_key(&meta.name) && !replace {
            return Err(format!("Library '{}' already exists", String::from_utf8_lossy(&meta.name)));
        }
        let registered = load_library(st, &code[meta.code_at..])?;
        if registered.is_empty() {
            return Err("No functions registered".into());
        }
        for f in &registered {
            if let Some(owner) = self.index.get(&f.name.to_ascii_lowercase()) {
                if *owner != meta.name {
                    return Err(format!("Function {} already exists", String::from_utf8_lossy(&f.name)));
                }
            }
        }
        self.unlink(&meta.name);
        let functions = registered
            .into_iter()
            .map(|r| Function {
                name: r.name,
                description: r.description,
                flags: r.flags,
                callback: r.callback,
            })
            .collect();
        self.link(meta.name.clone(), Library { code: code.to_vec(), functions });
        Ok(meta.name)
    }

    /// `FUNCTION DUMP`'s payload: each library's code, then RDB's trailer.
    pub fn dump(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for lib in self.libs.values() {
            out.push(OPCODE_FUNCTION2);
            rdb::wire::write_string(&lib.code, &mut out);
        }
        rdb::seal(&mut out);
        out
    }

    /// `FUNCTION RESTORE`: the libraries of a payload, added by `policy` (`FLUSH`, `APPEND`,
    /// `REPLACE`); Redis's error otherwise, and nothing changes.
    pub fn restore(&mut self, st: &State, payload: &[u8], policy: Policy) -> Result<(), String> {
        let body =
            rdb::open(payload).map_err(|_| "DUMP payload version or checksum are wrong".to_string())?;
        let limits = rdb::Limits { max_string: 512 << 20, max_total: 512 << 20 };
        let mut r = rdb::wire::Reader::new(body, limits);
        let mut new = Libraries::default();
        while !r.is_empty() {
            match r.byte().map_err(|_| "can not read data type".to_string())? {
                OPCODE_FUNCTION2 => {}
                OPCODE_FUNCTION_PRE_GA => return Err("Pre-GA function format not supported".into()),
                _ => return Err("given type is not a function".into()),
            }
            let code = r.string().map_err(|_| "failed loading the given functions payload".to_string())?;
            new.load(st, &code, false)?;
        }
        match policy {
            Policy::Flush => *self = new,
            Policy::Append | Policy::Replace => {
                for name in new.libs.keys() {
                    if self.libs.contains_key(name) && policy == Policy::Append {
                        return Err(format!("Library {} already exists", String::from_utf8_lossy(name)));
                    }
                }
                for (name, lib) in &new.libs {
                    for f in &lib.functions {
                        if let Some(owner) = self.index.get(&f.name.to_ascii_lowercase()) {
                            if owner != name {
                                return Err(format!(
                                    "Function {} already exists",
                                    String::from_utf8_lossy(&f.name)
                                ));
                            }
                        }
                    }
                }
                for (name, lib) in std::mem::take(&mut new.libs) {
                    self.unlink(&name);
                    self.link(name, lib);
                }
            }
        }
        Ok(())
    }
}

/// How `FUNCTION RESTORE` treats the libraries there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Drop them first.
    Flush,
    /// Keep them; a library of the same name is an error.
    Append,
    /// Keep them; one of the same name is replaced.
    Replace,
}
