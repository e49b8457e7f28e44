//! `libmojim_preload.so`: replicates an unmodified program's files through Mojim.
//!
//! ```text
//! MOJIM_CONFIG=mojim.toml MOJIM_FILES=/data/db/data.mdb[:other] LD_PRELOAD=libmojim_preload.so program ...
//! ```
//!
//! Each file listed in `MOJIM_FILES` lives in the region the configuration names (laid out by
//! the file table, `mojim_format::files`, docs/FORMAT.md §9): writes to it are copied into its
//! slot, reads and mappings come from there, and the program's durability calls (`fsync`,
//! `fdatasync`, `sync_file_range` with `WAIT_AFTER`, a write through an `O_SYNC`/`O_DSYNC`
//! descriptor, `msync` of a mapping) become sync points: one atomic group of everything the
//! file changed since its last one, with the table when its size changed. The file on disk is
//! only a placeholder (it stays empty). Every other file is left alone.
//!
//! Start-up happens in a constructor, before `main`: a bad configuration or file list, or a
//! mirror that cannot be reached in `block` mode, ends the process with a message and status 1
//! before the program runs. Until then, and for this library's own I/O (the guard [`enter`]),
//! every call goes straight to the C library.
//!
//! Linux x86_64 with glibc only: variadic C functions (`open`, `fcntl`, `mremap`) are defined
//! with their optional argument as a plain one, which that ABI passes the same way.

// In the unit tests the start-up and the state are not reached (see `hooks` below).
#![cfg_attr(test, allow(dead_code, unused_imports, unused_macros))]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")))]
compile_error!("libmojim_preload.so supports Linux x86_64 with glibc only");

mod fds;
// The unit tests' binary links this crate too: it gets neither the interposed functions nor
// the constructor.
#[cfg(not(test))]
mod fresh;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
mod names;
mod real;
mod state;

use mojim::{Config, Primary, PrimaryOptions};
use mojim_format::files::FileTable;
use state::{Shared, Slot, State};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// The environment variables read at start.
pub const ENV_CONFIG: &str = "MOJIM_CONFIG";
pub const ENV_FILES: &str = "MOJIM_FILES";

const STARTING: u8 = 0;
const READY: u8 = 1;
/// A child forked after start: it has the region's mapping but not the primary's threads, so
/// it may not touch the listed files.
const FORKED: u8 = 2;

static PHASE: AtomicU8 = AtomicU8::new(STARTING);
static STATE: OnceLock<State> = OnceLock::new();

thread_local! {
    /// Set while this thread runs the interposer's own code: what it calls goes straight
    /// through. A const initialiser without drop: no allocation, usable at any time.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Holds [`BUSY`] for the current thread.
pub(crate) struct Busy(());

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(false));
    }
}

/// Enters the interposer's own code on this thread; `None` if it is already inside.
pub(crate) fn enter() -> Option<Busy> {
    BUSY.with(|b| {
        if b.get() {
            None
        } else {
            b.set(true);
            Some(Busy(()))
        }
    })
}

/// The state, once started (and not in a forked child).
pub(crate) fn ready() -> Option<&'static State> {
    if PHASE.load(Ordering::Acquire) == READY {
        STATE.get()
    } else {
        None
    }
}

pub(crate) fn forked() -> bool {
    PHASE.load(Ordering::Acquire) == FORKED
}

/// Says `msg` on standard error, prefixed with the library's name.
pub(crate) fn say(msg: &str) {
    let line = format!("mojim-preload: {msg}\n");
    // SAFETY: a raw write of a valid buffer to fd 2 (not through the interposed `write`).
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    let Some(_busy) = enter() else { return };
    match start() {
        Ok(st) => {
            if STATE.set(st).is_err() {
                unreachable!("the constructor runs once");
            }
            // SAFETY: registers a plain function for forked children; it only stores an atomic.
            unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            PHASE.store(READY, Ordering::Release);
        }
        Err(msg) => {
            say(&msg);
            // SAFETY: ends the process before the program runs; nothing of it to clean up.
            unsafe { libc::_exit(1) };
        }
    }
}

extern "C" fn in_child() {
    PHASE.store(FORKED, Ordering::Release);
}

/// The listed files, checked.
fn listed_files() -> Result<Vec<String>, String> {
    let v = std::env::var(ENV_FILES).map_err(|_| {
        format!(
            "{ENV_FILES} is not set (or not UTF-8): list the files to replicate, separated by ':', \
             e.g. {ENV_FILES}=/data/db/data.mdb"
        )
    })?;
    let names: Vec<String> = v.split(':').map(str::to_string).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(format!("{ENV_FILES}={v:?} has an empty entry: list paths separated by single ':'"));
    }
    Ok(names)
}

fn start() -> Result<State, String> {
    let names = listed_files()?;
    let cfg_path = std::env::var(ENV_CONFIG).map_err(|_| {
        format!(
            "{ENV_CONFIG} is not set (or not UTF-8): point it at the region's mojim.toml (made by \
             `mojim init`)"
        )
    })?;
    let cfg = Config::load(Path::new(&cfg_path)).map_err(|e| format!("{ENV_CONFIG}={cfg_path}: {e}"))?;
    let opts =
        PrimaryOptions::from_config(&cfg, false).map_err(|e| format!("{ENV_CONFIG}={cfg_path}: {e}"))?;
    let region = opts.region_path.clone();
    // One primary per region: `Primary::open` takes the region's lock (held while the primary
    // lives, that is, as long as the process), so a second process under the interposer (a
    // child that inherited the variables, a second start), or any other primary, is refused.
    let primary = Primary::open(&opts).map_err(|e| match e {
        mojim::Error::RegionLocked { .. } => format!(
            "{e}: run one program per region under the interposer (unset LD_PRELOAD for the programs it \
             starts)"
        ),
        e => format!(
            "cannot open the region {} as primary (mode {}, mirror {}): {e}",
            region.display(),
            opts.mode.name(),
            opts.mirror
        ),
    })?;
    let table = load_table(&primary, &names, &region)?;
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the working folder: {e}"))?;
    let slots: Vec<Slot> = table
        .entries
        .iter()
        .map(|e| {
            let abs = state::absolute(Path::new(&e.name), &cwd);
            let canon = state::canonical(&abs);
            Slot {
                base: state::last_component(e.name.as_bytes()).to_vec(),
                folders: state::folder_names([abs.as_path()].into_iter().chain(canon.as_deref())),
                canon: Mutex::new(canon),
                abs,
                name: e.name.clone(),
                offset: e.slot_offset,
                capacity: e.capacity,
                size: AtomicU64::new(e.size),
            }
        })
        .collect();
    make_placeholders(&slots);
    let n = slots.len();
    let st = State {
        base: primary.as_ptr() as usize,
        region_size: primary.size(),
        primary,
        slots,
        shared: Mutex::new(Shared {
            synced_size: table.entries.iter().map(|e| e.size).collect(),
            dirty: vec![Vec::new(); n],
            mapped: (0..n).map(|_| state::Mapped::No).collect(),
            table,
        }),
    };
    Ok(st)
}

/// The region's file table: made (and synced) on first use, else read and checked against the
/// listed files.
fn load_table(primary: &Primary, names: &[String], region: &Path) -> Result<FileTable, String> {
    let size = primary.size();
    let mut page = vec![0u8; size.min(4096) as usize];
    primary.read(0, &mut page).map_err(|e| format!("read the region's file table: {e}"))?;
    let listed: Vec<&str> = names.iter().map(String::as_str).collect();
    if FileTable::is_blank(&page) {
        let t = FileTable::layout(&listed, size).map_err(|e| {
            format!("{ENV_FILES}: {e} (region {}, {size} bytes; [region] size sets it)", region.display())
        })?;
        let bytes = t.encode();
        primary.write(0, &bytes).map_err(|e| format!("write the file table: {e}"))?;
        primary.msync(0, bytes.len() as u64).map_err(|e| format!("sync the new file table: {e}"))?;
        return Ok(t);
    }
    let t = FileTable::decode(&page).map_err(|e| {
        format!(
            "the region {}: {e}; a region used by the interposer starts blank (mojim init)",
            region.display()
        )
    })?;
    t.check_region_size(size).map_err(|e| format!("the region {}: {e}", region.display()))?;
    if t.names() != listed {
        return Err(format!(
            "the region {} holds the files {} ({ENV_FILES} when it was first used), but {ENV_FILES} lists {}: \
             list the same files in the same order, or use another region",
            region.display(),
            t.names().join(":"),
            listed.join(":")
        ));
    }
    Ok(t)
}

/// A file with contents in the region but no file on disk (the region was promoted on another
/// machine) gets an empty placeholder, so that opening it without `O_CREAT` finds it.
fn make_placeholders(slots: &[Slot]) {
    for s in slots.iter().filter(|s| s.size.load(Ordering::Relaxed) > 0) {
        let exists = std::fs::symlink_metadata(&s.abs).is_ok();
        let dir_exists = s.abs.parent().is_some_and(Path::is_dir);
        if !exists && dir_exists {
            use std::os::unix::fs::OpenOptionsExt;
            if let Err(e) = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&s.abs)
            {
                say(&format!("cannot create the placeholder {}: {e}", s.abs.display()));
            }
        }
    }
}
