//! SIGHUP: `mojim serve` and `mojim kv` read their certificates, keys and revocation lists
//! again without a restart. A thread waits for the signal (signal-hook's handler only wakes it)
//! and reloads each set of files in turn, logging one line for each: what it loaded (the
//! certificate's subject and when it stops being valid), or why it kept what it had. Sessions
//! already established keep going either way.

use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

/// One set of TLS files that a SIGHUP reloads.
pub struct Reloadable {
    /// What the files are, for the log (`[security]`, `[kv] tls_*`).
    pub what: &'static str,
    /// Reloads them: what was loaded, or why nothing changed.
    pub reload: Box<dyn Fn() -> Result<String, String> + Send>,
}

/// Installs the SIGHUP handler and starts the thread that reloads `sets` on each signal. With
/// no set (TLS off) a SIGHUP is logged and otherwise ignored, never the end of the process.
pub fn on_sighup(sets: Vec<Reloadable>) -> std::io::Result<()> {
    let mut signals = Signals::new([SIGHUP])?;
    std::thread::Builder::new().name("sighup".into()).spawn(move || {
        for _ in signals.forever() {
            if sets.is_empty() {
                tracing::info!("SIGHUP: no TLS files to reload ([security] tls = false)");
            }
            for s in &sets {
                match (s.reload)() {
                    Ok(loaded) => tracing::info!("SIGHUP: reloaded the {} TLS files: {loaded}", s.what),
                    Err(e) => tracing::error!("SIGHUP: kept the {} TLS files loaded before: {e}", s.what),
                }
            }
        }
    })?;
    Ok(())
}
