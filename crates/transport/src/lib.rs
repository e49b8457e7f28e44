//! The transport under Mojim's lanes.
//!
//! A lane needs only an ordered, reliable byte stream in both directions, vectored sends (one
//! `writev` of headers and region bytes per group) and exact receives (a body straight into a
//! log slot). TCP is the implementation for networks, [`shm`] the one for processes on one host
//! (shared-memory rings, no kernel on the data path), [`ucx`] the one over UCX (one-sided puts
//! into the receiver's registered ring; RDMA where the hosts have it), [`mem`] the one for a primary and a node
//! in one process (tests, embedders); [`AnyTransport`] picks TCP, shared memory or UCX by
//! the address. Nothing above this trait knows which one it has. `shm` and `ucx` also share
//! memory for one-sided record placement ([`Conn::offer_memory`], [`PeerMemory`]).
#![forbid(unsafe_code)]

mod any;
pub mod connect;
pub mod frames;
pub mod mem;
mod peer_memory;
pub mod ports;
pub mod random;
pub mod record_mac;
pub mod shm;
#[cfg(test)]
mod stream_tests;
mod tcp;
pub mod tls;
pub mod ucx;

pub use any::{transport_of, AnyConn, AnyListener, AnyTransport};
pub use mem::{MemConn, MemListener, MemTransport};
pub use peer_memory::PeerMemory;
pub use record_mac::RecordMac;
pub use shm::{ShmConn, ShmListener, ShmTransport};
pub use tcp::{TcpConn, TcpListenerExt, TcpTransport};
pub use tls::{PeerIdentity, Role, TlsConn, TlsContext};
pub use ucx::{LocalRegion, RemoteRegion, UcxConn, UcxListener, UcxTransport};

use std::io::{self, IoSlice, Read, Write};
use std::time::Duration;

/// One connection of a lane.
pub trait Conn: Read + Write + Send + Sized + 'static {
    /// Sends every byte of `bufs`, in order, advancing the slices as it goes.
    fn send_all_vectored(&mut self, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match self.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A second handle on the same connection, so that one thread can send while another
    /// receives.
    fn try_clone(&self) -> io::Result<Self>;

    /// The peer's address, for logs and errors.
    fn peer(&self) -> String;

    /// Closes both directions; the peer and any thread blocked on this connection see it end.
    fn shutdown(&self);

    /// Before a receive sleeps, poll for data for up to `spin` (0: never). Polling trades a
    /// core for the wake-up latency of a sleeping thread, as the paper's lanes do.
    fn set_busy_poll(&mut self, spin: Duration);

    /// Whether a receiver should read ahead into a buffer of its own (a socket: one system
    /// call for many small frames) or straight into where the bytes go (shared memory: every
    /// read is a copy, and a buffer would add one).
    fn reads_ahead(&self) -> bool {
        true
    }

    /// One-sided placement: offers the peer the bytes of `file` from `from` (a multiple of 4096)
    /// to its end to write into (a lane's log's record area); the peer addresses them from 0.
    /// `Ok(None)`: this transport cannot share memory, and the peer goes on sending bytes.
    /// `Ok(Some(token))`: offered; the peer needs `token` (it travels in the `Log` frame) to
    /// take it. Over UCX only those bytes are registered; over shared memory the peer receives
    /// the file itself (it runs as the file's owner: see `shm.rs`).
    fn offer_memory(&self, file: &std::fs::File, from: u64) -> io::Result<Option<Vec<u8>>> {
        let _ = (file, from);
        Ok(None)
    }

    /// Takes the memory the peer offered with [`Conn::offer_memory`], announced as `len` bytes,
    /// with the `token` the offer came with. Its byte 0 is the offer's first byte.
    fn take_memory(&self, len: usize, token: &[u8]) -> io::Result<PeerMemory> {
        let _ = (len, token);
        Err(io::Error::new(io::ErrorKind::Unsupported, "this transport does not share memory"))
    }

    /// Whether memory offered on this connection can be written by the peer at any time, also
    /// after this side checked what it holds (UCX: the peer holds the key to it, and nothing on
    /// this side orders its puts). Such memory is copied out before its bytes are checked and
    /// used.
    fn shares_with_remote_writers(&self) -> bool {
        false
    }

    /// The key of the placed records of lane `lane` of session `session` on this connection
    /// ([`RecordMac`]), from its TLS session's exporter; `Ok(None)` without TLS (a placed record
    /// then carries no tag). Call it after the handshake.
    fn record_mac(&self, session: u64, lane: u16) -> io::Result<Option<RecordMac>> {
        let _ = (session, lane);
        Ok(None)
    }

    /// Who the peer is by its certificate, once a TLS handshake has checked it (`None`: no TLS,
    /// or not yet).
    fn peer_identity(&self) -> Option<PeerIdentity> {
        None
    }

    /// Bounds how long a receive may block (`None`: forever).
    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;

    /// Bounds how long a send may block (`None`: forever).
    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

/// Makes connections and accepts them.
pub trait Transport: Send + Sync + 'static {
    type Conn: Conn;
    type Listener: Send + 'static;

    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<Self::Conn>;
    fn listen(&self, addr: &str) -> io::Result<Self::Listener>;
    fn accept(&self, listener: &Self::Listener) -> io::Result<Self::Conn>;
    fn local_addr(&self, listener: &Self::Listener) -> io::Result<String>;
}
