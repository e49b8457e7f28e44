//! Finding `libucp.so.0` at run time: building Mojim needs no UCX, and choosing the `ucx`
//! transport on a host without it is an error that names the package to install.

use crate::sys::Fns;
use crate::Error;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

/// The library's file name (Debian: package `libucx0`).
pub const LIBRARY: &str = "libucp.so.0";

static FNS: OnceLock<Result<Fns, String>> = OnceLock::new();

/// The UCP functions, loaded on first use.
pub fn fns() -> Result<&'static Fns, Error> {
    FNS.get_or_init(|| load(c"libucp.so.0")).as_ref().map_err(|e| Error::Missing(e.clone()))
}

// The transmutes' target types are the `Fns` fields' declared prototypes, named once there.
#[allow(clippy::missing_transmute_annotations)]
fn load(name: &CStr) -> Result<Fns, String> {
    // SAFETY: `dlopen` with a NUL-terminated name; libucp's initialisers only set up UCX's
    // own state. The handle is never closed, so every resolved pointer stays valid for the
    // life of the process.
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if lib.is_null() {
        // SAFETY: `dlerror` returns null or a NUL-terminated message owned by libc.
        let why = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown".to_string()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "the ucx transport needs UCX's {} ({why}): install it (Debian/Ubuntu: apt-get install libucx0)",
            name.to_string_lossy()
        ));
    }
    let sym = |name: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `lib` is a live handle and `name` NUL-terminated.
        let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
        if p.is_null() {
            Err(format!("{LIBRARY} has no {}: it is not UCX 1.13 or newer", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    macro_rules! f {
        ($name:ident) => {{
            let p =
                sym(CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()).expect("nul"))?;
            // SAFETY: the symbol is UCX's function of that name, whose C prototype in UCX 1.13's
            // `ucp.h` is the one `Fns` declares for the field (checked by tests/layout.rs for the
            // structs it takes).
            unsafe { std::mem::transmute::<*mut c_void, _>(p) }
        }};
    }
    Ok(Fns {
        ucs_status_string: f!(ucs_status_string),
        ucp_get_version_string: f!(ucp_get_version_string),
        ucp_config_read: f!(ucp_config_read),
        ucp_config_modify: f!(ucp_config_modify),
        ucp_config_release: f!(ucp_config_release),
        ucp_init_version: f!(ucp_init_version),
        ucp_cleanup: f!(ucp_cleanup),
        ucp_worker_create: f!(ucp_worker_create),
        ucp_worker_destroy: f!(ucp_worker_destroy),
        ucp_worker_progress: f!(ucp_worker_progress),
        ucp_worker_get_efd: f!(ucp_worker_get_efd),
        ucp_worker_arm: f!(ucp_worker_arm),
        ucp_worker_set_am_recv_handler: f!(ucp_worker_set_am_recv_handler),
        ucp_listener_create: f!(ucp_listener_create),
        ucp_listener_destroy: f!(ucp_listener_destroy),
        ucp_listener_query: f!(ucp_listener_query),
        ucp_listener_reject: f!(ucp_listener_reject),
        ucp_ep_create: f!(ucp_ep_create),
        ucp_ep_close_nbx: f!(ucp_ep_close_nbx),
        ucp_ep_flush_nbx: f!(ucp_ep_flush_nbx),
        ucp_mem_map: f!(ucp_mem_map),
        ucp_mem_unmap: f!(ucp_mem_unmap),
        ucp_rkey_pack: f!(ucp_rkey_pack),
        ucp_rkey_buffer_release: f!(ucp_rkey_buffer_release),
        ucp_ep_rkey_unpack: f!(ucp_ep_rkey_unpack),
        ucp_rkey_destroy: f!(ucp_rkey_destroy),
        ucp_put_nbx: f!(ucp_put_nbx),
        ucp_am_send_nbx: f!(ucp_am_send_nbx),
        ucp_request_check_status: f!(ucp_request_check_status),
        ucp_request_free: f!(ucp_request_free),
    })
}

/// UCX's text for a status code.
pub fn status_text(fns: &Fns, status: crate::sys::ucs_status_t) -> String {
    // SAFETY: `ucs_status_string` returns a static NUL-terminated string for any code.
    unsafe { CStr::from_ptr((fns.ucs_status_string)(status)).to_string_lossy().into_owned() }
}

/// The loaded library's version, e.g. "1.13.1".
pub fn version() -> Result<String, Error> {
    let f = fns()?;
    // SAFETY: returns a static NUL-terminated string.
    Ok(unsafe { CStr::from_ptr((f.ucp_get_version_string)()).to_string_lossy().into_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_the_package() {
        let e = load(c"libucp-not-here.so.0").err().expect("no such library");
        assert!(e.contains("libucp-not-here.so.0") && e.contains("apt-get install libucx0"), "{e}");
    }
}
