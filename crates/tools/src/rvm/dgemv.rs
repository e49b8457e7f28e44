//! DGEMV (the report's §3.5): an iterative dense matrix-vector multiply whose only state is a
//! vector and the iteration count.
//!
//! The matrix `A` (`rows` × `cols`, entries in [-1, 1)) is input: generated from the seed, the
//! same in every run, never saved. The vector `x` (`rows` values) is the state. Iteration `i`
//! computes `y = A (Aᵀ x) + s_i x`, a power-iteration step with a shift `s_i` that cycles with
//! `i` (so that a vector paired with the wrong iteration count gives another answer), and
//! stores `x = y / |y|`, so the values stay finite. Each value of `x` is written every
//! iteration: the whole vector is dirty at every commit, the best case for a checkpoint that
//! writes everything (as in the report).
//!
//! Three ways to run it: on recoverable memory ([`run_rvm`]: `x` and the count updated in
//! place, a commit every `k` iterations), with manual serialization ([`run_file`]: the vector
//! written to a file and fsynced at the same points), and on plain memory ([`run_plain`]: no
//! persistence, the reference answer). Floating-point operations happen in the same order in
//! all three, so their answers are equal bit for bit.

use super::driver::{self, Program, Steps};
use super::mem::{Cells, Slots};
use super::schedule::{Event, Injector, Outcome, Schedule};
use super::{attach, magic, started, Attached, Layout, RunArgs, SplitMix};
use mojim::error::{Error, Result};
use mojim_rvm::{Rvm, RvmOptions};
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `mojim rvm dgemv`.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = DGEMV_HELP)]
pub struct DgemvArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Rows of the matrix: values in the vector, the recoverable state (8 bytes each).
    #[arg(long, default_value_t = Params::default().rows)]
    pub rows: usize,
    /// Columns of the matrix.
    #[arg(long, default_value_t = Params::default().cols)]
    pub cols: usize,
    /// Iterations.
    #[arg(long, default_value_t = Params::default().iterations)]
    pub iterations: u64,
    /// The report's sizes: --rows 1048576 --cols 100 --iterations 100 (an 800 MB matrix, an
    /// 8 MiB vector; about 11 s per run on this 2-core machine).
    #[arg(long, conflicts_with_all = ["rows", "cols", "iterations"])]
    pub report_sizes: bool,
    /// Seed of the matrix and the first vector.
    #[arg(long, default_value_t = Params::default().seed)]
    pub seed: u64,
    /// Commit after every N iterations (and after the last).
    #[arg(long, default_value_t = 1)]
    pub commit_every: u64,
}

const DGEMV_HELP: &str = "\
Each iteration computes y = A (Aᵀ x) + s x and stores x = y / |y| in place: the whole vector is
written every iteration. The matrix is input, generated from --seed (never saved); the vector,
the iteration count and the last norm are recoverable. A commit every --commit-every
iterations makes them durable; --fail-every N drops the process's state after every N-th
iteration (the memory is closed without committing) and recovers from the last commit; a
SIGKILL does the same from outside. Run it again with the same flags to resume; the answer
line (iterations, a checksum of the vector's bits, the last norm) equals an uninterrupted
run's bit for bit. Memory: the configuration's [rvm] section (--config).

Examples:
  mojim rvm dgemv --config mojim.toml --commit-every 5 --fail-every 7
  mojim rvm dgemv --config mojim.toml --report-sizes --fresh";

/// What to compute. Defaults take about a second on two cores: a 131072 × 100 matrix (100 MiB),
/// a 1 MiB vector, as in the report a tenth of an iteration's time to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Rows of the matrix: values in the vector.
    pub rows: usize,
    /// Columns of the matrix.
    pub cols: usize,
    /// Iterations in all.
    pub iterations: u64,
    /// Seed of the matrix and the first vector.
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { rows: 1 << 17, cols: 100, iterations: 100, seed: 1 }
    }
}

impl Params {
    /// The report's sizes (§3.5): a 1M × 100 matrix, 100 iterations.
    pub fn report() -> Params {
        Params { rows: 1 << 20, cols: 100, iterations: 100, seed: 1 }
    }
}

/// Most values in the matrix: 2^31 (16 GiB).
const MAX_CELLS: usize = 1 << 31;

impl Params {
    /// Checks the sizes; the error names the bad flag.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.rows == 0 || self.cols == 0 || self.iterations == 0 {
            return Err(format!(
                "--rows {}, --cols {}, --iterations {}: each must be at least 1",
                self.rows, self.cols, self.iterations
            ));
        }
        if self.rows.checked_mul(self.cols).is_none_or(|n| n > MAX_CELLS) {
            return Err(format!(
                "--rows {} × --cols {} is more than {MAX_CELLS} matrix values (16 GiB): make one smaller",
                self.rows, self.cols
            ));
        }
        Ok(())
    }

    /// Bytes of the state: the vector.
    pub fn vector_bytes(&self) -> u64 {
        self.rows as u64 * 8
    }

    fn describe(&self) -> String {
        format!("rows={} cols={} iterations={} seed={}", self.rows, self.cols, self.iterations, self.seed)
    }
}

/// The input matrix, row-major.
pub struct Matrix {
    a: Vec<f64>,
    rows: usize,
    cols: usize,
}

impl Matrix {
    /// The matrix of `p`: entries in [-1, 1) from the seed.
    pub fn generate(p: &Params) -> Matrix {
        let mut r = SplitMix(p.seed ^ 0xA11C_E5ED_0000_0001);
        let a = (0..p.rows * p.cols).map(|_| 2.0 * r.unit() - 1.0).collect();
        Matrix { a, rows: p.rows, cols: p.cols }
    }
}

/// What a run computes: equal, bit for bit, for every way of running the same parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Iterations done.
    pub iterations: u64,
    /// A hash of the vector's bits, in order.
    pub checksum: u64,
    /// The bits of `|y|` in the last iteration.
    pub norm_bits: u64,
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dgemv iterations={} checksum={:#018x} norm={:.6e} (bits {:#018x})",
            self.iterations,
            self.checksum,
            f64::from_bits(self.norm_bits),
            self.norm_bits
        )
    }
}

/// The first vector of `p`: seeded values in [-1, 1), normalised.
fn init(p: &Params, x: &mut impl Slots<f64>) {
    let mut r = SplitMix(p.seed ^ 0x0F1E_57FE_C700_0002);
    let mut ss = 0.0;
    for i in 0..p.rows {
        let v = 2.0 * r.unit() - 1.0;
        x.store(i, v);
        ss += v * v;
    }
    let inv = 1.0 / ss.sqrt();
    for i in 0..p.rows {
        x.store(i, x.load(i) * inv);
    }
}

/// Iteration `i` (1-based) on `x`, in place: `x = y / |y|` with `y = A (Aᵀ x) + s_i x`.
/// Returns `|y|`. `t` is scratch of `cols` values.
fn iterate(m: &Matrix, x: &mut impl Slots<f64>, t: &mut [f64], i: u64) -> f64 {
    let c = m.cols;
    t.fill(0.0);
    for (r, row) in m.a.chunks_exact(c).enumerate() {
        let xr = x.load(r);
        for (tj, aj) in t.iter_mut().zip(row) {
            *tj += aj * xr;
        }
    }
    // The largest eigenvalue of A Aᵀ is about rows / 3 · (1 + …): shift by 0, 0.1 or 0.2 of it.
    let shift = (i % 3) as f64 * 0.1 * m.rows as f64 / 3.0;
    let mut ss = 0.0;
    for (r, row) in m.a.chunks_exact(c).enumerate() {
        let mut y = shift * x.load(r);
        for (aj, tj) in row.iter().zip(t.iter()) {
            y += aj * tj;
        }
        x.store(r, y);
        ss += y * y;
    }
    let norm = ss.sqrt();
    let inv = 1.0 / norm;
    for r in 0..m.rows {
        x.store(r, x.load(r) * inv);
    }
    norm
}

fn checksum(x: &impl Slots<f64>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for i in 0..x.count() {
        h = (h ^ x.load(i).to_bits()).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
    }
    h
}

/// The root block in recoverable memory: word indices.
pub(crate) const ROOT_WORDS: usize = 8;
const MAGIC: usize = 0;
const ROWS: usize = 1;
const COLS: usize = 2;
const ITERATIONS: usize = 3;
const SEED: usize = 4;
const DONE: usize = 5;
const NORM: usize = 6;
const VECTOR: usize = 7;

/// The blocks a root owns besides itself.
pub(crate) fn blocks(root: &Cells<'_, u64>) -> Vec<u64> {
    vec![root.get(VECTOR)]
}

/// The state: the root's words (magic, parameters, iterations done, last norm, the vector's
/// address) and the vector; the matrix it multiplies by and scratch space beside it.
pub struct State<'m, R, X> {
    m: &'m Matrix,
    t: Vec<f64>,
    root: R,
    x: X,
}

impl<'m, R: Slots<u64>, X: Slots<f64>> State<'m, R, X> {
    /// A new state: `p`'s parameters in `root`, the first vector in `x`.
    fn create(m: &'m Matrix, mut root: R, mut x: X, p: &Params, vector_addr: u64) -> Self {
        for (i, v) in [
            (MAGIC, magic::DGEMV),
            (ROWS, p.rows as u64),
            (COLS, p.cols as u64),
            (ITERATIONS, p.iterations),
            (SEED, p.seed),
            (DONE, 0),
            (NORM, 0),
            (VECTOR, vector_addr),
        ] {
            root.store(i, v);
        }
        init(p, &mut x);
        State { m, t: vec![0.0; p.cols], root, x }
    }

    fn iterate(&mut self) {
        let i = self.root.load(DONE) + 1;
        let norm = iterate(self.m, &mut self.x, &mut self.t, i);
        self.root.store(NORM, norm.to_bits());
        self.root.store(DONE, i);
    }

    fn answer(&self) -> Answer {
        Answer {
            iterations: self.root.load(DONE),
            checksum: checksum(&self.x),
            norm_bits: self.root.load(NORM),
        }
    }
}

impl<R: Slots<u64>, X: Slots<f64>> Steps for State<'_, R, X> {
    fn done(&self) -> u64 {
        self.root.load(DONE)
    }

    fn step(&mut self) -> Result<()> {
        self.iterate();
        Ok(())
    }
}

/// The differences between the parameters a state's root was made with and `p`, as an error
/// message.
fn differences(root: &impl Slots<u64>, p: &Params) -> Option<String> {
    let have = Params {
        rows: root.load(ROWS) as usize,
        cols: root.load(COLS) as usize,
        iterations: root.load(ITERATIONS),
        seed: root.load(SEED),
    };
    (have != *p).then(|| {
        format!(
            "the memory holds a dgemv run of {} at iteration {}, not {}: give the same flags to resume it, \
             or --fresh to discard it and start over",
            have.describe(),
            root.load(DONE),
            p.describe()
        )
    })
}

/// DGEMV as a [`Program`] on recoverable memory.
pub struct Dgemv<'m> {
    /// The input.
    pub m: &'m Matrix,
    /// Its parameters.
    pub p: &'m Params,
}

impl<'m> Program for Dgemv<'m> {
    type State<'a> = State<'m, Cells<'a, u64>, Cells<'a, f64>>;
    type Answer = Answer;

    fn total(&self) -> u64 {
        self.p.iterations
    }

    fn state_pages(&self) -> u64 {
        self.p.vector_bytes().div_ceil(4096)
    }

    fn attach<'a>(
        &self,
        rvm: &'a Rvm,
        fresh: bool,
        opened: Instant,
        ev: &mut dyn FnMut(Event),
    ) -> Result<Self::State<'a>> {
        let p = self.p;
        let l = Layout {
            magic: magic::DGEMV,
            name: "dgemv",
            root_words: ROOT_WORDS,
            data_at: VECTOR,
            data_words: p.rows,
        };
        match attach(rvm, &l, fresh, |root| differences(root, p))? {
            Attached::Resumed(root, x) => {
                ev(Event::Resumed { step: root.get(DONE), total: p.iterations, open: opened.elapsed() });
                Ok(State { m: self.m, t: vec![0.0; p.cols], root, x })
            }
            Attached::Created { root, data, data_addr, root_ptr, discarded } => {
                let st = State::create(self.m, root, data, p, data_addr);
                started(rvm, root_ptr, discarded, ev)?;
                Ok(st)
            }
        }
    }

    fn answer(&self, st: &Self::State<'_>) -> Answer {
        st.answer()
    }
}

/// Runs DGEMV on recoverable memory: resumes from its state if the memory holds it (unless
/// `fresh`), commits and injects failures as `s` says.
pub fn run_rvm(
    opts: &RvmOptions,
    m: &Matrix,
    p: &Params,
    s: &Schedule,
    fresh: bool,
    ev: &mut dyn FnMut(Event),
) -> Result<(Answer, Outcome)> {
    p.check().map_err(Error::Config)?;
    driver::run(&Dgemv { m, p }, opts, s, fresh, ev)
}

/// Runs DGEMV on plain memory, without persistence: the reference answer.
pub fn run_plain(m: &Matrix, p: &Params) -> Result<Answer> {
    p.check().map_err(Error::Config)?;
    let mut st = State::create(m, vec![0u64; ROOT_WORDS], vec![0f64; p.rows], p, 0);
    while st.done() < p.iterations {
        st.iterate();
    }
    Ok(st.answer())
}

/// Manual serialization: the file's header (64 bytes, little-endian words: magic, rows, cols,
/// iterations, seed, iterations done, last norm, CRC-32C of the vector), then the vector.
const FILE_MAGIC: u64 = u64::from_le_bytes(*b"DGEMVSER");

/// Writes the state to `path` whole: to a temporary file beside it, fsynced, then renamed over
/// it (so a crash leaves the old file or the new one).
fn save(path: &Path, st: &State<'_, Vec<u64>, Vec<f64>>, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    for w in [
        FILE_MAGIC,
        st.root[ROWS],
        st.root[COLS],
        st.root[ITERATIONS],
        st.root[SEED],
        st.root[DONE],
        st.root[NORM],
        0,
    ] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    for v in &st.x {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    let crc = mojim_format::checksum::crc32c(&buf[64..]);
    buf[56..64].copy_from_slice(&u64::from(crc).to_le_bytes());
    let tmp = tmp_path(path);
    let mut f = std::fs::File::create(&tmp).map_err(Error::io(format!("create {}", tmp.display())))?;
    f.write_all(buf).map_err(Error::io(format!("write {}", tmp.display())))?;
    f.sync_all().map_err(Error::io(format!("fsync {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(Error::io(format!("rename {} to {}", tmp.display(), path.display())))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".tmp");
    PathBuf::from(p)
}

/// Reads the state back from `path`, if there is one; one of other parameters, or damaged, is
/// an error naming the file.
fn load<'m>(
    path: &Path,
    m: &'m Matrix,
    p: &Params,
    buf: &mut Vec<u8>,
) -> Result<Option<State<'m, Vec<u64>, Vec<f64>>>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("open {}", path.display()))(e)),
    };
    buf.clear();
    f.read_to_end(buf).map_err(Error::io(format!("read {}", path.display())))?;
    let word = |i: usize| u64::from_le_bytes(buf[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let bad = |why: &str| Error::Config(format!("{} {why}: remove it, or run with --fresh", path.display()));
    if buf.len() < 64 || word(0) != FILE_MAGIC {
        return Err(bad("is not a dgemv state file"));
    }
    let root: Vec<u64> = (0..ROOT_WORDS).map(|i| if i == MAGIC { magic::DGEMV } else { word(i) }).collect();
    if buf.len() != 64 + 8 * root[ROWS] as usize
        || u64::from(mojim_format::checksum::crc32c(&buf[64..])) != word(7)
    {
        return Err(bad("is damaged (its length or checksum is wrong)"));
    }
    let x = buf[64..].chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    if let Some(why) = differences(&root, p) {
        return Err(Error::Config(format!("{}: {why}", path.display())));
    }
    Ok(Some(State { m, t: vec![0.0; p.cols], root, x }))
}

/// Runs DGEMV with manual serialization to `path` at the same points as [`run_rvm`]'s commits
/// (and at the start); a failure drops the memory's state and reads the file back.
pub fn run_file(
    path: &Path,
    m: &Matrix,
    p: &Params,
    s: &Schedule,
    fresh: bool,
    ev: &mut dyn FnMut(Event),
) -> Result<(Answer, Outcome)> {
    p.check().map_err(Error::Config)?;
    s.check().map_err(Error::Config)?;
    let t0 = Instant::now();
    let mut inj = Injector::new(s.fail_every);
    let mut out = Outcome { state_pages: (64 + p.vector_bytes()).div_ceil(4096), ..Outcome::default() };
    let mut buf = Vec::new();
    if fresh {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("remove {}", path.display()))(e))
            }
            _ => {}
        }
    }
    let mut failed_at: Option<Instant> = None;
    loop {
        let opened = Instant::now();
        let mut st = match load(path, m, p, &mut buf)? {
            Some(st) => {
                ev(Event::Resumed { step: st.done(), total: p.iterations, open: opened.elapsed() });
                st
            }
            None => {
                let st = State::create(m, vec![0u64; ROOT_WORDS], vec![0f64; p.rows], p, 0);
                save(path, &st, &mut buf)?;
                ev(Event::Started { discarded: fresh });
                st
            }
        };
        if let Some(f) = failed_at.take() {
            out.recoveries.push(f.elapsed());
        }
        let mut failed = false;
        while st.done() < p.iterations {
            st.iterate();
            out.steps_run += 1;
            let i = st.done();
            if inj.due(i) {
                ev(Event::Failed { step: i });
                failed = true;
                break;
            }
            if s.commit_after(i, p.iterations) {
                let tc = Instant::now();
                save(path, &st, &mut buf)?;
                out.commits.push(tc.elapsed());
                out.pages_sent += out.state_pages;
                ev(Event::Committed { step: i, total: p.iterations });
            }
        }
        if failed {
            failed_at = Some(Instant::now());
            continue;
        }
        out.failures = inj.failures;
        out.total = t0.elapsed();
        return Ok((st.answer(), out));
    }
}

/// `mojim rvm dgemv`: runs on the configuration's recoverable memory and prints the answer.
pub fn cli(a: &DgemvArgs) -> Result<()> {
    let p = if a.report_sizes {
        Params { seed: a.seed, ..Params::report() }
    } else {
        Params { rows: a.rows, cols: a.cols, iterations: a.iterations, seed: a.seed }
    };
    p.check().map_err(Error::Config)?;
    let s = Schedule { commit_every: a.commit_every, fail_every: a.run.fail_every };
    s.check().map_err(Error::Config)?;
    let opts = a.run.options()?;
    let t0 = Instant::now();
    let m = Matrix::generate(&p);
    eprintln!(
        "dgemv: {} × {} matrix generated in {:.0} ms; the state is a {} KiB vector",
        p.rows,
        p.cols,
        t0.elapsed().as_secs_f64() * 1e3,
        p.vector_bytes() / 1024
    );
    let (answer, out) = run_rvm(&opts, &m, &p, &s, a.run.fresh, &mut a.run.printer())?;
    eprintln!(
        "dgemv: {} iterations run ({} again after failures), {} commits, {:.2} s",
        out.steps_run,
        out.steps_run.saturating_sub(p.iterations),
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
        Params { rows: 300, cols: 7, iterations: 12, seed: 5 }
    }

    #[test]
    fn the_file_run_with_failures_equals_the_plain_run_bit_for_bit() {
        let p = small();
        let m = Matrix::generate(&p);
        let reference = run_plain(&m, &p).unwrap();
        let dir = std::env::temp_dir().join(format!("mojim-dgemv-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state");
        let mut events = Vec::new();
        let s = Schedule { commit_every: 2, fail_every: Some(3) };
        let (a, out) = run_file(&path, &m, &p, &s, true, &mut |e| events.push(e)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(a, reference);
        assert_eq!(out.failures, 4, "after 3, 6, 9 and 12");
        assert!(out.steps_run > p.iterations, "failures cost iterations: {out:?}");
        assert!(events.iter().any(|e| matches!(e, Event::Resumed { step: 2, .. })), "{events:?}");
        // Another seed, another answer: the checksum sees the vector.
        let q = Params { seed: 6, ..small() };
        assert_ne!(run_plain(&Matrix::generate(&q), &q).unwrap(), reference);
        // The iteration count matters: fewer iterations, another answer.
        let r = Params { iterations: 11, ..small() };
        assert_ne!(run_plain(&Matrix::generate(&r), &r).unwrap().checksum, reference.checksum);
    }

    #[test]
    fn bad_sizes_are_refused_by_name() {
        let e = Params { rows: 0, ..small() }.check().unwrap_err();
        assert!(e.contains("--rows 0"), "{e}");
        let e = Params { iterations: 0, ..small() }.check().unwrap_err();
        assert!(e.contains("--iterations 0"), "{e}");
        let e = Params { rows: 1 << 30, cols: 100, ..small() }.check().unwrap_err();
        assert!(e.contains("--rows 1073741824 × --cols 100"), "{e}");
    }
}
