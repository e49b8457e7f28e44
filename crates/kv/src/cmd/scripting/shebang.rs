//! The first line of a script (`#!lua flags=no-writes,allow-oom`) and of a library
//! (`#!lua name=mylib`), read as Redis reads them.

/// The script may not write (`no-writes`).
pub const NO_WRITES: u32 = 1;
/// The script may run when memory is short (`allow-oom`).
pub const ALLOW_OOM: u32 = 1 << 1;
/// The script may run on a stale replica (`allow-stale`).
pub const ALLOW_STALE: u32 = 1 << 2;
/// The script refuses to run in a cluster (`no-cluster`).
pub const NO_CLUSTER: u32 = 1 << 3;
/// The script may touch keys of several slots (`allow-cross-slot-keys`).
pub const ALLOW_CROSS_SLOT: u32 = 1 << 4;

/// The flags by name, in the order Redis lists them.
pub const FLAGS: &[(&str, u32)] = &[
    ("no-writes", NO_WRITES),
    ("allow-oom", ALLOW_OOM),
    ("allow-stale", ALLOW_STALE),
    ("no-cluster", NO_CLUSTER),
    ("allow-cross-slot-keys", ALLOW_CROSS_SLOT),
];

/// What an `EVAL` script's first line declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptFlags {
    /// No shebang: Redis's compatibility mode (writes allowed, flags from the commands run).
    pub compat: bool,
    /// The declared flags.
    pub flags: u32,
    /// Bytes of the shebang line (without its line feed, which the code keeps for its line
    /// numbers).
    pub shebang_len: usize,
}

/// Splits a line into arguments as Redis's `sdssplitargs` does: spaces separate, double quotes
/// take C escapes, single quotes take none; `None` for unbalanced quotes or a quote closed
/// without a space after it.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut dq, mut sq) = (false, false);
        loop {
            if dq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                    let hex = |b: u8| (b as char).to_digit(16);
                    if let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        cur.push((h * 16 + l) as u8);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < n {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        o => o,
                    });
                } else if c == b'"' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    dq = false;
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if sq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    sq = false;
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' => dq = true,
                    b'\'' => sq = true,
                    c => cur.push(c),
                }
            }
            i += 1;
        }
        let _ = (dq, sq);
        out.push(cur);
    }
}

/// Reads an `EVAL` script's shebang, if it has one; the error is Redis's (without its code).
pub fn script_flags(body: &[u8]) -> Result<ScriptFlags, String> {
    if !body.starts_with(b"#!") {
        return Ok(ScriptFlags { compat: true, flags: 0, shebang_len: 0 });
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let parts = match split_args(&body[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("Invalid engine in script shebang".into()),
    };
    if parts[0] != b"#!lua" {
        return Err(format!("Unexpected engine in script shebang: {}", String::from_utf8_lossy(&parts[0])));
    }
    let mut flags = 0;
    for p in &parts[1..] {
        let Some(list) = p.strip_prefix(b"flags=") else {
            return Err(format!("Unknown lua shebang option: {}", String::from_utf8_lossy(p)));
        };
        if list.is_empty() {
            continue;
        }
        for f in list.split(|&b| b == b',') {
            match FLAGS.iter().find(|(name, _)| name.as_bytes() == f) {
                Some((_, bit)) => flags |= bit,
                None => {
                    return Err(format!("Unexpected flag in script shebang: {}", String::from_utf8_lossy(f)))
                }
            }
        }
    }
    Ok(ScriptFlags { compat: false, flags, shebang_len: end })
}

/// What a library's first line says: its engine and name, and its code (from the line feed
/// on).
#[derive(Debug, PartialEq, Eq)]
pub struct LibraryMeta {
    /// The engine, as given (`LUA`, `lua`).
    pub engine: Vec<u8>,
    /// The library's name.
    pub name: Vec<u8>,
    /// The code after the first line, its line feed first.
    pub code_at: usize,
}

/// Reads a library's metadata line, with Redis's errors.
pub fn library_meta(payload: &[u8]) -> Result<LibraryMeta, String> {
    if !payload.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = payload.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let parts = match split_args(&payload[..end]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("Invalid library metadata".into()),
    };
    let engine = parts[0][2..].to_vec();
    let mut name = None;
    for p in &parts[1..] {
        if p.len() >= 5 && p[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err("Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(p[5..].to_vec());
            continue;
        }
        return Err(format!("Invalid metadata value given: {}", String::from_utf8_lossy(p)));
    }
    let Some(name) = name else { return Err("Library name was not given".into()) };
    Ok(LibraryMeta { engine, name, code_at: end })
}

/// Whether a library or function name is one Redis accepts: letters, digits and `_`, at least
/// one.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_as_redis_reads_them() {
        assert!(script_flags(b"return 1").unwrap().compat);
        let f = script_flags(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert_eq!((f.compat, f.flags, f.shebang_len), (false, NO_WRITES | ALLOW_OOM, 31));
        assert_eq!(script_flags(b"#!lua flags=\nreturn 1").unwrap().flags, 0);
        assert!(script_flags(b"#!not-lua\n").unwrap_err().contains("Unexpected engine"));
        assert!(script_flags(b"#!lua badger=data\n").unwrap_err().contains("Unknown lua shebang option"));
        assert!(script_flags(b"#!lua flags=allow-oom,what?\n").unwrap_err().contains("Unexpected flag"));
        assert_eq!(script_flags(b"#!lua").unwrap_err(), "Invalid script shebang");
    }

    #[test]
    fn library_metadata() {
        let m = library_meta(b"#!lua name=\"foo\"\nreturn").unwrap();
        assert_eq!((m.engine.as_slice(), m.name.as_slice(), m.code_at), (&b"lua"[..], &b"foo"[..], 16));
        assert_eq!(library_meta(b"return").unwrap_err(), "Missing library metadata");
        assert!(library_meta(b"#!lua name=a name=b\n").unwrap_err().contains("multiple times"));
        assert!(library_meta(b"#!lua foo=bar\n")
            .unwrap_err()
            .contains("Invalid metadata value given: foo=bar"));
        assert_eq!(library_meta(b"#!lua\n").unwrap_err(), "Library name was not given");
        assert!(valid_name(b"a_1") && !valid_name(b"") && !valid_name(b"bad\0name"));
        assert_eq!(
            split_args(b"a 'b c' \"d\\x41\"").unwrap(),
            vec![b"a".to_vec(), b"b c".to_vec(), b"dA".to_vec()]
        );
        assert!(split_args(b"\"open").is_none());
    }
}
