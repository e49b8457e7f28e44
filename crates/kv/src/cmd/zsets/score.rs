//! Scores as Redis reads and writes them: `strtod`'s syntax (decimal, `inf`/`infinity`,
//! hexadecimal, leading white space where Redis lets it through), the strict form `ZADD` and
//! `WEIGHTS` take (no spaces, nothing after the number, no overflow, no NaN), and the printed
//! forms: `%.17g` in replies (`addReplyDouble`), and the integer form where a score is a whole
//! number (the listpack's, which `ZSCAN` shows).

use crate::resp::{itoa, Proto, Reply};

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// What `strtod` makes of the start of `s`: the value and how many bytes it read (0: none,
/// when no number starts there, as C's `strtod` leaves its end pointer at the start). Also
/// whether the value's magnitude overflowed to infinity or underflowed to zero (C's `ERANGE`
/// with such a value).
pub fn strtod(s: &[u8]) -> (f64, usize, bool) {
    let mut i = 0;
    while i < s.len() && is_space(s[i]) {
        i += 1;
    }
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let sign = |v: f64| if neg { -v } else { v };
    let rest = &s[i..];
    let word = |w: &str| rest.len() >= w.len() && rest[..w.len()].eq_ignore_ascii_case(w.as_bytes());
    if word("infinity") {
        return (sign(f64::INFINITY), i + 8, false);
    }
    if word("inf") {
        return (sign(f64::INFINITY), i + 3, false);
    }
    if word("nan") {
        let mut n = i + 3;
        // nan(n-char-sequence)
        if s.get(n) == Some(&b'(') {
            let mut j = n + 1;
            while j < s.len() && (s[j].is_ascii_alphanumeric() || s[j] == b'_') {
                j += 1;
            }
            if s.get(j) == Some(&b')') {
                n = j + 1;
            }
        }
        return (f64::NAN, n, false);
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        if let Some((v, n, range)) = hex(&rest[2..]) {
            return (sign(v), i + 2 + n, range);
        }
        // "0x" with no hexadecimal digit: the "0" alone.
        return (sign(0.0), i + 1, false);
    }
    let start = i;
    let mut digits = 0;
    let mut nonzero = false;
    while i < s.len() && s[i].is_ascii_digit() {
        nonzero |= s[i] != b'0';
        i += 1;
        digits += 1;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        while i < s.len() && s[i].is_ascii_digit() {
            nonzero |= s[i] != b'0';
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return (0.0, 0, false);
    }
    if i < s.len() && (s[i] | 0x20) == b'e' {
        let mut j = i + 1;
        if j < s.len() && (s[j] == b'+' || s[j] == b'-') {
            j += 1;
        }
        if j < s.len() && s[j].is_ascii_digit() {
            while j < s.len() && s[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    // The text read is Rust's float syntax too (digits, a point, an exponent).
    let text = std::str::from_utf8(&s[start..i]).expect("ASCII");
    let v: f64 = text.parse().unwrap_or(0.0);
    let range = v.is_infinite() || (v == 0.0 && nonzero);
    (sign(v), i, range)
}

/// A hexadecimal significand after "0x" (and a binary exponent): value, bytes read, and
/// whether it overflowed or underflowed to zero. `None` when no hexadecimal digit comes first.
fn hex(s: &[u8]) -> Option<(f64, usize, bool)> {
    let mut i = 0;
    let mut mant: u64 = 0;
    let mut exp: i64 = 0;
    let mut digits = 0;
    let mut sticky = false;
    let mut point = false;
    loop {
        match s.get(i) {
            Some(&c) if c.is_ascii_hexdigit() => {
                let d = u64::from((c as char).to_digit(16).expect("a hexadecimal digit"));
                if mant >> 56 == 0 {
                    mant = mant << 4 | d;
                    if point {
                        exp -= 4;
                    }
                } else {
                    sticky |= d != 0;
                    if !point {
                        exp += 4;
                    }
                }
                digits += 1;
            }
            Some(b'.') if !point => point = true,
            _ => break,
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if i < s.len() && (s[i] | 0x20) == b'p' {
        let mut j = i + 1;
        let neg = match s.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        if j < s.len() && s[j].is_ascii_digit() {
            let mut e: i64 = 0;
            while j < s.len() && s[j].is_ascii_digit() {
                e = (e * 10 + i64::from(s[j] - b'0')).min(1 << 20);
                j += 1;
            }
            exp += if neg { -e } else { e };
            i = j;
        }
    }
    let nonzero = mant != 0 || sticky;
    // The sticky bit below the significand's last, for rounding.
    let m = if sticky { mant << 1 | 1 } else { mant << 1 };
    let mut v = m as f64;
    let mut e = exp - 1;
    while e > 0 {
        let k = e.min(1000);
        v *= 2f64.powi(k as i32);
        e -= k;
    }
    while e < 0 {
        let k = (-e).min(1000);
        v /= 2f64.powi(k as i32);
        e += k;
    }
    Some((v, i, v.is_infinite() || (v == 0.0 && nonzero)))
}

/// A double as `ZADD`, `ZINCRBY` and `WEIGHTS` take one (Redis's `string2d`): the whole
/// argument a number, no leading space, no overflow or underflow to zero, not NaN.
pub fn parse_double(s: &[u8]) -> Option<f64> {
    if s.is_empty() || is_space(s[0]) {
        return None;
    }
    let (v, n, range) = strtod(s);
    (n == s.len() && !range && !v.is_nan()).then_some(v)
}

/// A range end as `ZRANGEBYSCORE` takes one: `strtod` read to the end of the argument (or to
/// a NUL byte, where C's string ends), not NaN; overflow is infinity.
pub fn parse_range_double(s: &[u8]) -> Option<f64> {
    let (v, n, _) = strtod(s);
    (n == s.len() || s[n] == 0).then_some(v).filter(|v| !v.is_nan())
}

/// `%.17g`: 17 significant digits, the shorter of fixed and exponential notation as C's `%g`
/// chooses, trailing zeros dropped.
pub fn fmt_g17(d: f64, out: &mut Vec<u8>) {
    if d.is_nan() {
        out.extend_from_slice(if d.is_sign_negative() { b"-nan" } else { b"nan" });
        return;
    }
    if d.is_infinite() {
        out.extend_from_slice(if d < 0.0 { b"-inf" } else { b"inf" });
        return;
    }
    if d == 0.0 {
        out.extend_from_slice(if d.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    let e = format!("{d:.16e}");
    let (mant, exp) = e.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a decimal exponent");
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..17).contains(&exp) {
        out.extend_from_slice(trim(mant).as_bytes());
        out.extend_from_slice(
            format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs()).as_bytes(),
        );
    } else {
        let fixed = format!("{:.*}", (16 - exp) as usize, d);
        out.extend_from_slice(trim(&fixed).as_bytes());
    }
}

/// A score as a sorted set's listpack keeps it (Redis's `zzlInsertAt`): an integer when it is
/// one within ±2^62 (0 for -0, which a listpack cannot tell from 0), else `inf`, `-inf` or
/// `%.17g`.
pub fn d2string(d: f64, out: &mut Vec<u8>) {
    if d.is_finite() && d.fract() == 0.0 && d.abs() <= (i64::MAX / 2) as f64 {
        let mut tmp = [0u8; 20];
        out.extend_from_slice(itoa(d as i64, &mut tmp));
    } else {
        fmt_g17(d, out);
    }
}

/// A double reply (`addReplyDouble`): a bulk string in RESP2, `,` in RESP3.
pub fn reply_double(r: &mut Reply, d: f64) {
    let mut text = Vec::with_capacity(24);
    fmt_g17(d, &mut text);
    match r.proto {
        Proto::Resp2 => r.bulk(&text),
        Proto::Resp3 => {
            r.buf.push(b',');
            r.buf.extend_from_slice(&text);
            r.buf.extend_from_slice(b"\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(d: f64) -> String {
        let mut v = Vec::new();
        fmt_g17(d, &mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn prints_as_printf_g17() {
        // What glibc's printf("%.17g") prints for each.
        for (d, want) in [
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (1e300, "1.0000000000000001e+300"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e-5, "1.0000000000000001e-05"),
            (1e-4, "0.0001"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (5e-324, "4.9406564584124654e-324"),
            (-0.0, "-0"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::from_bits(20), "9.8813129168249309e-323"),
            (99999999999999999.0, "1e+17"),
            (0.3, "0.29999999999999999"),
        ] {
            assert_eq!(g(d), want, "{d:e}");
        }
        let mut v = Vec::new();
        d2string(-0.0, &mut v);
        assert_eq!(v, b"0", "a listpack holds -0 as the integer 0");
        v.clear();
        d2string(1e17, &mut v);
        assert_eq!(v, b"100000000000000000");
        v.clear();
        d2string(1.5, &mut v);
        assert_eq!(v, b"1.5");
    }

    #[test]
    fn reads_as_strtod() {
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_double(b"+Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_double(b"0x10"), Some(16.0));
        assert_eq!(parse_double(b"0x1p-2"), Some(0.25));
        assert_eq!(parse_double(b"0x1.8"), Some(1.5));
        assert_eq!(parse_double(b"1e5"), Some(1e5));
        assert_eq!(parse_double(b".5"), Some(0.5));
        assert_eq!(parse_double(b"5."), Some(5.0));
        assert_eq!(parse_double(b"-0"), Some(-0.0));
        assert_eq!(parse_double(b"9.8813129168249309e-323"), Some(f64::from_bits(20)));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"nan",
            b"NaN",
            b"1e400",
            b"1e-400",
            b"abc",
            b"1x",
            b"1e",
            b"0x",
            b"--1",
            b".",
        ] {
            assert_eq!(parse_double(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        // Ranges: leading space, overflow to infinity and the empty string pass.
        assert_eq!(parse_range_double(b" 2"), Some(2.0));
        assert_eq!(parse_range_double(b"1e400"), Some(f64::INFINITY));
        assert_eq!(parse_range_double(b""), Some(0.0));
        assert_eq!(parse_range_double(b"1\0x"), Some(1.0));
        assert_eq!(parse_range_double(b"nan"), None);
        assert_eq!(parse_range_double(b"2 "), None);
        assert_eq!(parse_range_double(b" "), None);
        assert_eq!(strtod(b"infinit"), (f64::INFINITY, 3, false));
        assert_eq!(strtod(b"0xg").1, 1);
        assert_eq!(strtod(b"1e+").1, 1);
    }
}
