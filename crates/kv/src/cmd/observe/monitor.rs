//! `MONITOR`'s lines, as Redis writes them: `<seconds>.<microseconds> [<db> <client address>]`
//! then each argument in double quotes, escaped as Redis's `sdscatrepr` escapes it (`\"`, `\\`,
//! `\n`, `\r`, `\t`, `\a`, `\b`, and `\xhh` for any other byte that is not printable).
//!
//! Which commands are shown is Redis's rule too: those that ran (not those refused before), but
//! not the `admin` ones (`CONFIG`, `ACL`, ...) and not those that carry a password (`AUTH`,
//! `HELLO`, which Redis flags `skip_monitor`), nor `MONITOR` itself.

use std::io::Write;

/// Appends `b` in double quotes, escaped.
fn repr(b: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in b {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c),
            c => {
                let _ = write!(out, "\\x{c:02x}");
            }
        }
    }
    out.push(b'"');
}

/// Whether a call of `name` (with `flags`) is shown to monitors.
pub fn shown(name: &str, flags: &[&str]) -> bool {
    !flags.contains(&"admin") && !matches!(name, "AUTH" | "HELLO" | "MONITOR")
}

/// The line of a command run at `unix_us` (microseconds) in database `db` by the client at
/// `addr` (a script's commands: `lua`).
pub fn line<'a>(unix_us: u128, db: usize, addr: &str, args: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let _ = write!(out, "{}.{:06} [{db} {addr}]", unix_us / 1_000_000, unix_us % 1_000_000);
    for a in args {
        out.push(b' ');
        repr(a, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_as_redis_writes_it() {
        let args: [&[u8]; 4] = [b"set", b"k y", b"a\"b\\c\r\n\t", &[7, 8, 0, 0xff, b'z']];
        let l = line(1_339_518_083_107_412, 3, "127.0.0.1:60866", args.into_iter());
        assert_eq!(
            String::from_utf8(l).unwrap(),
            r#"1339518083.107412 [3 127.0.0.1:60866] "set" "k y" "a\"b\\c\r\n\t" "\a\b\x00\xffz""#
        );
        assert_eq!(line(5, 0, "lua", std::iter::empty()), b"0.000005 [0 lua]");
        assert!(shown("SET", &["write"]));
        assert!(!shown("CONFIG", &["admin", "noscript"]));
        assert!(!shown("AUTH", &["no_auth"]));
    }
}
