//! A k-mer count table (the report's §3.6, genome assembly's hash-table phase): build a large
//! open-addressing hash table of k-mer counts from a DNA-like input, then probe it.
//!
//! The input is generated from the seed and never saved: a random genome of `genome` bases
//! and reads of `read_len` bases sampled from it at random places (`coverage` times over),
//! each base misread with probability `errors`‰ (so most misread k-mers are new ones, as in
//! real reads). The state, in recoverable memory: the table (`slots` pairs of words, k-mer and
//! count, linear probing; a count of 0 is an empty slot) and the progress (steps done, the
//! number of distinct k-mers, the probe phase's sums).
//!
//! Step `s` (1-based) is, for the first `kmers` steps, the insertion of the `s`-th k-mer of the
//! reads (its count goes up by one, or it takes an empty slot); after them, a probe: an even
//! probe looks up a k-mer of the genome at a seeded place (found unless every read covering it
//! was misread there), an odd one a random k-mer (almost never found). The answer is the
//! distinct k-mers, a checksum of the whole table (of each k-mer with its count), and the
//! probes' found count, sum of counts and hash: equal for every run of the same flags.

use super::driver::{self, Program, Steps};
use super::mem::{Cells, Slots};
use super::schedule::{Event, Outcome, Schedule};
use super::{attach, magic, mix, started, Attached, Layout, RunArgs, SplitMix};
use mojim::error::{Error, Result};
use mojim_rvm::{Rvm, RvmOptions};
use std::fmt;
use std::time::Instant;

/// `mojim rvm kmer`.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = KMER_HELP)]
pub struct KmerArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Bases in the generated genome.
    #[arg(long, default_value_t = Params::default().genome)]
    pub genome: u64,
    /// Times each base is read, on average.
    #[arg(long, default_value_t = Params::default().coverage)]
    pub coverage: u64,
    /// Bases per read.
    #[arg(long, default_value_t = Params::default().read_len)]
    pub read_len: u64,
    /// Bases per k-mer, 1 to 32.
    #[arg(long, default_value_t = Params::default().k)]
    pub k: u64,
    /// Misread bases per thousand.
    #[arg(long, default_value_t = Params::default().errors)]
    pub errors: u64,
    /// Probes after the table is built.
    #[arg(long, default_value_t = Params::default().probes)]
    pub probes: u64,
    /// Seed of the input and the probes.
    #[arg(long, default_value_t = Params::default().seed)]
    pub seed: u64,
    /// Slots of the table, a power of two (default: twice the expected distinct k-mers).
    #[arg(long)]
    pub slots: Option<u64>,
    /// Commit after every N steps (insertions and probes), and after the last.
    #[arg(long, default_value_t = 100_000)]
    pub commit_every: u64,
}

const KMER_HELP: &str = "\
The input is generated from --seed and never saved: a random genome of --genome bases and
reads of --read-len bases sampled from it (--coverage times over), --errors bases per
thousand misread. Steps: first every k-mer of the reads is inserted into an open-addressing
table of (k-mer, count) pairs, then --probes lookups (half of them k-mers of the genome, half
random). The table, the step count and the probes' sums are recoverable: a commit every
--commit-every steps makes them durable; --fail-every N drops the process's state after every
N-th step (the memory is closed without committing) and recovers from the last commit; a
SIGKILL does the same from outside. Run it again with the same flags to resume; the answer line
(distinct k-mers, a checksum of the table, the probes' found count, hits and hash) equals an
uninterrupted run's. Memory: the configuration's [rvm] section (--config); the table is
16 bytes per slot (32 MiB by default).

Examples:
  mojim rvm kmer --config mojim.toml --commit-every 10000
  mojim rvm kmer --config mojim.toml --fresh --genome 1048576 --fail-every 500000";

/// What to compute. Defaults take a few seconds on two cores: a 256 Ki-base genome read 8
/// times over (1.47 M k-mers), a 32 MiB table of 2 Mi slots, 1 Mi probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Bases in the genome.
    pub genome: u64,
    /// Times each base is read, on average.
    pub coverage: u64,
    /// Bases per read.
    pub read_len: u64,
    /// Bases per k-mer, 1 to 32.
    pub k: u64,
    /// Misread bases per thousand.
    pub errors: u64,
    /// Lookups after the insertions.
    pub probes: u64,
    /// Seed of the input and the probes.
    pub seed: u64,
    /// Slots of the table, a power of two.
    pub slots: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params::sized(1 << 18, 8, 100, 31, 10, 1 << 20, 1, None)
    }
}

/// Most bases in the genome, and most slots: 2^32.
const MAX: u64 = 1 << 32;

impl Params {
    /// Parameters with the table sized from the others unless `slots` is given: twice the
    /// distinct k-mers expected (the genome's, and up to `k` new ones per misread base).
    #[allow(clippy::too_many_arguments)]
    pub fn sized(
        genome: u64,
        coverage: u64,
        read_len: u64,
        k: u64,
        errors: u64,
        probes: u64,
        seed: u64,
        slots: Option<u64>,
    ) -> Params {
        let mut p = Params { genome, coverage, read_len, k, errors, probes, seed, slots: 0 };
        p.slots = slots.unwrap_or_else(|| {
            let bases = p.reads().saturating_mul(read_len);
            let expected = genome.saturating_add(bases.saturating_mul(errors).saturating_mul(k) / 1000);
            expected.min(p.kmers()).saturating_mul(2).clamp(1024, MAX).next_power_of_two()
        });
        p
    }

    /// Checks the flags; the error names the bad one and the fix.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !(1..=32).contains(&self.k) {
            return Err(format!("--k {}: a k-mer has 1 to 32 bases (two bits each in a word)", self.k));
        }
        if self.read_len < self.k {
            return Err(format!(
                "--read-len {} is shorter than --k {}: a read must hold a k-mer",
                self.read_len, self.k
            ));
        }
        if self.genome < self.read_len || self.genome > MAX {
            return Err(format!(
                "--genome {}: the genome must hold a read (--read-len {}) and have at most {MAX} bases",
                self.genome, self.read_len
            ));
        }
        if self.coverage == 0 || self.reads() == 0 {
            return Err(format!(
                "--coverage {} of a {}-base genome in {}-base reads makes no reads: raise --coverage",
                self.coverage, self.genome, self.read_len
            ));
        }
        if self.reads().checked_mul(self.read_len).is_none_or(|b| b > MAX) {
            return Err(format!(
                "--genome {} × --coverage {} is more than {MAX} bases of reads: make one smaller",
                self.genome, self.coverage
            ));
        }
        if self.errors > 1000 {
            return Err(format!("--errors {}: misread bases per thousand, at most 1000", self.errors));
        }
        if !self.slots.is_power_of_two() || self.slots < 2 || self.slots > MAX {
            return Err(format!("--slots {}: a power of two from 2 to {MAX}", self.slots));
        }
        Ok(())
    }

    /// Reads sampled from the genome.
    pub fn reads(&self) -> u64 {
        self.genome.saturating_mul(self.coverage) / self.read_len.max(1)
    }

    /// K-mers in the reads: the insertions.
    pub fn kmers(&self) -> u64 {
        self.reads() * (self.read_len + 1).saturating_sub(self.k)
    }

    /// Steps in all: insertions and probes.
    pub fn total(&self) -> u64 {
        self.kmers() + self.probes
    }

    /// Bytes of the table.
    pub fn table_bytes(&self) -> u64 {
        self.slots * 16
    }

    fn describe(&self) -> String {
        format!(
            "genome={} coverage={} read_len={} k={} errors={} probes={} seed={} slots={}",
            self.genome,
            self.coverage,
            self.read_len,
            self.k,
            self.errors,
            self.probes,
            self.seed,
            self.slots
        )
    }
}

/// The input: the genome and the reads, one base (0 to 3) per byte.
pub struct Input {
    genome: Vec<u8>,
    reads: Vec<u8>,
}

impl Input {
    /// The input of `p` (checked).
    pub fn generate(p: &Params) -> Input {
        let mut r = SplitMix(p.seed ^ 0x6E0E_5EED_0000_0003);
        let genome: Vec<u8> = (0..p.genome).map(|_| (r.next_u64() >> 62) as u8).collect();
        let len = p.read_len as usize;
        let mut reads = Vec::with_capacity(p.reads() as usize * len);
        for _ in 0..p.reads() {
            let at = (r.next_u64() % (p.genome - p.read_len + 1)) as usize;
            for &b in &genome[at..at + len] {
                let misread = r.next_u64() % 1000 < p.errors;
                reads.push(if misread { (b + 1 + (r.next_u64() % 3) as u8) % 4 } else { b });
            }
        }
        Input { genome, reads }
    }
}

/// `k` bases as a word, two bits each.
fn pack(bases: &[u8]) -> u64 {
    bases.iter().fold(0u64, |v, &b| (v << 2) | u64::from(b))
}

/// What a run computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// K-mers inserted.
    pub kmers: u64,
    /// Distinct k-mers in the table.
    pub distinct: u64,
    /// The sum, over occupied slots, of a hash of the k-mer times its count.
    pub table: u64,
    /// The largest count.
    pub max_count: u64,
    /// Probes made.
    pub probes: u64,
    /// Probes that found their k-mer.
    pub found: u64,
    /// The sum of the counts the probes found.
    pub hits: u64,
    /// A hash of every probe's k-mer and count, in order.
    pub probe_hash: u64,
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kmer kmers={} distinct={} table={:#018x} max_count={} probes={} found={} hits={} probe_hash={:#018x}",
            self.kmers, self.distinct, self.table, self.max_count, self.probes, self.found, self.hits, self.probe_hash
        )
    }
}

/// The root block: word indices.
pub(crate) const ROOT_WORDS: usize = 16;
const MAGIC: usize = 0;
const PARAMS: usize = 1; // genome, coverage, read_len, k, errors, probes, seed, slots: 1..=8
const DONE: usize = 9;
const DISTINCT: usize = 10;
const FOUND: usize = 11;
const HITS: usize = 12;
const PROBE_HASH: usize = 13;
const TABLE: usize = 14;

/// The blocks a root owns besides itself.
pub(crate) fn blocks(root: &Cells<'_, u64>) -> Vec<u64> {
    vec![root.get(TABLE)]
}

fn param_words(p: &Params) -> [u64; 8] {
    [p.genome, p.coverage, p.read_len, p.k, p.errors, p.probes, p.seed, p.slots]
}

/// Spreads k-mers over the table.
const SALT: u64 = 0x5EED_0F7A_B1E5_0005;

/// The state: the root's words and the table, with the input beside it.
pub struct State<'i, R, T> {
    input: &'i Input,
    p: Params,
    root: R,
    table: T,
}

impl<'i, R: Slots<u64>, T: Slots<u64>> State<'i, R, T> {
    /// A new state: `p` in `root`, `table` empty (zeroed, as `Rvm::alloc` returns it).
    fn create(input: &'i Input, p: &Params, mut root: R, table: T, table_addr: u64) -> Self {
        root.store(MAGIC, magic::KMER);
        for (i, w) in param_words(p).into_iter().enumerate() {
            root.store(PARAMS + i, w);
        }
        for i in DONE..ROOT_WORDS {
            root.store(i, 0);
        }
        root.store(TABLE, table_addr);
        State { input, p: p.clone(), root, table }
    }

    fn mask(&self) -> usize {
        self.p.slots as usize - 1
    }

    /// The `i`-th k-mer of the reads (0-based).
    fn kmer(&self, i: u64) -> u64 {
        let per_read = self.p.read_len - self.p.k + 1;
        let at = (i / per_read * self.p.read_len + i % per_read) as usize;
        pack(&self.input.reads[at..at + self.p.k as usize])
    }

    fn insert(&mut self, kmer: u64) -> Result<()> {
        let mask = self.mask();
        let mut h = mix(kmer ^ SALT) as usize & mask;
        loop {
            let count = self.table.load(2 * h + 1);
            if count == 0 {
                let distinct = self.root.load(DISTINCT);
                if (distinct + 1) * 10 > self.p.slots * 9 {
                    return Err(Error::Config(format!(
                        "the table is 90% full ({distinct} distinct k-mers in --slots {}): give more slots \
                         (a larger power of two)",
                        self.p.slots
                    )));
                }
                self.table.store(2 * h, kmer);
                self.table.store(2 * h + 1, 1);
                self.root.store(DISTINCT, distinct + 1);
                return Ok(());
            }
            if self.table.load(2 * h) == kmer {
                self.table.store(2 * h + 1, count + 1);
                return Ok(());
            }
            h = (h + 1) & mask;
        }
    }

    fn lookup(&self, kmer: u64) -> u64 {
        let mask = self.mask();
        let mut h = mix(kmer ^ SALT) as usize & mask;
        loop {
            let count = self.table.load(2 * h + 1);
            if count == 0 || self.table.load(2 * h) == kmer {
                return count;
            }
            h = (h + 1) & mask;
        }
    }

    /// The `q`-th probe's k-mer (0-based).
    fn probe_kmer(&self, q: u64) -> u64 {
        let z = mix(self.p.seed ^ 0x0B0E_0000_0000_0004 ^ q.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let k = self.p.k as usize;
        if q.is_multiple_of(2) {
            let at = (z % (self.p.genome - self.p.k + 1)) as usize;
            pack(&self.input.genome[at..at + k])
        } else if k == 32 {
            z
        } else {
            z & ((1u64 << (2 * k)) - 1)
        }
    }

    fn probe(&mut self, q: u64) {
        let kmer = self.probe_kmer(q);
        let count = self.lookup(kmer);
        let r = &mut self.root;
        r.store(FOUND, r.load(FOUND) + u64::from(count > 0));
        r.store(HITS, r.load(HITS) + count);
        r.store(PROBE_HASH, mix(r.load(PROBE_HASH) ^ kmer).wrapping_add(count));
    }

    fn answer(&self) -> Answer {
        let (mut table, mut max_count) = (0u64, 0u64);
        for h in 0..self.p.slots as usize {
            let count = self.table.load(2 * h + 1);
            if count > 0 {
                table = table.wrapping_add(mix(self.table.load(2 * h) ^ SALT).wrapping_mul(count));
                max_count = max_count.max(count);
            }
        }
        Answer {
            kmers: self.p.kmers(),
            distinct: self.root.load(DISTINCT),
            table,
            max_count,
            probes: self.p.probes,
            found: self.root.load(FOUND),
            hits: self.root.load(HITS),
            probe_hash: self.root.load(PROBE_HASH),
        }
    }
}

impl<R: Slots<u64>, T: Slots<u64>> Steps for State<'_, R, T> {
    fn done(&self) -> u64 {
        self.root.load(DONE)
    }

    fn step(&mut self) -> Result<()> {
        let s = self.root.load(DONE);
        let kmers = self.p.kmers();
        if s < kmers {
            self.insert(self.kmer(s))?;
        } else {
            self.probe(s - kmers);
        }
        self.root.store(DONE, s + 1);
        Ok(())
    }
}

/// The parameters a state's root was made with, if not `p`, as an error message.
fn differences(root: &impl Slots<u64>, p: &Params) -> Option<String> {
    let w: Vec<u64> = (0..8).map(|i| root.load(PARAMS + i)).collect();
    let have = Params {
        genome: w[0],
        coverage: w[1],
        read_len: w[2],
        k: w[3],
        errors: w[4],
        probes: w[5],
        seed: w[6],
        slots: w[7],
    };
    (have != *p).then(|| {
        format!(
            "the memory holds a kmer run of {} at step {} of {}, not {}: give the same flags to resume it, \
             or --fresh to discard it and start over",
            have.describe(),
            root.load(DONE),
            have.total(),
            p.describe()
        )
    })
}

/// The k-mer program as a [`Program`] on recoverable memory.
pub struct Kmer<'i> {
    /// The input.
    pub input: &'i Input,
    /// Its parameters.
    pub p: &'i Params,
}

impl<'i> Program for Kmer<'i> {
    type State<'a> = State<'i, Cells<'a, u64>, Cells<'a, u64>>;
    type Answer = Answer;

    fn total(&self) -> u64 {
        self.p.total()
    }

    fn state_pages(&self) -> u64 {
        self.p.table_bytes().div_ceil(4096)
    }

    fn attach<'a>(
        &self,
        rvm: &'a Rvm,
        fresh: bool,
        opened: Instant,
        ev: &mut dyn FnMut(Event),
    ) -> Result<Self::State<'a>> {
        let p = self.p;
        let words = 2 * p.slots as usize;
        let l = Layout {
            magic: magic::KMER,
            name: "kmer",
            root_words: ROOT_WORDS,
            data_at: TABLE,
            data_words: words,
        };
        match attach(rvm, &l, fresh, |root| differences(root, p))? {
            Attached::Resumed(root, table) => {
                ev(Event::Resumed { step: root.get(DONE), total: p.total(), open: opened.elapsed() });
                Ok(State { input: self.input, p: p.clone(), root, table })
            }
            Attached::Created { root, data, data_addr, root_ptr, discarded } => {
                let st = State::create(self.input, p, root, data, data_addr);
                started(rvm, root_ptr, discarded, ev)?;
                Ok(st)
            }
        }
    }

    fn answer(&self, st: &Self::State<'_>) -> Answer {
        st.answer()
    }
}

/// Runs the k-mer program on recoverable memory: resumes from its state if the memory holds
/// it (unless `fresh`), commits and injects failures as `s` says.
pub fn run_rvm(
    opts: &RvmOptions,
    input: &Input,
    p: &Params,
    s: &Schedule,
    fresh: bool,
    ev: &mut dyn FnMut(Event),
) -> Result<(Answer, Outcome)> {
    p.check().map_err(Error::Config)?;
    driver::run(&Kmer { input, p }, opts, s, fresh, ev)
}

/// Runs the k-mer program on plain memory, without persistence: the reference answer, and
/// the cost of the program alone.
pub fn run_plain(input: &Input, p: &Params) -> Result<Answer> {
    p.check().map_err(Error::Config)?;
    let mut st = State::create(input, p, vec![0u64; ROOT_WORDS], vec![0u64; 2 * p.slots as usize], 0);
    while st.done() < p.total() {
        st.step()?;
    }
    Ok(st.answer())
}

/// `mojim rvm kmer`: runs on the configuration's recoverable memory and prints the answer.
pub fn cli(a: &KmerArgs) -> Result<()> {
    let p = Params::sized(a.genome, a.coverage, a.read_len, a.k, a.errors, a.probes, a.seed, a.slots);
    p.check().map_err(Error::Config)?;
    let s = Schedule { commit_every: a.commit_every, fail_every: a.run.fail_every };
    s.check().map_err(Error::Config)?;
    let opts = a.run.options()?;
    let t0 = Instant::now();
    let input = Input::generate(&p);
    eprintln!(
        "kmer: {} reads of {} bases generated in {:.0} ms: {} k-mers to insert, {} probes; the table is \
         {} slots ({} KiB)",
        p.reads(),
        p.read_len,
        t0.elapsed().as_secs_f64() * 1e3,
        p.kmers(),
        p.probes,
        p.slots,
        p.table_bytes() / 1024
    );
    let (answer, out) = run_rvm(&opts, &input, &p, &s, a.run.fresh, &mut a.run.printer())?;
    eprintln!(
        "kmer: {} steps run ({} again after failures), {} commits, {:.2} s",
        out.steps_run,
        out.steps_run.saturating_sub(p.total()),
        out.commits.len(),
        out.total.as_secs_f64()
    );
    println!("answer: {answer}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Params {
        Params::sized(4096, 4, 50, 15, 20, 500, 3, None)
    }

    #[test]
    fn the_table_counts_every_kmer_and_probes_find_the_genome() {
        let p = small();
        assert!(p.check().is_ok(), "{:?}", p.check());
        let input = Input::generate(&p);
        let a = run_plain(&input, &p).unwrap();
        assert_eq!(a.kmers, 327 * 36);
        // Distinct k-mers: at least the genome's covered ones, at most one per insertion.
        assert!(a.distinct > 3000 && a.distinct < a.kmers, "{a}");
        assert!(a.max_count > 1, "{a}");
        // Even probes are genome k-mers (found unless every covering read was misread), odd
        // ones random 15-mers (2^30 of them: almost never found).
        assert!(a.found > 150 && a.found <= 260, "{a}");
        // Another seed, another answer.
        let q = Params { seed: 4, ..small() };
        assert_ne!(run_plain(&Input::generate(&q), &q).unwrap(), a);
        // A full table is an error, not a loop.
        let tiny = Params { slots: 1024, ..small() };
        let e = run_plain(&Input::generate(&tiny), &tiny).unwrap_err().to_string();
        assert!(e.contains("--slots 1024"), "{e}");
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        let cases: [(Params, &str); 6] = [
            (Params { k: 33, ..small() }, "--k 33"),
            (Params { k: 0, ..small() }, "--k 0"),
            (Params { read_len: 10, ..small() }, "--read-len 10"),
            (Params { genome: 20, ..small() }, "--genome 20"),
            (Params { errors: 1001, ..small() }, "--errors 1001"),
            (Params { slots: 1000, ..small() }, "--slots 1000"),
        ];
        for (p, want) in cases {
            let e = p.check().unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        let e = Params::sized(100, 0, 50, 15, 20, 5, 3, None).check().unwrap_err();
        assert!(e.contains("--coverage 0"), "{e}");
    }
}
