//! Randomness from the operating system (nonces, session ids, UUIDs).
//!
//! Shared by the primary, the node (handshake nonces, session ids), `mojim kv` and the tools.

/// Fills `buf` with random bytes from the kernel.
pub fn fill(buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        match rustix::rand::getrandom(&mut buf[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) only fails for bad arguments or before the pool is seeded, which
            // it waits out; a failure here is a broken system.
            Err(e) => panic!("getrandom failed: {e}"),
        }
    }
}

/// A random `u64` from the kernel (for session ids and seeds).
pub fn u64() -> u64 {
    let mut b = [0u8; 8];
    fill(&mut b);
    u64::from_le_bytes(b)
}
