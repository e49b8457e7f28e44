//! Free loopback ports, for tests and tools that start servers on addresses of their choosing.

use std::io;
use std::net::TcpListener;

/// `N` distinct TCP ports on 127.0.0.1 that were free when this was called. All `N` are bound at
/// once, so the kernel cannot hand out one of them twice, and released before this returns, for
/// the caller's servers to take; another process may take one in between.
pub fn free_loopback_ports<const N: usize>() -> io::Result<[u16; N]> {
    let listeners = (0..N).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<io::Result<Vec<_>>>()?;
    let mut ports = [0u16; N];
    for (port, l) in ports.iter_mut().zip(&listeners) {
        *port = l.local_addr()?.port();
    }
    Ok(ports)
}

/// One free TCP port on 127.0.0.1 ([`free_loopback_ports`]).
pub fn free_loopback_port() -> io::Result<u16> {
    let [port] = free_loopback_ports()?;
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_distinct() {
        let ports: [u16; 8] = free_loopback_ports().expect("free ports");
        for (i, p) in ports.iter().enumerate() {
            assert_ne!(*p, 0);
            assert!(!ports[..i].contains(p), "port {p} given twice: {ports:?}");
        }
        assert_ne!(free_loopback_port().expect("one more"), 0);
    }
}
