//! Uniform random numbers for the commands that pick members at random (SPOP, SRANDMEMBER,
//! HRANDFIELD): xoshiro256** per thread, seeded from the system's generator, and unbiased
//! draws below a bound (Lemire's multiply-and-reject). Not for secrets: what is drawn is
//! sent to the client anyway.

use std::cell::Cell;
use std::collections::HashSet;

thread_local! {
    static STATE: Cell<[u64; 4]> = Cell::new(seed());
}

fn seed() -> [u64; 4] {
    let mut b = [0u8; 32];
    mojim_transport::random::fill(&mut b);
    let mut s = [0u64; 4];
    for (i, w) in s.iter_mut().enumerate() {
        *w = u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    }
    if s == [0; 4] {
        s[0] = 1;
    }
    s
}

/// A random 64-bit number.
pub fn next_u64() -> u64 {
    STATE.with(|c| {
        let mut s = c.get();
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        c.set(s);
        out
    })
}

/// A number in `0 .. n`, each equally likely (`n` > 0).
pub fn below(n: u64) -> u64 {
    assert!(n > 0, "a draw below 0");
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// `k` distinct numbers of `0 .. n` (`k` ≤ `n`), every subset equally likely (Floyd's
/// algorithm: O(k) draws, whatever `n`), in the order drawn.
pub fn distinct(k: u64, n: u64) -> Vec<u64> {
    assert!(k <= n, "{k} distinct numbers below {n}");
    let mut seen = HashSet::with_capacity(k as usize);
    let mut out = Vec::with_capacity(k as usize);
    for j in n - k..n {
        let t = below(j + 1);
        let pick = if seen.contains(&t) { j } else { t };
        seen.insert(pick);
        out.push(pick);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pearson's chi-square of `counts` against a uniform spread.
    fn chi_square(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let e = total as f64 / counts.len() as f64;
        counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
    }

    #[test]
    fn draws_are_uniform() {
        let mut counts = [0u64; 10];
        for _ in 0..100_000 {
            counts[below(10) as usize] += 1;
        }
        // df = 9: 40 is a chance of 1e-5, as Redis's tests use.
        assert!(chi_square(&counts) < 40.0, "{counts:?}");
    }

    #[test]
    fn distinct_draws_are_distinct_and_uniform() {
        let mut counts = [0u64; 10];
        for _ in 0..20_000 {
            let d = distinct(3, 10);
            let mut s = d.clone();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 3);
            for v in d {
                counts[v as usize] += 1;
            }
        }
        assert!(chi_square(&counts) < 40.0, "{counts:?}");
        assert_eq!(distinct(5, 5).len(), 5);
        assert!(distinct(0, 0).is_empty());
    }
}
