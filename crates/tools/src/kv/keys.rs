//! YCSB's key choosers, as its `CoreWorkload` builds them (com.yahoo.ycsb.generator):
//!
//! - **zipfian**: `ScrambledZipfianGenerator`. A Zipfian draw (constant 0.99) over 10^10 items,
//!   hashed with FNV-1a-64 and taken modulo the key space, so that the popular keys are spread
//!   over the key space instead of being its first ones. Draws not yet inserted are drawn again.
//! - **latest**: `SkewedLatestGenerator`. The newest inserted key is the most popular: the key
//!   is `last − z` where `z` is a Zipfian draw over the keys inserted so far.
//! - **uniform**: every inserted key equally likely.
//!
//! The Zipfian draw is Gray et al.'s "Quickly generating billion-record synthetic databases"
//! (SIGMOD '94), YCSB's `ZipfianGenerator`, whose ζ(n) grows incrementally with the key count.

/// YCSB's Zipfian constant θ.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Items of the scrambled Zipfian's underlying draw (YCSB's `ITEM_COUNT`).
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// ζ(10^10, 0.99), precomputed as in YCSB (`ScrambledZipfianGenerator.ZETAN`).
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// SplitMix64: a small, seeded generator of the operations and keys.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A uniform draw in [0, 1).
pub fn unit(rng: &mut Rng) -> f64 {
    (rng.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 bytes of `v`, low byte first, made non-negative.
pub fn fnv64(mut v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    (h as i64).unsigned_abs()
}

/// ζ(n, θ) from ζ(start, θ) = `sum`: `sum + Σ_{i=start}^{n-1} 1/(i+1)^θ`.
pub fn zeta(start: u64, n: u64, theta: f64, sum: f64) -> f64 {
    (start..n).fold(sum, |s, i| s + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Zipfian ranks in [0, n): rank 0 is the most popular, with probability 1/ζ(n).
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    alpha: f64,
    zeta2: f64,
    /// ζ of `count` items.
    zetan: f64,
    count: u64,
    eta: f64,
}

impl Zipfian {
    /// Ranks over `n` items (at least 1).
    pub fn new(n: u64) -> Zipfian {
        Zipfian::with_zeta(n.max(1), zeta(0, n.max(1), ZIPFIAN_CONSTANT, 0.0))
    }

    fn with_zeta(n: u64, zetan: f64) -> Zipfian {
        let theta = ZIPFIAN_CONSTANT;
        let mut z = Zipfian {
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2: zeta(0, 2, theta, 0.0),
            zetan,
            count: n,
            eta: 0.0,
        };
        z.eta = z.eta_for(n);
        z
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// A rank in [0, n) for the current item count `n` (which may only grow: ζ is extended).
    pub fn next(&mut self, n: u64, rng: &mut Rng) -> u64 {
        if n > self.count {
            self.zetan = zeta(self.count, n, self.theta, self.zetan);
            self.count = n;
            self.eta = self.eta_for(n);
        }
        let n = self.count;
        let u = unit(rng);
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(n - 1);
        }
        ((n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(n - 1)
    }
}

/// How keys are chosen among those inserted (YCSB's `requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Scrambled Zipfian: a few keys, spread over the key space, are hot.
    Zipfian,
    /// Skewed towards the most recently inserted keys.
    Latest,
}

/// Chooses key numbers among the `acked` keys inserted and acknowledged so far.
#[derive(Clone, Debug)]
pub struct KeyChooser {
    dist: Distribution,
    zipf: Zipfian,
    /// The key space the scrambled Zipfian hashes into: the records plus the inserts expected
    /// (YCSB: `recordcount + 2 × operationcount × insertproportion`).
    space: u64,
}

impl KeyChooser {
    /// A chooser for `records` loaded keys and `expected_inserts` more to come.
    pub fn new(dist: Distribution, records: u64, expected_inserts: u64) -> KeyChooser {
        let zipf = match dist {
            Distribution::Zipfian => Zipfian::with_zeta(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN),
            _ => Zipfian::new(records.max(1)),
        };
        KeyChooser { dist, zipf, space: (records + expected_inserts).max(1) }
    }

    /// A key number in [0, acked) (`acked` ≥ 1).
    pub fn next(&mut self, acked: u64, rng: &mut Rng) -> u64 {
        assert!(acked >= 1, "a key is chosen only once some exist");
        match self.dist {
            Distribution::Uniform => rng.next() % acked,
            Distribution::Latest => acked - 1 - self.zipf.next(acked, rng),
            Distribution::Zipfian => loop {
                let k = fnv64(self.zipf.next(SCRAMBLED_ITEMS, rng)) % self.space.max(acked);
                if k < acked {
                    return k;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u64, draws: u64, mut f: impl FnMut(&mut Rng) -> u64) -> Vec<u64> {
        let mut rng = Rng(0x0DDB_1A5E_5BAD_5EED);
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            c[f(&mut rng) as usize] += 1;
        }
        c
    }

    #[test]
    fn fnv_matches_ycsb() {
        // Values printed by YCSB's Utils.fnvhash64 (Java) for the same inputs.
        assert_eq!(fnv64(0), 0x5738_07cd_d7e5_c63b);
        assert_eq!(fnv64(1), 0x7632_ced6_e2d5_105c);
        assert_eq!(fnv64(12_345_678_901), 0x4eea_abc3_253b_9607);
    }

    #[test]
    fn zipfian_ranks_follow_the_power_law() {
        let n = 1000;
        let draws = 400_000;
        let mut z = Zipfian::new(n);
        let c = counts(n, draws, |r| z.next(n, r));
        let zn = zeta(0, n, ZIPFIAN_CONSTANT, 0.0);
        for rank in [0u64, 1] {
            let want = 1.0 / ((rank + 1) as f64).powf(ZIPFIAN_CONSTANT) / zn;
            let got = c[rank as usize] as f64 / draws as f64;
            assert!((got - want).abs() < 0.1 * want, "rank {rank}: {got:.4} drawn, {want:.4} expected");
        }
        // Skew: the top 1 % of ranks take about a third of the draws, the bottom half little.
        let top: u64 = c[..10].iter().sum();
        let bottom: u64 = c[500..].iter().sum();
        let want_top = zeta(0, 10, ZIPFIAN_CONSTANT, 0.0) / zn;
        let got_top = top as f64 / draws as f64;
        assert!((got_top - want_top).abs() < 0.05, "top 10: {got_top:.3}, expected {want_top:.3}");
        assert!((bottom as f64 / draws as f64) < 0.15, "bottom half: {bottom} of {draws}");
        // Ranks are non-increasing in popularity, apart from noise.
        assert!(c[0] > c[1] && c[1] > c[2] && c[2] > c[10] && c[10] > c[100]);
    }

    #[test]
    fn zipfian_extends_zeta_as_the_count_grows() {
        let mut grown = Zipfian::new(100);
        let mut rng = Rng(7);
        grown.next(5000, &mut rng);
        let fresh = Zipfian::new(5000);
        assert!((grown.zetan - fresh.zetan).abs() < 1e-9, "{} vs {}", grown.zetan, fresh.zetan);
        assert!((grown.eta - fresh.eta).abs() < 1e-12);
    }

    #[test]
    fn scrambled_zipfian_spreads_the_hot_keys() {
        let n = 10_000;
        let draws = 300_000;
        let mut k = KeyChooser::new(Distribution::Zipfian, n, 0);
        let mut c = counts(n, draws, |r| k.next(n, r));
        let hottest = c.iter().enumerate().max_by_key(|x| x.1).map(|x| x.0).unwrap();
        c.sort_unstable_by(|a, b| b.cmp(a));
        // The hottest key takes rank 0's 1/ζ(10^10) ≈ 3.8 % of the draws; the 100 hottest take
        // at least the top 100 ranks' ζ(100)/ζ(10^10) ≈ 19.5 % (20× their share under uniform),
        // plus their part of the tail, which is spread evenly.
        let top = c[0] as f64 / draws as f64;
        assert!((top - 1.0 / SCRAMBLED_ZETAN).abs() < 0.01, "hottest key: {top:.4}");
        let top1pct = c[..100].iter().sum::<u64>() as f64 / draws as f64;
        let want = zeta(0, 100, ZIPFIAN_CONSTANT, 0.0) / SCRAMBLED_ZETAN;
        assert!(
            top1pct > 0.95 * want && top1pct < want + 0.03,
            "top 1 %: {top1pct:.4}, expected about {want:.4}"
        );
        assert!(hottest != 0, "the hottest key is hashed away from the start");
    }

    #[test]
    fn scrambled_zipfian_draws_only_inserted_keys() {
        let mut k = KeyChooser::new(Distribution::Zipfian, 100, 1000);
        let mut rng = Rng(3);
        for _ in 0..10_000 {
            assert!(k.next(100, &mut rng) < 100);
        }
    }

    #[test]
    fn latest_favours_the_newest_keys() {
        let n = 1000;
        let draws = 300_000;
        let mut k = KeyChooser::new(Distribution::Latest, n, 0);
        let c = counts(n, draws, |r| k.next(n, r));
        let zn = zeta(0, n, ZIPFIAN_CONSTANT, 0.0);
        let newest = c[n as usize - 1] as f64 / draws as f64;
        assert!((newest - 1.0 / zn).abs() < 0.1 / zn, "newest key: {newest:.4}, expected {:.4}", 1.0 / zn);
        assert!(c[n as usize - 1] > c[n as usize - 2] && c[n as usize - 2] > c[n as usize - 50]);
        let newest_tenth: u64 = c[900..].iter().sum();
        assert!(newest_tenth as f64 / draws as f64 > 0.6, "newest 10 %: {newest_tenth} of {draws}");
        // When more keys are acknowledged, the new last one becomes the hottest.
        let mut rng = Rng(11);
        let hits = (0..50_000).filter(|_| k.next(n + 10, &mut rng) == n + 9).count() as f64 / 50_000.0;
        assert!(hits > 0.8 / zn, "{hits}");
    }

    #[test]
    fn uniform_is_flat() {
        let n = 100;
        let draws = 200_000;
        let mut k = KeyChooser::new(Distribution::Uniform, n, 0);
        let c = counts(n, draws, |r| k.next(n, r));
        let want = draws / n;
        for (i, &x) in c.iter().enumerate() {
            assert!(x.abs_diff(want) < want / 10, "key {i}: {x} draws, about {want} expected");
        }
    }
}
