//! SIGTERM and SIGINT: the clean stop of `mojim serve` and `mojim kv` (systemd's `systemctl
//! stop` sends SIGTERM; a second signal while stopping is only logged). signal-hook's handler
//! only wakes a thread; the daemon stops from its own code.
//!
//! - `mojim serve` stops accepting, ends the session, applies every complete group in its logs
//!   to the data area and makes it durable, and exits 0. Its logs need nothing more: a group is
//!   acknowledged only once it is durable in them.
//! - `mojim kv` stops accepting and reading, answers every request it had read (each one's
//!   group acknowledged before its reply), closes its clients and the region, and exits 0
//!   (`mojim_kv::run_with`).

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// The signals that ask a daemon to stop.
pub const STOP_SIGNALS: [i32; 2] = [SIGTERM, SIGINT];

/// The name of a stop signal, for the log.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        _ => "a signal",
    }
}

/// Installs the stop signals' handlers; the returned iterator yields each signal that arrives.
/// Installed before the daemon opens anything, so that a stop asked for while it starts is
/// kept and acted on once it serves.
pub fn signals() -> std::io::Result<Signals> {
    Signals::new(STOP_SIGNALS)
}

/// Waits for the first stop signal, logs it with what the daemon does now (`doing`), tells the
/// service manager (`STOPPING=1`), and leaves a thread that only logs any later one.
pub fn wait(mut signals: Signals, doing: &str) {
    let signal = signals.forever().next().unwrap_or(SIGTERM);
    tracing::info!("{}: stopping ({doing})", name(signal));
    crate::notify::notify(&format!("STOPPING=1\nSTATUS=stopping on {}", name(signal)));
    let later = std::thread::Builder::new().name("stop".into()).spawn(move || {
        for s in signals.forever() {
            tracing::warn!("{}: already stopping (SIGKILL ends it at once)", name(s));
        }
    });
    if let Err(e) = later {
        tracing::warn!("cannot watch for more stop signals: {e}");
    }
}

/// Installs the stop signals' handlers and returns a descriptor that becomes readable at the
/// first of them (for an event loop's epoll), once [`wait`] has logged it and told the service
/// manager.
pub fn stop_fd() -> std::io::Result<OwnedFd> {
    stop_fd_doing("answering the requests read, then closing")
}

/// [`stop_fd`], logging `doing` as what the daemon does at the signal.
pub fn stop_fd_doing(doing: &'static str) -> std::io::Result<OwnedFd> {
    let signals = signals()?;
    let (read, mut write) = UnixStream::pair()?;
    std::thread::Builder::new().name("stop".into()).spawn(move || {
        wait(signals, doing);
        // The loop only looks for the descriptor to become readable.
        if let Err(e) = write.write_all(b"x") {
            tracing::error!("could not wake the server to stop: {e}");
        }
    })?;
    Ok(read.into())
}
