use super::*;
use crate::stream_tests::{bytes_arrive_in_order, polled_echo};
use std::io::{Read, Write};

fn sock_path(name: &str) -> String {
    format!("/dev/shm/mojim-shm-test-{}-{name}.sock", std::process::id())
}

/// A connected pair: (connecting side, accepting side, listener).
fn pair(name: &str) -> (ShmConn, ShmConn, ShmListener) {
    let t = ShmTransport;
    let path = sock_path(name);
    let l = t.listen(&path).unwrap();
    let c = std::thread::spawn(move || ShmTransport.connect(&path, Duration::from_secs(5)).unwrap());
    let a = t.accept(&l).unwrap();
    (c.join().unwrap(), a, l)
}

#[test]
fn bytes_arrive_in_order_across_many_laps() {
    let (c, a, _l) = pair("order");
    bytes_arrive_in_order(c, a, 3 * RING_BYTES as u64 + 12_345);
}

#[test]
fn both_directions_at_once_with_polling() {
    let (c, a, _l) = pair("duplex");
    polled_echo(c, a, 2000);
}

#[test]
fn shutdown_ends_the_stream_after_what_was_sent() {
    let (mut c, mut a, _l) = pair("shutdown");
    c.write_all(b"last words").unwrap();
    c.shutdown();
    let mut got = Vec::new();
    a.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    assert_eq!(a.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    assert_eq!(c.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn a_peer_that_is_gone_ends_the_stream() {
    let (c, mut a, _l) = pair("gone");
    let blocked = std::thread::spawn(move || {
        let mut b = [0u8; 8];
        a.read(&mut b).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(c);
    assert_eq!(blocked.join().unwrap(), 0, "the reader sees the end once the peer's last handle goes");
}

#[test]
fn a_receive_timeout_is_would_block() {
    let (_c, mut a, _l) = pair("timeout");
    a.set_recv_timeout(Some(Duration::from_millis(30))).unwrap();
    let mut b = [0u8; 8];
    let e = a.read(&mut b).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn a_corrupted_ring_is_an_error_not_a_wild_read() {
    let (c, mut a, _l) = pair("corrupt");
    // The peer claims far more bytes than the ring holds.
    let s = &c.shared;
    s.tx.head(&s.map).store(u64::MAX / 2, Ordering::SeqCst);
    let mut b = [0u8; 8];
    let e = a.read(&mut b).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("corrupted the shared ring"), "{e}");
}

#[test]
fn a_connector_that_is_not_one_is_refused_and_the_listener_goes_on() {
    let t = ShmTransport;
    let path = sock_path("garbage");
    let l = t.listen(&path).unwrap();
    let mut raw = UnixStream::connect(&path).unwrap();
    raw.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let e = t.accept(&l).err().expect("refused");
    assert!(e.to_string().contains("not a shared-memory hello"), "{e}");
    // Silence: the accept gives up after its handshake timeout.
    let _quiet = UnixStream::connect(&path).unwrap();
    assert!(t.accept(&l).is_err());
    let p = path.clone();
    let c = std::thread::spawn(move || ShmTransport.connect(&p, Duration::from_secs(5)).unwrap());
    let mut a = t.accept(&l).unwrap();
    let mut c = c.join().unwrap();
    c.write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    a.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
}

#[test]
fn a_stale_socket_file_is_replaced_but_a_live_one_is_not() {
    let t = ShmTransport;
    let path = sock_path("stale");
    let l = t.listen(&path).unwrap();
    let e = t.listen(&path).err().expect("in use");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    drop(l);
    // A listener that went without removing its file (a killed process).
    drop(UnixListener::bind(&path).unwrap());
    assert!(Path::new(&path).exists());
    let _l2 = t.listen(&path).unwrap();
    drop(_l2);
    assert!(!Path::new(&path).exists(), "the listener removes its socket file");
}

#[test]
fn offered_memory_is_shared_and_an_untaken_offer_is_not_the_end() {
    let (mut c, mut a, _l) = pair("memory");
    let path = format!("/dev/shm/mojim-shm-test-{}-offered", std::process::id());
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    file.set_len(8192).unwrap();
    assert_eq!(a.offer_memory(&file, 4096).unwrap(), Some(4096u64.to_le_bytes().to_vec()), "where it starts");
    // The offer waits on the socket: the stream still works, and the peer is not taken for gone.
    a.write_all(b"ready").unwrap();
    let mut got = [0u8; 5];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ready");
    assert!(c.take_memory(4096, &[]).is_err(), "shared memory takes where the offer starts");
    let token = a.offer_memory(&file, 4096).unwrap().expect("offered");
    let mut mem = c.take_memory(4096, &token).unwrap();
    assert_eq!(mem.len(), 4096, "the file's bytes from the offset on");
    assert_eq!(mem.write(100, b"placed").unwrap(), mojim_format::checksum::crc32c(b"placed"));
    assert!(mem.write(4092, b"placed").is_err(), "past the end of the offer");
    mem.flush().unwrap();
    let mut back = [0u8; 6];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 4096 + 100).unwrap();
    assert_eq!(&back, b"placed");
    c.write_all(b"x").unwrap();
    a.read_exact(&mut got[..1]).unwrap();
}

#[test]
fn memory_smaller_than_announced_or_never_offered_is_refused() {
    let (c, a, _l) = pair("memory-bad");
    let path = format!("/dev/shm/mojim-shm-test-{}-small", std::process::id());
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    file.set_len(4096).unwrap();
    let token = a.offer_memory(&file, 0).unwrap().expect("offered");
    let e = c.take_memory(1 << 20, &token).err().expect("too small");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("4096"), "{e}");
    c.set_recv_timeout(Some(Duration::from_millis(20))).unwrap();
    assert!(c.take_memory(4096, &token).is_err(), "nothing more was offered");
}

/// Sends a shared-memory hello with `fd` to the listener at `path`, as a connector does.
fn hello_with(path: &str, fd: std::os::fd::BorrowedFd<'_>) -> UnixStream {
    let sock = UnixStream::connect(path).unwrap();
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(HELLO_MAGIC);
    hello[8..12].copy_from_slice(&HELLO_VERSION.to_le_bytes());
    hello[12..16].copy_from_slice(&(RING_BYTES as u32).to_le_bytes());
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(&sock, &[IoSlice::new(&hello)], &mut control, rustix::net::SendFlags::empty())
        .unwrap();
    sock
}

#[test]
fn a_rings_file_that_could_change_size_is_refused_before_it_is_mapped() {
    let t = ShmTransport;
    let path = sock_path("seals");
    let l = t.listen(&path).unwrap();
    let len = rings_len(RING_BYTES) as u64;
    let refused = |fd: std::os::fd::BorrowedFd<'_>| {
        let _sock = hello_with(&path, fd);
        t.accept(&l).err().expect("refused").to_string()
    };
    // Not sealed: the connector could truncate it under the listener's mapping.
    let unsealed = rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&unsealed, len).unwrap();
    let e = refused(unsealed.as_fd());
    assert!(e.contains("not sealed against resizing") && e.contains("F_SEAL_SHRINK"), "{e}");
    // Sealed against shrinking only: it could still grow between the check and the mapping.
    rustix::fs::fcntl_add_seals(&unsealed, SealFlags::SHRINK).unwrap();
    let e = refused(unsealed.as_fd());
    assert!(e.contains("not sealed against resizing"), "{e}");
    // A file that cannot be sealed at all (a memfd without MFD_ALLOW_SEALING).
    let plain = rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&plain, len).unwrap();
    let e = refused(plain.as_fd());
    assert!(e.contains("not sealed against resizing") || e.contains("cannot be sealed"), "{e}");
    // Sealed, but larger than the rings: mapping it all would cost the listener its size.
    let big = rustix::fs::memfd_create("test", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&big, 1 << 40).unwrap();
    rustix::fs::fcntl_add_seals(&big, ring_seals()).unwrap();
    let e = refused(big.as_fd());
    assert!(e.contains(&format!("the rings are {len}")), "{e}");
    // What the transport makes cannot change size, by either side.
    let sealed = make_rings(RING_BYTES).unwrap();
    assert_eq!(rustix::fs::ftruncate(&sealed, 0), Err(rustix::io::Errno::PERM));
    assert_eq!(rustix::fs::ftruncate(&sealed, 2 * len), Err(rustix::io::Errno::PERM));
    // And the listener goes on.
    let p = path.clone();
    let c = std::thread::spawn(move || ShmTransport.connect(&p, Duration::from_secs(5)).unwrap());
    let mut a = t.accept(&l).unwrap();
    let mut c = c.join().unwrap();
    c.write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    a.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ok");
}
