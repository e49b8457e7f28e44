//! The transport a node or primary uses when it is configured, not chosen at compile time:
//! TCP for a `host:port` address, shared memory ([`crate::shm`]) for an absolute path, UCX
//! ([`crate::ucx`]) for `ucx:<host>:<port>`. With a [`TlsContext`] (`[security] tls = true`), every
//! connection runs mutual TLS ([`crate::tls`]) over its stream: a TCP socket, a shared-memory
//! connection's rings or a UCX stream.

use crate::shm::{is_shm_addr, ShmConn, ShmListener, ShmTransport};
use crate::tcp::{TcpConn, TcpTransport};
use crate::tls::{PeerIdentity, TlsConn, TlsContext};
use crate::ucx::{is_ucx_addr, UcxConn, UcxListener, UcxTransport};
use crate::{Conn, Transport};
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

/// TCP, shared memory or UCX, by the address; each with mutual TLS when it has a [`TlsContext`].
#[derive(Clone, Debug, Default)]
pub struct AnyTransport {
    tls: Option<Arc<TlsContext>>,
}

impl AnyTransport {
    /// Plain TCP, shared memory or UCX.
    pub fn plain() -> AnyTransport {
        AnyTransport { tls: None }
    }

    /// With `tls`, every link runs mutual TLS; without, as [`AnyTransport::plain`].
    pub fn new(tls: Option<Arc<TlsContext>>) -> AnyTransport {
        AnyTransport { tls }
    }

    /// The TLS settings, if any.
    pub fn tls(&self) -> Option<&Arc<TlsContext>> {
        self.tls.as_ref()
    }
}

/// A connection of either kind.
pub enum AnyConn {
    Tcp(TcpConn),
    Shm(ShmConn),
    Ucx(UcxConn),
    Tls(TlsConn),
    TlsShm(TlsConn<ShmConn>),
    TlsUcx(TlsConn<UcxConn>),
}

/// A listener of either kind.
pub enum AnyListener {
    Tcp(TcpListener),
    Shm(ShmListener),
    Ucx(UcxListener),
}

/// Which transport an address selects: "tcp", "shm" or "ucx".
pub fn transport_of(addr: &str) -> &'static str {
    if is_ucx_addr(addr) {
        "ucx"
    } else if is_shm_addr(addr) {
        "shm"
    } else {
        "tcp"
    }
}

macro_rules! each {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            AnyConn::Tcp($c) => $e,
            AnyConn::Shm($c) => $e,
            AnyConn::Ucx($c) => $e,
            AnyConn::Tls($c) => $e,
            AnyConn::TlsShm($c) => $e,
            AnyConn::TlsUcx($c) => $e,
        }
    };
}

impl Read for AnyConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        each!(self, c => c.read(buf))
    }
}

impl Write for AnyConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        each!(self, c => c.write(buf))
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        each!(self, c => c.write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        each!(self, c => c.flush())
    }
}

impl Conn for AnyConn {
    fn send_all_vectored(&mut self, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        each!(self, c => c.send_all_vectored(bufs))
    }
    fn try_clone(&self) -> io::Result<Self> {
        match self {
            AnyConn::Tcp(c) => c.try_clone().map(AnyConn::Tcp),
            AnyConn::Shm(c) => c.try_clone().map(AnyConn::Shm),
            AnyConn::Ucx(c) => c.try_clone().map(AnyConn::Ucx),
            AnyConn::Tls(c) => c.try_clone().map(AnyConn::Tls),
            AnyConn::TlsShm(c) => c.try_clone().map(AnyConn::TlsShm),
            AnyConn::TlsUcx(c) => c.try_clone().map(AnyConn::TlsUcx),
        }
    }
    fn peer(&self) -> String {
        each!(self, c => c.peer())
    }
    fn shutdown(&self) {
        each!(self, c => c.shutdown())
    }
    fn set_busy_poll(&mut self, spin: Duration) {
        each!(self, c => c.set_busy_poll(spin))
    }
    fn reads_ahead(&self) -> bool {
        each!(self, c => c.reads_ahead())
    }
    fn offer_memory(&self, file: &std::fs::File, from: u64) -> io::Result<Option<Vec<u8>>> {
        each!(self, c => c.offer_memory(file, from))
    }
    fn take_memory(&self, len: usize, token: &[u8]) -> io::Result<crate::PeerMemory> {
        each!(self, c => c.take_memory(len, token))
    }
    fn shares_with_remote_writers(&self) -> bool {
        each!(self, c => c.shares_with_remote_writers())
    }
    fn peer_identity(&self) -> Option<PeerIdentity> {
        each!(self, c => c.peer_identity())
    }
    fn record_mac(&self, session: u64, lane: u16) -> io::Result<Option<crate::RecordMac>> {
        each!(self, c => c.record_mac(session, lane))
    }
    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        each!(self, c => c.set_recv_timeout(timeout))
    }
    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        each!(self, c => c.set_send_timeout(timeout))
    }
}

impl Transport for AnyTransport {
    type Conn = AnyConn;
    type Listener = AnyListener;

    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<AnyConn> {
        if let Some(tls) = &self.tls {
            return if is_ucx_addr(addr) {
                TlsConn::client(UcxTransport.connect(addr, timeout)?, tls, timeout).map(AnyConn::TlsUcx)
            } else if is_shm_addr(addr) {
                TlsConn::client(ShmTransport.connect(addr, timeout)?, tls, timeout).map(AnyConn::TlsShm)
            } else {
                TlsConn::client(TcpTransport.connect(addr, timeout)?, tls, timeout).map(AnyConn::Tls)
            };
        }
        if is_ucx_addr(addr) {
            UcxTransport.connect(addr, timeout).map(AnyConn::Ucx)
        } else if is_shm_addr(addr) {
            ShmTransport.connect(addr, timeout).map(AnyConn::Shm)
        } else {
            TcpTransport.connect(addr, timeout).map(AnyConn::Tcp)
        }
    }

    fn listen(&self, addr: &str) -> io::Result<AnyListener> {
        if is_ucx_addr(addr) {
            UcxTransport.listen(addr).map(AnyListener::Ucx)
        } else if is_shm_addr(addr) {
            ShmTransport.listen(addr).map(AnyListener::Shm)
        } else {
            TcpTransport.listen(addr).map(AnyListener::Tcp)
        }
    }

    fn accept(&self, listener: &AnyListener) -> io::Result<AnyConn> {
        match listener {
            // The TLS handshake runs with the connection's first reads, in its own thread.
            AnyListener::Tcp(l) => match &self.tls {
                Some(tls) => TlsConn::server(TcpTransport.accept(l)?, tls).map(AnyConn::Tls),
                None => TcpTransport.accept(l).map(AnyConn::Tcp),
            },
            AnyListener::Shm(l) => match &self.tls {
                Some(tls) => TlsConn::server(ShmTransport.accept(l)?, tls).map(AnyConn::TlsShm),
                None => ShmTransport.accept(l).map(AnyConn::Shm),
            },
            AnyListener::Ucx(l) => match &self.tls {
                Some(tls) => TlsConn::server(UcxTransport.accept(l)?, tls).map(AnyConn::TlsUcx),
                None => UcxTransport.accept(l).map(AnyConn::Ucx),
            },
        }
    }

    fn local_addr(&self, listener: &AnyListener) -> io::Result<String> {
        match listener {
            AnyListener::Tcp(l) => TcpTransport.local_addr(l),
            AnyListener::Shm(l) => ShmTransport.local_addr(l),
            AnyListener::Ucx(l) => UcxTransport.local_addr(l),
        }
    }
}
