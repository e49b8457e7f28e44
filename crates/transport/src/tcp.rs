//! TCP lanes: `TCP_NODELAY`, one connection per lane.

use crate::{Conn, Transport};
use rustix::event::{PollFd, PollFlags};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A lane over TCP.
pub struct TcpConn {
    stream: TcpStream,
    peer: String,
    busy_poll: Duration,
}

impl TcpConn {
    /// Wraps an accepted or connected stream.
    pub fn new(stream: TcpStream) -> io::Result<TcpConn> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "unknown".into());
        Ok(TcpConn { stream, peer, busy_poll: Duration::ZERO })
    }

    /// Polls for readability for up to `busy_poll` (see [`Conn::set_busy_poll`]). `poll(2)` with
    /// no timeout reads the socket's state without taking its lock, so polling does not slow
    /// down the delivery it waits for (a `recv` loop would contend with it).
    fn wait_readable(&self) {
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        let start = Instant::now();
        loop {
            let mut fds = [PollFd::new(&self.stream, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&zero)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => {}
                // Readable, closed or failed: the read that follows tells which.
                _ => return,
            }
            if start.elapsed() >= self.busy_poll {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

impl Read for TcpConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.busy_poll.is_zero() && !buf.is_empty() {
            self.wait_readable();
        }
        self.stream.read(buf)
    }
}

impl Write for TcpConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.stream.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn for TcpConn {
    fn try_clone(&self) -> io::Result<TcpConn> {
        Ok(TcpConn { stream: self.stream.try_clone()?, peer: self.peer.clone(), busy_poll: self.busy_poll })
    }

    fn set_busy_poll(&mut self, spin: Duration) {
        self.busy_poll = spin;
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }

    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_write_timeout(timeout)
    }
}

/// Plain TCP.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpTransport;

/// Helpers on a TCP listener.
pub trait TcpListenerExt {
    fn local(&self) -> io::Result<String>;
}

impl TcpListenerExt for TcpListener {
    fn local(&self) -> io::Result<String> {
        Ok(self.local_addr()?.to_string())
    }
}

impl Transport for TcpTransport {
    type Conn = TcpConn;
    type Listener = TcpListener;

    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<TcpConn> {
        let mut last =
            io::Error::new(io::ErrorKind::InvalidInput, format!("address {addr:?} resolves to nothing"));
        for a in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return TcpConn::new(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn listen(&self, addr: &str) -> io::Result<TcpListener> {
        TcpListener::bind(addr)
    }

    fn accept(&self, listener: &TcpListener) -> io::Result<TcpConn> {
        let (s, _) = listener.accept()?;
        TcpConn::new(s)
    }

    fn local_addr(&self, listener: &TcpListener) -> io::Result<String> {
        listener.local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_round_trip() {
        let t = TcpTransport;
        let l = t.listen("127.0.0.1:0").unwrap();
        let addr = t.local_addr(&l).unwrap();
        let h = std::thread::spawn(move || {
            let mut c = t.accept(&l).unwrap();
            let mut b = vec![0u8; 300_000];
            c.read_exact(&mut b).unwrap();
            b
        });
        let mut c = t.connect(&addr, Duration::from_secs(5)).unwrap();
        let a = vec![1u8; 100_000];
        let b = vec![2u8; 200_000];
        c.send_all_vectored(&mut [IoSlice::new(&a), IoSlice::new(&b)]).unwrap();
        let got = h.join().unwrap();
        assert!(got[..100_000].iter().all(|&x| x == 1) && got[100_000..].iter().all(|&x| x == 2));
    }
}
