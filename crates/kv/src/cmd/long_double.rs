//! Redis's `long double` arithmetic, for HINCRBYFLOAT: x87 extended precision (a 64-bit
//! significand, exponents down to 2^-16445), as Redis built for x86-64 computes it. Numbers are
//! read as glibc's `strtold` reads them (decimal or hexadecimal, `inf`, `nan`; correctly
//! rounded), added with one rounding (to nearest, ties to even), and written as Redis's
//! `ld2string` writes them in its human mode: `%.17Lf`, trailing zeros and a trailing point cut,
//! `-0` as `0`. Everything is exact integer arithmetic on big numbers, so a result is the one
//! Redis gives, digit for digit.

use std::cmp::Ordering;

/// The longest text Redis reads as a long double (`MAX_LONG_DOUBLE_CHARS`), less one.
pub const MAX_CHARS: usize = 5 * 1024 - 1;
/// The exponent of the least significand step of the smallest numbers (subnormal).
const E_MIN: i64 = -16445;
/// The largest exponent of a finite number's significand.
const E_MAX: i64 = 16383 - 63;

/// A long double.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongDouble {
    /// ±0.
    Zero { neg: bool },
    /// `m` · 2^`e`: `m` ≥ 2^63, or `e` = -16445 (subnormal).
    Finite { neg: bool, m: u64, e: i64 },
    /// ±infinity.
    Inf { neg: bool },
    /// Not a number.
    Nan,
}

/// An unsigned big integer, 32-bit limbs, least significant first.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> i64 {
        match self.0.last() {
            None => 0,
            Some(&top) => 32 * (self.0.len() as i64 - 1) + (32 - i64::from(top.leading_zeros())),
        }
    }

    fn mul_small(&mut self, k: u32) {
        let mut carry = 0u64;
        for l in &mut self.0 {
            let v = u64::from(*l) * u64::from(k) + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn add_small(&mut self, k: u32) {
        let mut carry = u64::from(k);
        for l in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = u64::from(*l) + carry;
            *l = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    /// Divides by `k`, returning the remainder.
    fn div_small(&mut self, k: u32) -> u32 {
        let mut rem = 0u64;
        for l in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*l);
            *l = (v / u64::from(k)) as u32;
            rem = v % u64::from(k);
        }
        self.trim();
        rem as u32
    }

    fn shl(&self, n: i64) -> Big {
        if self.is_zero() {
            return Big(Vec::new());
        }
        let (words, bits) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; words];
        let mut carry = 0u32;
        for &l in &self.0 {
            out.push(if bits == 0 { l } else { (l << bits) | carry });
            carry = if bits == 0 { 0 } else { l >> (32 - bits) };
        }
        out.push(carry);
        let mut b = Big(out);
        b.trim();
        b
    }

    fn shr1(&mut self) {
        let mut carry = 0u32;
        for l in self.0.iter_mut().rev() {
            let next = *l & 1;
            *l = (*l >> 1) | (carry << 31);
            carry = next;
        }
        self.trim();
    }

    fn add(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(o.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(o.0.len()) {
            let v = u64::from(*self.0.get(i).unwrap_or(&0)) + u64::from(*o.0.get(i).unwrap_or(&0)) + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        out.push(carry as u32);
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self` − `o` (`self` ≥ `o`).
    fn sub(&self, o: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for i in 0..self.0.len() {
            let mut v = i64::from(self.0[i]) - i64::from(*o.0.get(i).unwrap_or(&0)) - borrow;
            borrow = i64::from(v < 0);
            if v < 0 {
                v += 1 << 32;
            }
            out.push(v as u32);
        }
        debug_assert_eq!(borrow, 0);
        let mut b = Big(out);
        b.trim();
        b
    }

    fn cmp(&self, o: &Big) -> Ordering {
        self.0.len().cmp(&o.0.len()).then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }

    /// The low `n` bits compared with 2^(`n`−1) (half of 2^`n`), and whether they are zero.
    fn low_bits_vs_half(&self, n: i64) -> Ordering {
        let low = self.low(n);
        low.cmp(&Big::from_u64(1).shl(n - 1))
    }

    /// The low `n` bits.
    fn low(&self, n: i64) -> Big {
        let words = (n / 32) as usize;
        let mut v: Vec<u32> = self.0.iter().take(words + 1).copied().collect();
        if v.len() > words {
            v[words] &= (1u32 << (n % 32)).wrapping_sub(1);
        }
        let mut b = Big(v);
        b.trim();
        b
    }

    /// `self` >> `n`.
    fn shr(&self, n: i64) -> Big {
        let (words, bits) = ((n / 32) as usize, (n % 32) as u32);
        if words >= self.0.len() {
            return Big(Vec::new());
        }
        let src = &self.0[words..];
        let mut out = Vec::with_capacity(src.len());
        for i in 0..src.len() {
            let hi = *src.get(i + 1).unwrap_or(&0);
            out.push(if bits == 0 { src[i] } else { (src[i] >> bits) | (hi << (32 - bits)) });
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    fn to_u128(&self) -> u128 {
        self.0.iter().rev().fold(0u128, |acc, &l| (acc << 32) | u128::from(l))
    }

    fn pow10(k: u64) -> Big {
        let mut b = Big::from_u64(1);
        let mut left = k;
        while left > 0 {
            let step = left.min(9);
            b.mul_small(10u32.pow(step as u32));
            left -= step;
        }
        b
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut v = self.clone();
        let mut chunks = Vec::new();
        while !v.is_zero() {
            chunks.push(v.div_small(1_000_000_000));
        }
        let mut s = chunks.pop().expect("a chunk").to_string();
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:09}"));
        }
        s
    }
}

/// The long double nearest `num` / `den` · 2^`e2` (ties to even), with sign `neg`; `num` > 0.
fn round(neg: bool, num: &Big, den: &Big, e2: i64) -> LongDouble {
    debug_assert!(!num.is_zero() && !den.is_zero());
    // num/den lies in [2^(bn-bd-1), 2^(bn-bd+1)): scale it by 2^t into [2^63, 2^64).
    let mut t = 64 - (num.bits() - den.bits());
    let quotient = |t: i64| -> (u128, Ordering) {
        let (n, d) = if t >= 0 { (num.shl(t), den.clone()) } else { (num.clone(), den.shl(-t)) };
        // The quotient is below 2^66: long division, one bit at a time.
        let mut rem = n;
        let mut dd = d.shl(66);
        let mut q = 0u128;
        for i in (0..=66).rev() {
            if rem.cmp(&dd) != Ordering::Less {
                rem = rem.sub(&dd);
                q |= 1 << i;
            }
            dd.shr1();
        }
        // The remainder against half the divisor.
        (q, rem.shl(1).cmp(&d))
    };
    let (mut q, mut half) = quotient(t);
    while q >= 1 << 64 {
        t -= 1;
        (q, half) = quotient(t);
    }
    while q < 1 << 63 {
        t += 1;
        (q, half) = quotient(t);
    }
    let mut e = e2 - t;
    if e < E_MIN {
        // Subnormal: fewer significant bits.
        t = e2 - E_MIN;
        e = E_MIN;
        (q, half) = if t < -70_000 { (0, Ordering::Less) } else { quotient(t) };
    }
    if half == Ordering::Greater || (half == Ordering::Equal && q & 1 == 1) {
        q += 1;
    }
    if q == 1 << 64 {
        q = 1 << 63;
        e += 1;
    }
    if q == 0 {
        return LongDouble::Zero { neg };
    }
    if e > E_MAX {
        return LongDouble::Inf { neg };
    }
    LongDouble::Finite { neg, m: q as u64, e }
}

impl LongDouble {
    /// The number `s` is, read as `strtold` reads the whole of it; `None` if it is not one (or
    /// `strtold` would stop before its end).
    pub fn parse(s: &[u8]) -> Option<LongDouble> {
        let (neg, body) = match s.split_first() {
            Some((b'-', r)) => (true, r),
            Some((b'+', r)) => (false, r),
            _ => (false, s),
        };
        let lower = body.to_ascii_lowercase();
        if lower == b"inf" || lower == b"infinity" {
            return Some(LongDouble::Inf { neg });
        }
        if lower.starts_with(b"nan") {
            let rest = &lower[3..];
            let ok = rest.is_empty()
                || (rest.first() == Some(&b'(')
                    && rest.last() == Some(&b')')
                    && rest[1..rest.len() - 1].iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_'));
            return ok.then_some(LongDouble::Nan);
        }
        if lower.starts_with(b"0x") {
            return parse_hex(neg, &lower[2..]);
        }
        parse_decimal(neg, body)
    }

    /// `self` + `o`, rounded once.
    pub fn add(self, o: LongDouble) -> LongDouble {
        use LongDouble::*;
        match (self, o) {
            (Nan, _) | (_, Nan) => Nan,
            (Inf { neg: a }, Inf { neg: b }) if a != b => Nan,
            (Inf { neg }, _) | (_, Inf { neg }) => Inf { neg },
            (Zero { neg: a }, Zero { neg: b }) => Zero { neg: a && b },
            (Zero { .. }, x) | (x, Zero { .. }) => x,
            (Finite { neg: na, m: ma, e: ea }, Finite { neg: nb, m: mb, e: eb }) => {
                let e = ea.min(eb);
                let a = Big::from_u64(ma).shl(ea - e);
                let b = Big::from_u64(mb).shl(eb - e);
                let (neg, sum) = if na == nb {
                    (na, a.add(&b))
                } else {
                    match a.cmp(&b) {
                        Ordering::Equal => return Zero { neg: false },
                        Ordering::Greater => (na, a.sub(&b)),
                        Ordering::Less => (nb, b.sub(&a)),
                    }
                };
                round(neg, &sum, &Big::from_u64(1), e)
            }
        }
    }

    /// Whether it is infinite or not a number.
    pub fn is_nan_or_inf(self) -> bool {
        matches!(self, LongDouble::Inf { .. } | LongDouble::Nan)
    }

    /// The long double of an integer (exact: it has 64 significant bits).
    #[cfg(test)]
    pub fn from_i64(v: i64) -> LongDouble {
        if v == 0 {
            return LongDouble::Zero { neg: false };
        }
        round(v < 0, &Big::from_u64(v.unsigned_abs()), &Big::from_u64(1), 0)
    }

    /// As Redis's `ld2string` writes it in its human mode (`%.17Lf`, trailing zeros and point
    /// cut, `-0` as `0`; infinities as `inf`, `-inf`).
    pub fn human(self) -> String {
        let (neg, int, frac) = match self {
            LongDouble::Nan => return "nan".into(),
            LongDouble::Inf { neg } => return if neg { "-inf" } else { "inf" }.into(),
            LongDouble::Zero { neg } => (neg, Big(Vec::new()), 0u128),
            LongDouble::Finite { neg, m, e } => {
                let m = Big::from_u64(m);
                if e >= 0 {
                    (neg, m.shl(e), 0)
                } else {
                    let f = -e;
                    let int = m.shr(f);
                    let mut x = m.low(f);
                    for _ in 0..17 {
                        x.mul_small(10);
                    }
                    let mut q = x.shr(f).to_u128();
                    let half = x.low_bits_vs_half(f);
                    if half == Ordering::Greater || (half == Ordering::Equal && q & 1 == 1) {
                        q += 1;
                    }
                    if q == 100_000_000_000_000_000 {
                        let mut int = int;
                        int.add_small(1);
                        (neg, int, 0)
                    } else {
                        (neg, int, q)
                    }
                }
            }
        };
        let mut s = String::new();
        if neg {
            s.push('-');
        }
        s.push_str(&int.to_decimal());
        s.push('.');
        s.push_str(&format!("{frac:017}"));
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
        if s == "-0" {
            s = "0".into();
        }
        s
    }
}

/// Decimal: digits with at most one point, at least one digit, then an optional exponent.
fn parse_decimal(neg: bool, s: &[u8]) -> Option<LongDouble> {
    let mut digits = Big(Vec::new());
    let (mut nd, mut point, mut frac_digits, mut i, mut any) = (0u64, false, 0i64, 0, false);
    while i < s.len() {
        match s[i] {
            c @ b'0'..=b'9' => {
                any = true;
                if !(digits.is_zero() && c == b'0') {
                    digits.mul_small(10);
                    digits.add_small(u32::from(c - b'0'));
                    nd += 1;
                }
                if point {
                    frac_digits += 1;
                }
            }
            b'.' if !point => point = true,
            _ => break,
        }
        i += 1;
    }
    if !any {
        return None;
    }
    let mut exp = 0i64;
    if i < s.len() {
        if s[i] != b'e' && s[i] != b'E' {
            return None;
        }
        let mut j = i + 1;
        let eneg = match s.get(j) {
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
        let ds = &s[j..];
        if ds.is_empty() || !ds.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Past a few thousand the exponent only says overflow or underflow.
        let v = ds.iter().fold(0i64, |acc, &d| (acc * 10 + i64::from(d - b'0')).min(1 << 40));
        exp = if eneg { -v } else { v };
    }
    if digits.is_zero() {
        return Some(LongDouble::Zero { neg });
    }
    let k = exp - frac_digits;
    // The number has nd + k digits before its point: beyond these it is infinite, or zero.
    let mag = nd as i64 + k;
    if mag > 4934 {
        return Some(LongDouble::Inf { neg });
    }
    if mag < -4952 {
        return Some(LongDouble::Zero { neg });
    }
    Some(if k >= 0 {
        let mut n = digits;
        let p = Big::pow10(k as u64);
        n = mul(&n, &p);
        round(neg, &n, &Big::from_u64(1), 0)
    } else {
        round(neg, &digits, &Big::pow10((-k) as u64), 0)
    })
}

fn mul(a: &Big, b: &Big) -> Big {
    let mut out = vec![0u32; a.0.len() + b.0.len() + 1];
    for (i, &x) in a.0.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.0.iter().enumerate() {
            let v = u64::from(out[i + j]) + u64::from(x) * u64::from(y) + carry;
            out[i + j] = v as u32;
            carry = v >> 32;
        }
        let mut k = i + b.0.len();
        while carry > 0 {
            let v = u64::from(out[k]) + carry;
            out[k] = v as u32;
            carry = v >> 32;
            k += 1;
        }
    }
    let mut r = Big(out);
    r.trim();
    r
}

/// Hexadecimal (after `0x`): hex digits with at most one point, at least one digit, then an
/// optional binary exponent `p`.
fn parse_hex(neg: bool, s: &[u8]) -> Option<LongDouble> {
    let mut m = Big(Vec::new());
    let (mut point, mut frac, mut i, mut any) = (false, 0i64, 0, false);
    while i < s.len() {
        let c = s[i];
        if let Some(d) = (c as char).to_digit(16) {
            any = true;
            m = m.shl(4);
            m.add_small(d);
            if point {
                frac += 4;
            }
        } else if c == b'.' && !point {
            point = true;
        } else {
            break;
        }
        i += 1;
    }
    if !any {
        return None;
    }
    let mut exp = 0i64;
    if i < s.len() {
        if s[i] != b'p' {
            return None;
        }
        let mut j = i + 1;
        let eneg = match s.get(j) {
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
        let ds = &s[j..];
        if ds.is_empty() || !ds.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = ds.iter().fold(0i64, |acc, &d| (acc * 10 + i64::from(d - b'0')).min(1 << 40));
        exp = if eneg { -v } else { v };
    }
    if m.is_zero() {
        return Some(LongDouble::Zero { neg });
    }
    let e2 = exp - frac;
    let top = m.bits() + e2;
    if top > E_MAX + 65 {
        return Some(LongDouble::Inf { neg });
    }
    if top < E_MIN - 2 {
        return Some(LongDouble::Zero { neg });
    }
    Some(round(neg, &m, &Big::from_u64(1), e2))
}

/// A number as Redis's `string2ld` reads a stored value or an argument: at most 5119 bytes, no
/// leading space, the whole text a number, not NaN, and not out of range (an infinity only when
/// written as one; a nonzero number too small for a long double is refused).
pub fn string2ld(s: &[u8]) -> Option<LongDouble> {
    if s.is_empty() || s.len() > MAX_CHARS || s[0].is_ascii_whitespace() || s[0] == 0x0b {
        return None;
    }
    let v = LongDouble::parse(s)?;
    let written_inf = {
        let l = s.to_ascii_lowercase();
        let l = l.strip_prefix(b"-").or_else(|| l.strip_prefix(b"+")).unwrap_or(&l).to_vec();
        l == b"inf" || l == b"infinity"
    };
    match v {
        LongDouble::Nan => None,
        LongDouble::Inf { .. } if !written_inf => None,
        LongDouble::Zero { .. } if !is_zero_text(s) => None,
        v => Some(v),
    }
}

/// Whether the digits of a number's text are all zero (so that 0 is what it says, not an
/// underflow).
fn is_zero_text(s: &[u8]) -> bool {
    let lower = s.to_ascii_lowercase();
    let body = lower.strip_prefix(b"-").or_else(|| lower.strip_prefix(b"+")).unwrap_or(&lower);
    let (body, hex) = match body.strip_prefix(b"0x") {
        Some(b) => (b, true),
        None => (body, false),
    };
    let end = body.iter().position(|&c| if hex { c == b'p' } else { c == b'e' }).unwrap_or(body.len());
    body[..end].iter().all(|&c| c == b'0' || c == b'.')
}

#[cfg(test)]
#[path = "long_double_tests.rs"]
mod tests;
