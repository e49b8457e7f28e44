//! Thin bindings to UCX's UCP, loaded at run time from `libucp.so.0` (Debian: `libucx0`).
//!
//! Only what Mojim's `ucx` transport uses: one [`Context`] per process (RMA, active messages,
//! wake-ups), a [`Worker`] per connection holding at most one endpoint (made to a socket
//! address, or from a [`Listener`]'s connection request), memory registration of an existing
//! mapping ([`Registered`], whose remote key travels as bytes), `put` + `flush` into a peer's
//! registered memory, small active messages (doorbells), progress, and the worker's event fd
//! with `arm` for sleeping.
//!
//! A [`Worker`] is made in `UCS_THREAD_MODE_SERIALIZED`: it is `Send` but not `Sync`, and every
//! call takes `&mut self`, so a caller shares one behind a mutex.

mod load;
pub mod sys;
pub mod worker;

pub use load::{version, LIBRARY};
pub use worker::{ConnRequest, Listener, Registered, RkeyId, Worker};

use std::ffi::CString;
use std::fmt;
use std::sync::{Arc, OnceLock};
use sys::*;

/// Why a UCX call failed.
#[derive(Clone, Debug)]
pub enum Error {
    /// `libucp.so.0` could not be loaded (the message names the package to install).
    Missing(String),
    /// A UCX call returned an error status.
    Status { call: &'static str, status: i32, text: String },
    /// A request did not complete before its deadline (the endpoint is closed).
    TimedOut(&'static str),
    /// The caller passed something UCX cannot take.
    Invalid(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Missing(m) => f.write_str(m),
            Error::Status { call, status, text } => write!(f, "{call} failed: {text} (UCX status {status})"),
            Error::TimedOut(call) => write!(f, "{call} did not complete in time; the endpoint was closed"),
            Error::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        let kind = match &e {
            Error::Missing(_) => std::io::ErrorKind::Unsupported,
            Error::TimedOut(_) => std::io::ErrorKind::TimedOut,
            Error::Invalid(_) => std::io::ErrorKind::InvalidInput,
            Error::Status { status, .. } if *status <= -20 && *status > -100 => {
                // UCS_ERR_*_LINK_FAILURE .. endpoint failures: the peer is gone.
                std::io::ErrorKind::ConnectionReset
            }
            Error::Status { .. } => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

pub(crate) fn check(call: &'static str, status: ucs_status_t) -> Result<(), Error> {
    if status == UCS_OK {
        return Ok(());
    }
    let text = load::fns().map(|f| load::status_text(f, status)).unwrap_or_default();
    Err(Error::Status { call, status: i32::from(status), text })
}

/// Settings this crate gives UCX unless the environment sets them (`UCX_<NAME>`).
///
/// `WARN_UNUSED_ENV_VARS=n`: a process that sets `UCX_*` variables for one worker kind must not
/// print warnings. The transports are UCX's own choice (`UCX_TLS` unset: all it finds); see
/// docs/DESIGN-transport.md for what it picks on a host without RDMA.
pub const DEFAULTS: &[(&str, &str)] = &[("WARN_UNUSED_ENV_VARS", "n")];

/// Settings of UCX's connection managers (read from the environment when a worker opens them,
/// not settable through `ucp_config_modify`), put into the environment before the context is
/// made unless already there: `TCP_CM_REUSEADDR=y`, so that a listener may take the port of
/// one that just exited (a restarted mirror on its old address), as Mojim's TCP listeners may.
pub const ENV_DEFAULTS: &[(&str, &str)] = &[("UCX_TCP_CM_REUSEADDR", "y")];

/// A UCP context: the process's one handle on UCX (features RMA, AM and WAKEUP).
pub struct Context {
    pub(crate) h: ucp_context_h,
    pub(crate) fns: &'static Fns,
}

// SAFETY: the context is created with `mt_workers_shared = 1`, so workers made from it may be
// used from different threads; the handle itself is only read.
unsafe impl Send for Context {}
// SAFETY: as above; every method takes `&self` and UCX serialises its context state.
unsafe impl Sync for Context {}

static GLOBAL: OnceLock<Result<Arc<Context>, Error>> = OnceLock::new();

impl Context {
    /// The process's context, made on first use.
    pub fn global() -> Result<Arc<Context>, Error> {
        GLOBAL.get_or_init(|| Context::new().map(Arc::new)).clone()
    }

    fn new() -> Result<Context, Error> {
        let fns = load::fns()?;
        for (name, value) in ENV_DEFAULTS {
            if std::env::var_os(name).is_none() {
                // Once per process, before any worker exists (UCX reads it when a worker opens
                // its connection managers).
                std::env::set_var(name, value);
            }
        }
        let mut config: *mut ucp_config_t = std::ptr::null_mut();
        // SAFETY: null prefix and file mean "UCX_" and none; `config` receives a handle that is
        // released below.
        check("ucp_config_read", unsafe {
            (fns.ucp_config_read)(std::ptr::null(), std::ptr::null(), &mut config)
        })?;
        for (name, value) in DEFAULTS {
            if std::env::var_os(format!("UCX_{name}")).is_none() {
                let (n, v) = (CString::new(*name).expect("no nul"), CString::new(*value).expect("no nul"));
                // SAFETY: `config` is live; both strings are NUL-terminated and outlive the call.
                let s = unsafe { (fns.ucp_config_modify)(config, n.as_ptr(), v.as_ptr()) };
                if let Err(e) = check("ucp_config_modify", s) {
                    // SAFETY: `config` is live and not used after.
                    unsafe { (fns.ucp_config_release)(config) };
                    return Err(e);
                }
            }
        }
        // SAFETY: an all-zero `ucp_params_t` is valid (null pointers, zero masks).
        let mut params: ucp_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
        params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
        params.mt_workers_shared = 1;
        let mut h: ucp_context_h = std::ptr::null_mut();
        // SAFETY: `params` and `config` are valid for the call; `h` receives the context.
        let s = unsafe { (fns.ucp_init_version)(API_MAJOR, API_MINOR, &params, config, &mut h) };
        // SAFETY: `config` is live and no longer needed (ucp_init copies it).
        unsafe { (fns.ucp_config_release)(config) };
        check("ucp_init", s)?;
        Ok(Context { h, fns })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every worker and registration holds an `Arc<Context>`, so none is left.
        unsafe { (self.fns.ucp_cleanup)(self.h) }
    }
}
