//! The sockets Redis clients connect to: `[kv] listen` in the clear and `[kv] tls_listen` over
//! TLS (either may be off, not both), registered with the event loop's epoll.

use super::link::Link;
use crate::error::KvError;
use crate::options::KvOptions;
use rustix::event::epoll;
use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};

/// The epoll token of the plaintext listener.
pub const LISTENER: u64 = u64::MAX;
/// The epoll token of the TLS listener.
pub const TLS_LISTENER: u64 = u64::MAX - 1;

/// Whether `token` is a listener's.
pub fn is_listener(token: u64) -> bool {
    token == LISTENER || token == TLS_LISTENER
}

/// The listening sockets.
pub struct Listeners {
    plain: Option<TcpListener>,
    tls: Option<(TcpListener, crate::tls::KvTlsConfig)>,
    /// The plaintext listener's address ("" when off).
    pub plain_addr: String,
    /// The TLS listener's address ("" when off).
    pub tls_addr: String,
}

fn bind(addr: &str, setting: &str, ep: &OwnedFd, token: u64) -> Result<(TcpListener, String), KvError> {
    let l = TcpListener::bind(addr).map_err(|e| {
        KvError::Config(format!(
            "cannot listen on [kv] {setting} (or --{}) {addr}: {e}; choose a free address (port 0: any)",
            setting.replace('_', "-")
        ))
    })?;
    l.set_nonblocking(true).map_err(KvError::io("make the listener non-blocking"))?;
    let local = l.local_addr().map_err(KvError::io("read the listener's address"))?.to_string();
    epoll::add(ep, l.as_fd(), epoll::EventData::new_u64(token), epoll::EventFlags::IN)
        .map_err(|e| KvError::io("epoll_ctl")(e.into()))?;
    Ok((l, local))
}

impl Listeners {
    /// Stops accepting: the listening sockets are closed (a connection not accepted yet is
    /// refused).
    pub fn close(&mut self, ep: &OwnedFd) {
        if let Some(l) = self.plain.take() {
            let _ = epoll::delete(ep, l.as_fd());
        }
        if let Some((l, _)) = self.tls.take() {
            let _ = epoll::delete(ep, l.as_fd());
        }
    }

    /// Binds the listeners `opts` names and registers them with `ep`.
    pub fn bind(opts: &KvOptions, ep: &OwnedFd) -> Result<Listeners, KvError> {
        let mut ls = Listeners { plain: None, tls: None, plain_addr: String::new(), tls_addr: String::new() };
        if !opts.listen.is_empty() {
            let (l, a) = bind(&opts.listen, "listen", ep, LISTENER)?;
            (ls.plain, ls.plain_addr) = (Some(l), a);
        }
        if let Some(t) = &opts.tls {
            let (l, a) = bind(&t.listen, "tls_listen", ep, TLS_LISTENER)?;
            (ls.tls, ls.tls_addr) = (Some((l, t.config.clone())), a);
        }
        assert!(ls.plain.is_some() || ls.tls.is_some(), "KvOptions checks that one listener is set");
        Ok(ls)
    }

    /// The address clients are told of (INFO, SENTINEL): the plaintext one, else the TLS one.
    pub fn main_addr(&self) -> &str {
        if self.plain.is_some() {
            &self.plain_addr
        } else {
            &self.tls_addr
        }
    }

    /// The next connection waiting on the listener of `token`, non-blocking; `Ok(None)` when
    /// none waits.
    pub fn accept(&self, token: u64) -> io::Result<Option<(Link, SocketAddr)>> {
        let (listener, tls) = match token {
            LISTENER => (self.plain.as_ref(), None),
            _ => (self.tls.as_ref().map(|t| &t.0), self.tls.as_ref().map(|t| &t.1)),
        };
        let Some(listener) = listener else { return Ok(None) };
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let _ = stream.set_nodelay(true);
            let link = match tls {
                None => Link::Plain(stream),
                Some(config) => Link::tls(stream, &config.current())?,
            };
            return Ok(Some((link, peer)));
        }
    }
}
