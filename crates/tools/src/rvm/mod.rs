//! Recoverable memory's applications and evaluation (the Nephele report's §3): two programs
//! that keep their state in recoverable memory and resume after a crash, and
//! `mojim bench --rvm`.
//!
//! - [`dgemv`]: an iterative dense matrix-vector multiply whose vector and iteration count are
//!   recoverable (§3.5), with manual serialization to a file as the comparison.
//! - [`kmer`]: a k-mer count table (open addressing) built from a generated DNA-like input and
//!   then probed, the hash-table-heavy phase of genome assembly (§3.6).
//! - [`bench`] (`mojim bench --rvm`): commit latency by pages written and recovery time per
//!   backend ([`bench_commit`]), both programs against commit and failure intervals beside
//!   manual serialization and no persistence ([`bench_apps`]), on stores the run starts and
//!   removes ([`stores`]): Mojim with userfaultfd and with page protection, and Redis.
//!
//! The programs reach recoverable memory through [`mem::Cells`], run by [`driver`] as a
//! [`schedule::Schedule`] says.
//!
//! `mojim rvm dgemv|kmer --config mojim.toml` runs a program on the configuration's `[rvm]`
//! memory: it resumes from the last commit if the memory holds its state, prints a line per
//! commit and, at the end, its answer, which equals an uninterrupted run's whatever crashed on
//! the way.

pub mod bench;
pub mod bench_apps;
pub mod bench_commit;
pub mod bench_dump;
pub mod dgemv;
pub mod driver;
pub mod kmer;
pub mod mem;
pub mod schedule;
pub mod stores;

use mem::Cells;
use mojim::error::{Error, Result};
use mojim::Config;
use mojim_rvm::{Rvm, RvmError, RvmOptions};
use schedule::Event;
use std::path::PathBuf;

/// `mojim rvm`: the example programs on recoverable memory.
#[derive(clap::Args, Debug)]
pub struct RvmArgs {
    #[command(subcommand)]
    pub program: Program,
}

/// The programs.
#[derive(clap::Subcommand, Debug)]
pub enum Program {
    /// Iterative dense matrix-vector multiply; the vector and the iteration count are
    /// recoverable (the report's §3.5).
    Dgemv(dgemv::DgemvArgs),
    /// Build a k-mer count hash table from a generated DNA-like input, then probe it; the
    /// table and the progress are recoverable (the report's §3.6).
    Kmer(kmer::KmerArgs),
}

/// What every program takes: where its memory is, and when to commit and fail.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Configuration file: its [rvm] section (and [region], [primary]) says where the memory is.
    #[arg(long, short, default_value = "mojim.toml")]
    pub config: PathBuf,
    /// Run without a cluster secret (no authentication). Never on a shared network.
    #[arg(long)]
    pub insecure: bool,
    /// Inject a failure after every N steps (close without committing, then recover and go on).
    #[arg(long)]
    pub fail_every: Option<u64>,
    /// Discard the state the memory holds (this program's or another's) and start over.
    #[arg(long)]
    pub fresh: bool,
    /// Print only the answer, not a line per commit.
    #[arg(long)]
    pub quiet: bool,
}

impl RunArgs {
    /// The memory's options from the configuration file.
    pub fn options(&self) -> Result<RvmOptions> {
        let cfg = Config::load(&self.config)?;
        RvmOptions::from_config(&cfg, self.insecure).map_err(rvm_error)
    }

    /// Prints progress lines on stdout (one per event), unless `--quiet`.
    pub fn printer(&self) -> impl FnMut(Event) {
        let quiet = self.quiet;
        move |e| {
            let line = match e {
                Event::Started { discarded: true } => "started: fresh (the old state was discarded)".into(),
                Event::Started { discarded: false } => "started: fresh".into(),
                Event::Resumed { step, total, open } => format!(
                    "resumed: step {step} of {total} (opened and recovered in {:.1} ms)",
                    open.as_secs_f64() * 1e3
                ),
                Event::Committed { step, total } if !quiet => format!("committed: step {step} of {total}"),
                Event::Failed { step } => format!("failure injected after step {step}: recovering"),
                Event::Committed { .. } => return,
            };
            println!("{line}");
        }
    }
}

/// Runs `mojim rvm <program>`.
pub fn run(a: &RvmArgs) -> Result<()> {
    match &a.program {
        Program::Dgemv(d) => dgemv::cli(d),
        Program::Kmer(k) => kmer::cli(k),
    }
}

/// An error of recoverable memory as the CLI's error: the Mojim backend's and system calls'
/// as they are, the rest with their message.
pub fn rvm_error(e: RvmError) -> Error {
    match e {
        RvmError::Mojim(e) => e,
        RvmError::Io { op, source } => Error::Io { op, source },
        RvmError::Config(m) => Error::Config(m),
        other => {
            Error::Io { op: "recoverable memory".into(), source: std::io::Error::other(other.to_string()) }
        }
    }
}

/// A problem with the state a program found: the message says what and what to do.
pub(crate) fn state_error(msg: String) -> Error {
    Error::Config(msg)
}

/// The first word of each program's root block.
pub(crate) mod magic {
    /// DGEMV's root.
    pub const DGEMV: u64 = u64::from_le_bytes(*b"RVMDGEMV");
    /// The k-mer program's root.
    pub const KMER: u64 = u64::from_le_bytes(*b"RVMKMERS");
}

/// What the memory's root pointer leads to.
pub(crate) enum Found<'a> {
    /// Nothing: the memory is empty.
    Nothing,
    /// A program's root block, `words` long, with the magic asked for.
    Mine(Cells<'a, u64>),
    /// Something else: the message names it.
    Other(String),
}

/// The root block of `words` words with first word `want`, if the memory's root pointer leads
/// to one.
pub(crate) fn find_root<'a>(rvm: &'a Rvm, want: u64, words: usize) -> Result<Found<'a>> {
    let p = rvm.usr_data();
    if p.is_null() {
        return Ok(Found::Nothing);
    }
    let first = mem::cells::<u64>(rvm, p, 1).map_err(state_error)?.get(0);
    let name = match first {
        magic::DGEMV => "`mojim rvm dgemv`",
        magic::KMER => "`mojim rvm kmer`",
        _ => {
            return Ok(Found::Other(format!(
                "the memory's root pointer (usr_data) leads to something that is no example program's \
                 state (its first word is {first:#018x})"
            )))
        }
    };
    if first != want {
        return Ok(Found::Other(format!("the memory holds the state of {name}")));
    }
    Ok(Found::Mine(mem::cells(rvm, p, words).map_err(state_error)?))
}

/// A program's state in the memory: a root block of `root_words` words whose first is the
/// program's magic, and one array of `data_words` values of `T` whose address the root's word
/// `data_at` holds.
pub(crate) struct Layout {
    pub magic: u64,
    pub name: &'static str,
    pub root_words: usize,
    pub data_at: usize,
    pub data_words: usize,
}

/// What [`attach`] found or made.
pub(crate) enum Attached<'a, T: mojim_rvm::Plain> {
    /// The program's state, to resume: its root and its array.
    Resumed(Cells<'a, u64>, Cells<'a, T>),
    /// New blocks for it (whatever was there discarded): the root (zeroed, not yet the root
    /// pointer), the array and its address. The program writes its root, then calls [`started`].
    Created { root: Cells<'a, u64>, data: Cells<'a, T>, data_addr: u64, root_ptr: *mut u8, discarded: bool },
}

/// Finds the program's state (unless `fresh`), checked by `differs` (why the state is not the
/// one this run asks for), or makes new blocks for it.
pub(crate) fn attach<'a, T: mojim_rvm::Plain>(
    rvm: &'a Rvm,
    l: &Layout,
    fresh: bool,
    differs: impl Fn(&Cells<'_, u64>) -> Option<String>,
) -> Result<Attached<'a, T>> {
    if !fresh {
        match find_root(rvm, l.magic, l.root_words)? {
            Found::Mine(root) => {
                if let Some(why) = differs(&root) {
                    return Err(state_error(why));
                }
                let data =
                    mem::cells(rvm, root.get(l.data_at) as *mut u8, l.data_words).map_err(state_error)?;
                return Ok(Attached::Resumed(root, data));
            }
            Found::Other(what) => {
                return Err(state_error(format!(
                    "{what}, not {}'s: run that program to resume it, or pass --fresh to discard it",
                    l.name
                )))
            }
            Found::Nothing => {}
        }
    }
    let discarded = discard(rvm)?;
    let root_ptr = rvm.alloc(l.root_words * 8).map_err(rvm_error)?;
    let data_ptr = rvm.alloc(l.data_words * std::mem::size_of::<T>()).map_err(rvm_error)?;
    let root = mem::cells(rvm, root_ptr, l.root_words).map_err(state_error)?;
    let data = mem::cells(rvm, data_ptr, l.data_words).map_err(state_error)?;
    Ok(Attached::Created { root, data, data_addr: data_ptr as u64, root_ptr, discarded })
}

/// Makes the root written by the program the memory's root pointer, commits it, and reports
/// [`Event::Started`].
pub(crate) fn started(
    rvm: &Rvm,
    root_ptr: *mut u8,
    discarded: bool,
    ev: &mut dyn FnMut(Event),
) -> Result<()> {
    rvm.set_usr_data(root_ptr).map_err(rvm_error)?;
    rvm.txn_commit().map_err(rvm_error)?;
    ev(Event::Started { discarded });
    Ok(())
}

/// Frees the blocks of whatever state the memory holds (an example program's; of anything
/// else, only the root pointer is cleared) and clears the root pointer, without committing:
/// the next commit drops the old state and makes the new one in one step. Whether there was any.
pub(crate) fn discard(rvm: &Rvm) -> Result<bool> {
    let p = rvm.usr_data();
    if p.is_null() {
        return Ok(false);
    }
    let first = mem::cells::<u64>(rvm, p, 1).map_err(state_error)?.get(0);
    let blocks = match first {
        magic::DGEMV => dgemv::blocks(&mem::cells(rvm, p, dgemv::ROOT_WORDS).map_err(state_error)?),
        magic::KMER => kmer::blocks(&mem::cells(rvm, p, kmer::ROOT_WORDS).map_err(state_error)?),
        _ => Vec::new(),
    };
    for b in blocks {
        rvm.free(b as *mut u8).map_err(rvm_error)?;
    }
    if first == magic::DGEMV || first == magic::KMER {
        rvm.free(p).map_err(rvm_error)?;
    }
    rvm.set_usr_data(std::ptr::null_mut()).map_err(rvm_error)?;
    Ok(true)
}

/// SplitMix64: the programs' inputs come from it, so a seed names an input.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64's finaliser: a bijection of `u64` that scatters nearby inputs.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
