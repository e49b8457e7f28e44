//! Checks every byte-stream transport passes the same way (its own tests call them on a
//! connected pair): order across many laps of a ring, and a polled echo.

use crate::Conn;
use std::io::IoSlice;
use std::time::Duration;

/// The byte at stream position `i`.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2654435761) >> 7) as u8
}

/// `total` bytes from `c` arrive at `a` in order, sent in odd-sized vectored writes of two
/// slices (so that writes split across a ring's end) and read in odd-sized reads.
pub fn bytes_arrive_in_order<C: Conn>(mut c: C, mut a: C, total: u64) {
    let w = std::thread::spawn(move || {
        let mut sent = 0u64;
        let mut chunk = vec![0u8; 100_003];
        while sent < total {
            let n = (total - sent).min(chunk.len() as u64) as usize;
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(sent + k as u64);
            }
            let (x, y) = chunk[..n].split_at(n / 3);
            c.send_all_vectored(&mut [IoSlice::new(x), IoSlice::new(y)]).unwrap();
            sent += n as u64;
        }
        c
    });
    let mut got = 0u64;
    let mut buf = vec![0u8; 65_537];
    while got < total {
        let n = a.read(&mut buf).unwrap();
        assert!(n > 0, "end of stream after {got} of {total} bytes");
        for (k, &b) in buf[..n].iter().enumerate() {
            assert_eq!(b, pattern(got + k as u64), "byte {}", got + k as u64);
        }
        got += n as u64;
    }
    drop(w.join().unwrap());
}

/// `rounds` 64-byte messages from `c` come back from `a`, both ends polling.
pub fn polled_echo<C: Conn>(mut c: C, mut a: C, rounds: u32) {
    c.set_busy_poll(Duration::from_micros(50));
    a.set_busy_poll(Duration::from_micros(50));
    let echo = std::thread::spawn(move || {
        let mut b = [0u8; 64];
        for _ in 0..rounds {
            a.read_exact(&mut b).unwrap();
            a.write_all(&b).unwrap();
        }
    });
    for i in 0..rounds {
        let msg = [i as u8; 64];
        c.write_all(&msg).unwrap();
        let mut back = [0u8; 64];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    }
    echo.join().unwrap();
}
