//! Workers, endpoints, listeners, registered memory and the operations on them.

use crate::sys::*;
use crate::{check, Context, Error};
use mojim_region::MappedFile;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What an active-message handler is given: the message's bytes, valid during the call.
pub type AmHandler = Box<dyn Fn(&[u8]) + Send + Sync>;
/// Called (from within progress) when the endpoint fails, with UCX's status.
pub type ErrHandler = Box<dyn Fn(i32) + Send + Sync>;

/// An unpacked remote key of the worker's endpoint (see [`Worker::unpack_rkey`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RkeyId(usize);

/// A UCP worker with at most one endpoint.
pub struct Worker {
    ctx: Arc<Context>,
    h: ucp_worker_h,
    efd: RawFd,
    ep: ucp_ep_h,
    on_error: Option<Box<ErrHandler>>,
    /// Boxed twice: UCX holds the address of each inner box, which must not move when the
    /// vector grows.
    #[allow(clippy::vec_box)]
    handlers: Vec<Box<AmHandler>>,
    rkeys: Vec<ucp_rkey_h>,
    cancel: Option<Arc<AtomicBool>>,
    /// How long a wait for a request polls before it sleeps on the event fd.
    spin: Duration,
}

// SAFETY: the worker is made in UCS_THREAD_MODE_SERIALIZED and every call on it (and on its
// endpoint and keys) takes `&mut self`, so calls from different threads never overlap.
unsafe impl Send for Worker {}

unsafe extern "C" fn am_trampoline(
    arg: *mut c_void,
    _header: *const c_void,
    _header_len: usize,
    data: *mut c_void,
    len: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: `arg` is the `Box<AmHandler>` the worker keeps for as long as its handler is set;
    // UCX passes `param` valid for the call.
    let (f, attr) = unsafe { (&*(arg as *const AmHandler), (*param).recv_attr) };
    if attr & UCP_AM_RECV_ATTR_FLAG_RNDV != 0 || data.is_null() {
        // Only small eager messages are sent; a rendezvous one is not ours to fetch.
        return UCS_OK;
    }
    // SAFETY: for an eager message `data` holds `len` bytes for the duration of the callback.
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, len) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(bytes)));
    UCS_OK
}

unsafe extern "C" fn err_trampoline(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the `Box<ErrHandler>` the worker keeps while its endpoint lives.
    let f = unsafe { &*(arg as *const ErrHandler) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(i32::from(status))));
}

/// A `sockaddr` for UCX, owning its storage.
struct RawSockaddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawSockaddr {
    fn new(addr: SocketAddr) -> RawSockaddr {
        // SAFETY: all-zero is a valid `sockaddr_storage`.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: `sockaddr_storage` is larger than and aligned for `sockaddr_in`.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above, for `sockaddr_in6`.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        RawSockaddr { storage, len: len as libc::socklen_t }
    }

    fn as_ucs(&self) -> ucs_sock_addr_t {
        ucs_sock_addr_t { addr: &self.storage as *const _ as *const libc::sockaddr, addrlen: self.len }
    }
}

fn from_storage(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`.
            let sin = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a `sockaddr_in6`.
            let sin6 = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sin6.sin6_port), 0, sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

impl Worker {
    /// A worker of the context, with its event fd for sleeping.
    pub fn new(ctx: &Arc<Context>) -> Result<Worker, Error> {
        let fns = ctx.fns;
        // SAFETY: all-zero is a valid `ucp_worker_params_t`.
        let mut p: ucp_worker_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
        p.thread_mode = UCS_THREAD_MODE_SERIALIZED;
        p.events = UCP_WAKEUP_RMA | UCP_WAKEUP_TX | UCP_WAKEUP_RX;
        let mut h = std::ptr::null_mut();
        // SAFETY: the context is live (held by the Arc); `p` is valid for the call.
        check("ucp_worker_create", unsafe { (fns.ucp_worker_create)(ctx.h, &p, &mut h) })?;
        let mut efd = -1;
        // SAFETY: `h` is the live worker made above.
        if let Err(e) = check("ucp_worker_get_efd", unsafe { (fns.ucp_worker_get_efd)(h, &mut efd) }) {
            // SAFETY: `h` is live and unused after.
            unsafe { (fns.ucp_worker_destroy)(h) };
            return Err(e);
        }
        Ok(Worker {
            ctx: ctx.clone(),
            h,
            efd,
            ep: std::ptr::null_mut(),
            on_error: None,
            handlers: Vec::new(),
            rkeys: Vec::new(),
            cancel: None,
            spin: Duration::ZERO,
        })
    }

    fn fns(&self) -> &'static Fns {
        self.ctx.fns
    }

    /// A flag that, once raised, ends every wait of this worker as a deadline does (the
    /// endpoint is closed): how another thread stops a send blocked on a peer that does not
    /// progress.
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// How long a wait for a request (send, put, flush) polls before it sleeps on the event fd
    /// (0: sleep at once).
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// A duplicate of the event fd, to sleep on without holding the worker.
    pub fn efd_dup(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.efd().try_clone_to_owned()
    }

    /// Runs UCX's progress once: receives, completions, handlers. Returns how much happened.
    pub fn progress(&mut self) -> u32 {
        // SAFETY: the worker is live; `&mut self` serialises the call.
        unsafe { (self.fns().ucp_worker_progress)(self.h) }
    }

    /// The fd to sleep on after [`Worker::arm`] returned true.
    pub fn efd(&self) -> BorrowedFd<'_> {
        // SAFETY: UCX owns the fd for the worker's lifetime, which bounds the borrow.
        unsafe { BorrowedFd::borrow_raw(self.efd) }
    }

    /// Arms the event fd: true if it will signal the next event, false if events are pending
    /// (progress first, then arm again).
    pub fn arm(&mut self) -> Result<bool, Error> {
        // SAFETY: the worker is live.
        match unsafe { (self.fns().ucp_worker_arm)(self.h) } {
            UCS_OK => Ok(true),
            UCS_ERR_BUSY => Ok(false),
            s => check("ucp_worker_arm", s).map(|_| false),
        }
    }

    /// Calls `f` with the bytes of every active message `id` this worker receives.
    pub fn set_am_handler(&mut self, id: u32, f: AmHandler) -> Result<(), Error> {
        let boxed = Box::new(f);
        // SAFETY: all-zero is a valid `ucp_am_handler_param_t`.
        let mut p: ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
        p.field_mask =
            UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
        p.id = id;
        p.cb = Some(am_trampoline);
        p.arg = &*boxed as *const AmHandler as *mut c_void;
        // SAFETY: the worker is live; `arg` points into a box kept in `self.handlers` until the
        // worker is destroyed (handlers are never removed), so it outlives every call.
        check("ucp_worker_set_am_recv_handler", unsafe {
            (self.fns().ucp_worker_set_am_recv_handler)(self.h, &p)
        })?;
        self.handlers.push(boxed);
        Ok(())
    }

    fn ep_params(&mut self, on_error: ErrHandler) -> ucp_ep_params_t {
        assert!(self.ep.is_null(), "a worker holds one endpoint");
        let boxed = Box::new(on_error);
        // SAFETY: all-zero is a valid `ucp_ep_params_t`.
        let mut p: ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        p.err_handler =
            ucp_err_handler_t { cb: Some(err_trampoline), arg: &*boxed as *const ErrHandler as *mut c_void };
        self.on_error = Some(boxed);
        p
    }

    /// Makes the endpoint to a listener at `addr` (client-server wire-up).
    pub fn connect(&mut self, addr: SocketAddr, on_error: ErrHandler) -> Result<(), Error> {
        let sa = RawSockaddr::new(addr);
        let mut p = self.ep_params(on_error);
        p.field_mask |= UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
        p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        p.sockaddr = sa.as_ucs();
        let mut ep = std::ptr::null_mut();
        // SAFETY: the worker is live; `p` and the sockaddr it points to live through the call;
        // the error handler's box is kept in `self.on_error` until the endpoint is closed.
        check("ucp_ep_create", unsafe { (self.fns().ucp_ep_create)(self.h, &p, &mut ep) })?;
        self.ep = ep;
        Ok(())
    }

    /// Makes the endpoint from a listener's connection request.
    pub fn accept(&mut self, req: ConnRequest, on_error: ErrHandler) -> Result<(), Error> {
        let mut p = self.ep_params(on_error);
        p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
        p.conn_request = req.0;
        let mut ep = std::ptr::null_mut();
        // SAFETY: as in `connect`; the request is consumed (UCX frees it).
        check("ucp_ep_create", unsafe { (self.fns().ucp_ep_create)(self.h, &p, &mut ep) })?;
        self.ep = ep;
        Ok(())
    }

    /// Whether the worker has an open endpoint.
    pub fn has_ep(&self) -> bool {
        !self.ep.is_null()
    }

    fn ep(&self, call: &'static str) -> Result<ucp_ep_h, Error> {
        if self.ep.is_null() {
            return Err(Error::Invalid(format!(
                "{call} on a worker without an endpoint (closed, or never made)"
            )));
        }
        Ok(self.ep)
    }

    /// Waits for `ret` (a status pointer from an `_nbx` call) to complete, progressing the
    /// worker; at `deadline` the endpoint is closed (which completes the request with an error).
    fn wait(
        &mut self,
        call: &'static str,
        ret: ucs_status_ptr_t,
        deadline: Option<Instant>,
    ) -> Result<(), Error> {
        if ret.is_null() {
            return Ok(());
        }
        if ptr_is_err(ret) {
            return check(call, ptr_status(ret));
        }
        let fns = self.fns();
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            // SAFETY: `ret` is a live request until freed below.
            let s = unsafe { (fns.ucp_request_check_status)(ret) };
            if s != UCS_INPROGRESS {
                break s;
            }
            if self.progress() == 0 && start.elapsed() >= self.spin {
                let cancelled = self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Acquire));
                if (cancelled || deadline.is_some_and(|d| Instant::now() >= d)) && !timed_out {
                    timed_out = true;
                    self.close_ep();
                    continue;
                }
                if self.arm()? {
                    let mut fds = [libc::pollfd { fd: self.efd, events: libc::POLLIN, revents: 0 }];
                    // SAFETY: one valid pollfd; a short timeout bounds the sleep.
                    unsafe { libc::poll(fds.as_mut_ptr(), 1, 1) };
                }
            }
        };
        // SAFETY: the request completed and is not used after.
        unsafe { (fns.ucp_request_free)(ret) };
        if timed_out {
            return Err(Error::TimedOut(call));
        }
        check(call, status)
    }

    /// Sends a small active message `id` (eager) and waits until its buffer is free.
    pub fn am_send(&mut self, id: u32, data: &[u8], deadline: Option<Instant>) -> Result<(), Error> {
        let ep = self.ep("ucp_am_send_nbx")?;
        // SAFETY: all-zero is a valid `ucp_request_param_t`.
        let mut p: ucp_request_param_t = unsafe { std::mem::zeroed() };
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_AM_SEND_FLAG_EAGER;
        // SAFETY: the endpoint is live; `data` stays borrowed until `wait` returns, which is
        // after the request completed.
        let ret = unsafe {
            (self.fns().ucp_am_send_nbx)(
                ep,
                id,
                std::ptr::null(),
                0,
                data.as_ptr() as *const c_void,
                data.len(),
                &p,
            )
        };
        self.wait("ucp_am_send_nbx", ret, deadline)
    }

    /// Puts `data` at `remote` (an address in the peer's memory that `rkey` covers) and waits
    /// until `data` may be reused. The bytes are at the peer only after [`Worker::flush`].
    pub fn put(
        &mut self,
        data: &[u8],
        remote: u64,
        rkey: RkeyId,
        deadline: Option<Instant>,
    ) -> Result<(), Error> {
        let ep = self.ep("ucp_put_nbx")?;
        let key =
            *self.rkeys.get(rkey.0).filter(|k| !k.is_null()).ok_or_else(|| {
                Error::Invalid(format!("remote key {} is not one of this worker's", rkey.0))
            })?;
        // SAFETY: all-zero is a valid `ucp_request_param_t` (contiguous bytes, no callback).
        let p: ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: endpoint and key are live; `data` stays borrowed until the request completed.
        let ret = unsafe {
            (self.fns().ucp_put_nbx)(ep, data.as_ptr() as *const c_void, data.len(), remote, key, &p)
        };
        self.wait("ucp_put_nbx", ret, deadline)
    }

    /// Waits until every operation issued on the endpoint completed at the peer.
    pub fn flush(&mut self, deadline: Option<Instant>) -> Result<(), Error> {
        let ep = self.ep("ucp_ep_flush_nbx")?;
        // SAFETY: all-zero is a valid `ucp_request_param_t`.
        let p: ucp_request_param_t = unsafe { std::mem::zeroed() };
        // SAFETY: the endpoint is live.
        let ret = unsafe { (self.fns().ucp_ep_flush_nbx)(ep, &p) };
        self.wait("ucp_ep_flush_nbx", ret, deadline)
    }

    /// Unpacks a remote key the peer packed ([`Registered::rkey`]) for this endpoint.
    pub fn unpack_rkey(&mut self, packed: &[u8]) -> Result<RkeyId, Error> {
        let ep = self.ep("ucp_ep_rkey_unpack")?;
        let mut key = std::ptr::null_mut();
        // SAFETY: the endpoint is live; UCX reads the packed key from `packed`. A packed key is
        // self-describing: UCX checks its components against the endpoint's transports and
        // fails on one it cannot parse (a hostile peer's key can name only its own memory).
        check("ucp_ep_rkey_unpack", unsafe {
            (self.fns().ucp_ep_rkey_unpack)(ep, packed.as_ptr() as *const c_void, &mut key)
        })?;
        self.rkeys.push(key);
        Ok(RkeyId(self.rkeys.len() - 1))
    }

    /// Releases an unpacked remote key.
    pub fn destroy_rkey(&mut self, id: RkeyId) {
        if let Some(k) = self.rkeys.get_mut(id.0) {
            if !k.is_null() {
                // SAFETY: a live key of this worker's endpoint, not used after.
                unsafe { (self.ctx.fns.ucp_rkey_destroy)(*k) };
                *k = std::ptr::null_mut();
            }
        }
    }

    /// Closes the endpoint at once (no flush); the peer sees the connection end.
    pub fn close_ep(&mut self) {
        if self.ep.is_null() {
            return;
        }
        for i in 0..self.rkeys.len() {
            self.destroy_rkey(RkeyId(i));
        }
        let fns = self.fns();
        // SAFETY: all-zero is a valid `ucp_request_param_t`.
        let mut p: ucp_request_param_t = unsafe { std::mem::zeroed() };
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        let ep = std::mem::replace(&mut self.ep, std::ptr::null_mut());
        // SAFETY: the endpoint is live and not used after (self.ep is null now).
        let ret = unsafe { (fns.ucp_ep_close_nbx)(ep, &p) };
        if !ret.is_null() && !ptr_is_err(ret) {
            // SAFETY: `ret` is a live request until freed.
            while unsafe { (fns.ucp_request_check_status)(ret) } == UCS_INPROGRESS {
                self.progress();
            }
            // SAFETY: completed, not used after.
            unsafe { (fns.ucp_request_free)(ret) };
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.close_ep();
        // SAFETY: the endpoint is closed; the worker is live and not used after. The handler
        // boxes are dropped after this (fields drop after `drop`).
        unsafe { (self.fns().ucp_worker_destroy)(self.h) }
    }
}

/// A connection request a [`Listener`] received; consumed by [`Worker::accept`].
pub struct ConnRequest(ucp_conn_request_h);

// SAFETY: a request is an opaque handle UCX lets any worker of the context consume.
unsafe impl Send for ConnRequest {}

unsafe extern "C" fn conn_trampoline(req: ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: `arg` is the listener's queue, boxed and kept until the listener is destroyed.
    let q = unsafe { &*(arg as *const Mutex<VecDeque<usize>>) };
    q.lock().unwrap_or_else(|p| p.into_inner()).push_back(req as usize);
}

/// A UCP listener on a socket address, with a worker of its own.
pub struct Listener {
    worker: Worker,
    h: ucp_listener_h,
    queue: Box<Mutex<VecDeque<usize>>>,
    addr: SocketAddr,
}

// SAFETY: as for `Worker`: every call on the listener takes `&mut self`.
unsafe impl Send for Listener {}

impl Listener {
    /// Listens at `addr` (port 0: one UCX picks).
    pub fn new(ctx: &Arc<Context>, addr: SocketAddr) -> Result<Listener, Error> {
        let worker = Worker::new(ctx)?;
        let queue: Box<Mutex<VecDeque<usize>>> = Box::default();
        let sa = RawSockaddr::new(addr);
        // SAFETY: all-zero is a valid `ucp_listener_params_t`.
        let mut p: ucp_listener_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        p.sockaddr = sa.as_ucs();
        p.conn_handler = ucp_listener_conn_handler_t {
            cb: Some(conn_trampoline),
            arg: &*queue as *const Mutex<VecDeque<usize>> as *mut c_void,
        };
        let mut h = std::ptr::null_mut();
        // SAFETY: the worker is live; the queue box outlives the listener (dropped after it).
        check("ucp_listener_create", unsafe { (ctx.fns.ucp_listener_create)(worker.h, &p, &mut h) })?;
        // SAFETY: all-zero is a valid `ucp_listener_attr_t`.
        let mut attr: ucp_listener_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        // SAFETY: the listener is live.
        let s = unsafe { (ctx.fns.ucp_listener_query)(h, &mut attr) };
        let bound = if s == UCS_OK { from_storage(&attr.sockaddr) } else { None };
        let addr = match bound {
            Some(a) if a.port() != 0 => {
                SocketAddr::new(if a.ip().is_unspecified() { addr.ip() } else { a.ip() }, a.port())
            }
            _ => {
                // SAFETY: the listener is live and not used after.
                unsafe { (ctx.fns.ucp_listener_destroy)(h) };
                return Err(Error::Invalid(format!("the UCX listener at {addr} does not say its port")));
            }
        };
        Ok(Listener { worker, h, queue, addr })
    }

    /// The address it listens on (the port UCX picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listener's worker (progress, event fd).
    pub fn worker(&mut self) -> &mut Worker {
        &mut self.worker
    }

    /// The listener's worker, to read (its event fd).
    pub fn worker_ref(&self) -> &Worker {
        &self.worker
    }

    /// The next connection request received, if any (call after progress).
    pub fn next_request(&mut self) -> Option<ConnRequest> {
        let r = self.queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        r.map(|r| ConnRequest(r as ucp_conn_request_h))
    }

    /// Refuses a request.
    pub fn reject(&mut self, req: ConnRequest) {
        // SAFETY: the listener is live; the request is one of its own and consumed here.
        unsafe { (self.worker.fns().ucp_listener_reject)(self.h, req.0) };
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        while let Some(r) = self.next_request() {
            self.reject(r);
        }
        // SAFETY: the listener is live and not used after; its queue box is dropped after.
        unsafe { (self.worker.fns().ucp_listener_destroy)(self.h) }
    }
}

/// Part of an existing mapping registered with UCX, so that a peer holding its key can put
/// into it.
pub struct Registered {
    ctx: Arc<Context>,
    memh: ucp_mem_h,
    map: Arc<MappedFile>,
    /// The registered bytes: `map`'s `[offset, offset + len)`.
    offset: usize,
    len: usize,
    rkey: Vec<u8>,
}

// SAFETY: the memory handle is only passed to `ucp_mem_unmap` (once, in drop); the context is
// thread-safe for registration.
unsafe impl Send for Registered {}
// SAFETY: as above; `&self` methods only read Rust-owned fields.
unsafe impl Sync for Registered {}

impl Registered {
    /// Registers the whole of `map`. Peers may then write any byte of it at any time: readers
    /// copy bytes out (`MappedFile::read`) before they look at them.
    pub fn new(ctx: &Arc<Context>, map: Arc<MappedFile>) -> Result<Registered, Error> {
        let len = map.len();
        Self::part(ctx, map, 0, len)
    }

    /// Registers bytes `[offset, offset + len)` of `map` only (`offset` a multiple of 4096). A
    /// peer's put outside them fails where the fabric checks registrations (RDMA: the adapter
    /// refuses it). UCX's emulation of puts by messages over its tcp transport checks nothing:
    /// the target's progress copies the bytes to whatever address the message names.
    pub fn part(
        ctx: &Arc<Context>,
        map: Arc<MappedFile>,
        offset: usize,
        len: usize,
    ) -> Result<Registered, Error> {
        if !offset.is_multiple_of(4096) || len == 0 || offset.checked_add(len).is_none_or(|e| e > map.len()) {
            return Err(Error::Invalid(format!(
                "register {len} bytes at {offset} of a mapping of {} bytes: the part must be in it, \
                 not empty, and start on a page",
                map.len()
            )));
        }
        let fns = ctx.fns;
        // SAFETY: all-zero is a valid `ucp_mem_map_params_t`.
        let mut p: ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
        p.address = map.as_ptr().wrapping_add(offset) as *mut c_void;
        p.length = len;
        let mut memh = std::ptr::null_mut();
        // SAFETY: `[as_ptr + offset, as_ptr + offset + len)` lies in a live read-write mapping
        // (checked above), kept alive by the Arc held here until the registration is undone in
        // drop.
        check("ucp_mem_map", unsafe { (fns.ucp_mem_map)(ctx.h, &p, &mut memh) })?;
        let (mut buf, mut key_len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: the context and the handle just made are live; UCX allocates the packed key
        // and writes its address and length into the two locals.
        let packed = unsafe { (fns.ucp_rkey_pack)(ctx.h, memh, &mut buf, &mut key_len) };
        if let Err(e) = check("ucp_rkey_pack", packed) {
            // SAFETY: live handle, not used after.
            unsafe { (fns.ucp_mem_unmap)(ctx.h, memh) };
            return Err(e);
        }
        // SAFETY: UCX gave `key_len` bytes at `buf`; they are copied, then released once.
        let rkey = unsafe { std::slice::from_raw_parts(buf as *const u8, key_len).to_vec() };
        // SAFETY: `buf` came from `ucp_rkey_pack` and is not used after.
        unsafe { (fns.ucp_rkey_buffer_release)(buf) };
        Ok(Registered { ctx: ctx.clone(), memh, map, offset, len, rkey })
    }

    /// The packed remote key, for the peer's [`Worker::unpack_rkey`].
    pub fn rkey(&self) -> &[u8] {
        &self.rkey
    }

    /// The address of the first registered byte (what the peer puts at, plus an offset).
    pub fn address(&self) -> u64 {
        self.map.as_ptr() as u64 + self.offset as u64
    }

    /// Bytes registered.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the registered bytes start in [`Registered::map`].
    pub fn offset(&self) -> usize {
        self.offset
    }

    pub fn map(&self) -> &Arc<MappedFile> {
        &self.map
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: the handle is live and not used after; the mapping is still held.
        unsafe { (self.ctx.fns.ucp_mem_unmap)(self.ctx.h, self.memh) };
    }
}
