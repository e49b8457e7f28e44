//! The part of UCX 1.13's `ucp/api/ucp.h` this crate uses, declared by hand and resolved at run
//! time from `libucp.so.0`. `tests/layout.rs` compiles a C program against the real headers and
//! compares every struct's size and field offsets with these.
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, sockaddr, sockaddr_storage, socklen_t};

/// A packed enum in C (`UCS_S_PACKED`): one byte.
pub type ucs_status_t = i8;
pub type ucs_status_ptr_t = *mut c_void;
pub type ucp_context_h = *mut c_void;
pub type ucp_config_t = c_void;
pub type ucp_worker_h = *mut c_void;
pub type ucp_listener_h = *mut c_void;
pub type ucp_ep_h = *mut c_void;
pub type ucp_conn_request_h = *mut c_void;
pub type ucp_mem_h = *mut c_void;
pub type ucp_rkey_h = *mut c_void;

pub const UCS_OK: ucs_status_t = 0;
pub const UCS_INPROGRESS: ucs_status_t = 1;
pub const UCS_ERR_BUSY: ucs_status_t = -15;
pub const UCS_ERR_LAST: ucs_status_t = -100;

pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_MT_WORKERS_SHARED: u64 = 1 << 5;
pub const UCP_FEATURE_RMA: u64 = 1 << 1;
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
pub const UCP_FEATURE_AM: u64 = 1 << 6;

pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCP_WORKER_PARAM_FIELD_EVENTS: u64 = 1 << 2;
pub const UCS_THREAD_MODE_SERIALIZED: c_int = 1;
pub const UCP_WAKEUP_RMA: c_uint = 1 << 0;
pub const UCP_WAKEUP_TX: c_uint = 1 << 10;
pub const UCP_WAKEUP_RX: c_uint = 1 << 11;

pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 0;
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = 1 << 2;
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = 1 << 0;

pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const UCP_EP_PARAM_FIELD_FLAGS: u64 = 1 << 5;
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
pub const UCP_EP_PARAMS_FLAGS_CLIENT_SERVER: c_uint = 1 << 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;

pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = 1 << 0;
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = 1 << 1;

pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;

pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = 1 << 0;
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = 1 << 17;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 1 << 1;

pub type ucp_request_init_callback_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type ucp_err_handler_cb_t = Option<unsafe extern "C" fn(*mut c_void, ucp_ep_h, ucs_status_t)>;
pub type ucp_listener_conn_callback_t = Option<unsafe extern "C" fn(ucp_conn_request_h, *mut c_void)>;
pub type ucp_listener_accept_callback_t = Option<unsafe extern "C" fn(ucp_ep_h, *mut c_void)>;
pub type ucp_am_recv_callback_t = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        usize,
        *mut c_void,
        usize,
        *const ucp_am_recv_param_t,
    ) -> ucs_status_t,
>;
pub type ucp_send_nbx_callback_t = Option<unsafe extern "C" fn(*mut c_void, ucs_status_t, *mut c_void)>;

#[repr(C)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: ucp_request_init_callback_t,
    pub request_cleanup: ucp_request_init_callback_t,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

#[repr(C)]
pub struct ucs_cpu_set_t {
    pub ucs_bits: [libc::c_ulong; 1024 / 64],
}

#[repr(C)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ucs_sock_addr_t {
    pub addr: *const sockaddr,
    pub addrlen: socklen_t,
}

#[repr(C)]
pub struct ucp_listener_accept_handler_t {
    pub cb: ucp_listener_accept_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_conn_handler_t {
    pub cb: ucp_listener_conn_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_listener_params_t {
    pub field_mask: u64,
    pub sockaddr: ucs_sock_addr_t,
    pub accept_handler: ucp_listener_accept_handler_t,
    pub conn_handler: ucp_listener_conn_handler_t,
}

#[repr(C)]
pub struct ucp_listener_attr_t {
    pub field_mask: u64,
    pub sockaddr: sockaddr_storage,
}

#[repr(C)]
pub struct ucp_err_handler_t {
    pub cb: ucp_err_handler_cb_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: ucp_conn_request_h,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

#[repr(C)]
pub struct ucp_mem_map_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
}

#[repr(C)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    /// A union of callback pointers in C; only ever null here.
    pub cb: ucp_send_nbx_callback_t,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    /// A union of pointers in C.
    pub recv_info: *mut c_void,
    pub memh: ucp_mem_h,
}

#[repr(C)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: ucp_am_recv_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: ucp_ep_h,
}

/// The functions, resolved from `libucp.so.0` (and the libraries it depends on).
pub struct Fns {
    pub ucs_status_string: unsafe extern "C" fn(ucs_status_t) -> *const c_char,
    pub ucp_get_version_string: unsafe extern "C" fn() -> *const c_char,
    pub ucp_config_read:
        unsafe extern "C" fn(*const c_char, *const c_char, *mut *mut ucp_config_t) -> ucs_status_t,
    pub ucp_config_modify:
        unsafe extern "C" fn(*mut ucp_config_t, *const c_char, *const c_char) -> ucs_status_t,
    pub ucp_config_release: unsafe extern "C" fn(*mut ucp_config_t),
    pub ucp_init_version: unsafe extern "C" fn(
        c_uint,
        c_uint,
        *const ucp_params_t,
        *const ucp_config_t,
        *mut ucp_context_h,
    ) -> ucs_status_t,
    pub ucp_cleanup: unsafe extern "C" fn(ucp_context_h),
    pub ucp_worker_create:
        unsafe extern "C" fn(ucp_context_h, *const ucp_worker_params_t, *mut ucp_worker_h) -> ucs_status_t,
    pub ucp_worker_destroy: unsafe extern "C" fn(ucp_worker_h),
    pub ucp_worker_progress: unsafe extern "C" fn(ucp_worker_h) -> c_uint,
    pub ucp_worker_get_efd: unsafe extern "C" fn(ucp_worker_h, *mut c_int) -> ucs_status_t,
    pub ucp_worker_arm: unsafe extern "C" fn(ucp_worker_h) -> ucs_status_t,
    pub ucp_worker_set_am_recv_handler:
        unsafe extern "C" fn(ucp_worker_h, *const ucp_am_handler_param_t) -> ucs_status_t,
    pub ucp_listener_create:
        unsafe extern "C" fn(ucp_worker_h, *const ucp_listener_params_t, *mut ucp_listener_h) -> ucs_status_t,
    pub ucp_listener_destroy: unsafe extern "C" fn(ucp_listener_h),
    pub ucp_listener_query: unsafe extern "C" fn(ucp_listener_h, *mut ucp_listener_attr_t) -> ucs_status_t,
    pub ucp_listener_reject: unsafe extern "C" fn(ucp_listener_h, ucp_conn_request_h) -> ucs_status_t,
    pub ucp_ep_create:
        unsafe extern "C" fn(ucp_worker_h, *const ucp_ep_params_t, *mut ucp_ep_h) -> ucs_status_t,
    pub ucp_ep_close_nbx: unsafe extern "C" fn(ucp_ep_h, *const ucp_request_param_t) -> ucs_status_ptr_t,
    pub ucp_ep_flush_nbx: unsafe extern "C" fn(ucp_ep_h, *const ucp_request_param_t) -> ucs_status_ptr_t,
    pub ucp_mem_map:
        unsafe extern "C" fn(ucp_context_h, *const ucp_mem_map_params_t, *mut ucp_mem_h) -> ucs_status_t,
    pub ucp_mem_unmap: unsafe extern "C" fn(ucp_context_h, ucp_mem_h) -> ucs_status_t,
    pub ucp_rkey_pack:
        unsafe extern "C" fn(ucp_context_h, ucp_mem_h, *mut *mut c_void, *mut usize) -> ucs_status_t,
    pub ucp_rkey_buffer_release: unsafe extern "C" fn(*mut c_void),
    pub ucp_ep_rkey_unpack: unsafe extern "C" fn(ucp_ep_h, *const c_void, *mut ucp_rkey_h) -> ucs_status_t,
    pub ucp_rkey_destroy: unsafe extern "C" fn(ucp_rkey_h),
    pub ucp_put_nbx: unsafe extern "C" fn(
        ucp_ep_h,
        *const c_void,
        usize,
        u64,
        ucp_rkey_h,
        *const ucp_request_param_t,
    ) -> ucs_status_ptr_t,
    pub ucp_am_send_nbx: unsafe extern "C" fn(
        ucp_ep_h,
        c_uint,
        *const c_void,
        usize,
        *const c_void,
        usize,
        *const ucp_request_param_t,
    ) -> ucs_status_ptr_t,
    pub ucp_request_check_status: unsafe extern "C" fn(*mut c_void) -> ucs_status_t,
    pub ucp_request_free: unsafe extern "C" fn(*mut c_void),
}

/// The UCP API version these declarations follow (`UCP_API_MAJOR`, `UCP_API_MINOR`).
pub const API_MAJOR: c_uint = 1;
pub const API_MINOR: c_uint = 13;

/// `UCS_PTR_IS_ERR`.
pub fn ptr_is_err(p: ucs_status_ptr_t) -> bool {
    (p as usize) >= (UCS_ERR_LAST as isize as usize)
}

/// `UCS_PTR_STATUS`.
pub fn ptr_status(p: ucs_status_ptr_t) -> ucs_status_t {
    p as isize as ucs_status_t
}
