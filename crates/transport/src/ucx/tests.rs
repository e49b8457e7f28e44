use super::*;
use crate::stream_tests::{bytes_arrive_in_order, pattern, polled_echo};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// Whether UCX is here; without it a test passes only outside the strict run (scripts/test
/// installs libucx0 and sets MOJIM_TEST_STRICT=1, where a missing library fails).
fn ucx_here() -> bool {
    match mojim_ucx::version() {
        Ok(_) => true,
        Err(e) if std::env::var_os("MOJIM_TEST_STRICT").is_some() => panic!("{e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

/// A connected pair: (connecting side, accepting side, listener).
fn pair() -> (UcxConn, UcxConn, UcxListener) {
    let t = UcxTransport;
    let l = t.listen("ucx:127.0.0.1:0").unwrap();
    let addr = t.local_addr(&l).unwrap();
    let c = std::thread::spawn(move || UcxTransport.connect(&addr, Duration::from_secs(10)).unwrap());
    let a = t.accept(&l).unwrap();
    (c.join().unwrap(), a, l)
}

#[test]
fn addresses_name_a_socket_address() {
    assert!(is_ucx_addr("ucx:127.0.0.1:7420"));
    assert!(!is_ucx_addr("127.0.0.1:7420") && !is_ucx_addr("/dev/shm/m.sock"));
    assert_eq!(socket_addr("ucx:127.0.0.1:7420").unwrap(), "127.0.0.1:7420".parse().unwrap());
    assert!(socket_addr("127.0.0.1:7420").is_err());
}

#[test]
fn echo_with_polling() {
    if !ucx_here() {
        return;
    }
    let (c, a, _l) = pair();
    polled_echo(c, a, 500);
}

#[test]
fn bytes_arrive_in_order_across_many_laps() {
    if !ucx_here() {
        return;
    }
    let (c, a, _l) = pair();
    bytes_arrive_in_order(c, a, 3 * RING_BYTES as u64 + 12_345);
}

#[test]
fn a_clone_reads_while_the_original_writes() {
    if !ucx_here() {
        return;
    }
    let (mut c, mut a, _l) = pair();
    let n = 2 * RING_BYTES + 777;
    // Each side sends `n` bytes while it receives the other's `n`: neither may wait for the
    // other's reads to finish first.
    let run = move |conn: &mut UcxConn, seed: u64| {
        let mut reader = conn.try_clone().unwrap();
        let r = std::thread::spawn(move || {
            let mut got = vec![0u8; n];
            reader.read_exact(&mut got).unwrap();
            got
        });
        let data: Vec<u8> = (0..n as u64).map(|i| pattern(i + seed)).collect();
        conn.write_all(&data).unwrap();
        r
    };
    let ra = {
        let mut a2 = a.try_clone().unwrap();
        std::thread::spawn(move || run(&mut a2, 1).join().unwrap())
    };
    let from_a = run(&mut c, 2).join().unwrap();
    let from_c = ra.join().unwrap();
    assert!(from_a.iter().enumerate().all(|(i, &b)| b == pattern(i as u64 + 1)));
    assert!(from_c.iter().enumerate().all(|(i, &b)| b == pattern(i as u64 + 2)));
    drop(a.write(b"x"));
}

#[test]
fn shutdown_ends_the_stream_after_what_was_sent() {
    if !ucx_here() {
        return;
    }
    let (mut c, mut a, _l) = pair();
    c.write_all(b"last words").unwrap();
    c.shutdown();
    let mut got = Vec::new();
    a.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    assert_eq!(a.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    assert_eq!(c.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn a_shutdown_wakes_a_blocked_reader_of_the_same_side() {
    if !ucx_here() {
        return;
    }
    let (_c, a, _l) = pair();
    let mut reader = a.try_clone().unwrap();
    let blocked = std::thread::spawn(move || {
        let mut b = [0u8; 8];
        reader.read(&mut b).unwrap()
    });
    // Whether the reader is asleep yet or not, the shutdown ends its read.
    a.shutdown();
    assert_eq!(blocked.join().unwrap(), 0);
}

#[test]
fn a_dropped_peer_ends_the_stream() {
    if !ucx_here() {
        return;
    }
    let (c, mut a, _l) = pair();
    let blocked = std::thread::spawn(move || {
        let mut b = [0u8; 8];
        a.read(&mut b).map_err(|e| e.kind())
    });
    drop(c);
    let r = blocked.join().unwrap();
    assert!(matches!(r, Ok(0) | Err(io::ErrorKind::ConnectionReset)), "{r:?}");
}

/// The other process of `a_killed_peer_process_ends_the_stream`: connects, says so, and waits
/// to be killed. A no-op in a normal run.
#[test]
fn killed_peer_child() {
    let Some(addr) = std::env::var_os("MOJIM_UCX_TEST_PEER") else { return };
    let mut c = UcxTransport.connect(addr.to_str().unwrap(), Duration::from_secs(10)).unwrap();
    c.write_all(b"ready").unwrap();
    loop {
        std::thread::park();
    }
}

#[test]
fn a_killed_peer_process_ends_the_stream() {
    if !ucx_here() {
        return;
    }
    let t = UcxTransport;
    let l = t.listen("ucx:127.0.0.1:0").unwrap();
    let addr = t.local_addr(&l).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "ucx::tests::killed_peer_child", "--nocapture", "--test-threads=1"])
        .env("MOJIM_UCX_TEST_PEER", &addr)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut a = t.accept(&l).unwrap();
    let mut b = [0u8; 5];
    a.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ready");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut b = [0u8; 8];
    let r = a.read(&mut b).map_err(|e| e.kind());
    assert!(matches!(r, Ok(0) | Err(io::ErrorKind::ConnectionReset)), "{r:?}");
    let w = (0..1000).map(|_| a.write(b"x")).find(|r| r.is_err());
    assert!(w.is_some(), "writes to a killed peer fail");
}

#[test]
fn a_receive_timeout_is_would_block() {
    if !ucx_here() {
        return;
    }
    let (_c, mut a, _l) = pair();
    a.set_recv_timeout(Some(Duration::from_millis(30))).unwrap();
    let mut b = [0u8; 8];
    let e = a.read(&mut b).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn a_send_timeout_on_a_full_ring_is_would_block() {
    if !ucx_here() {
        return;
    }
    let (mut c, _a, _l) = pair();
    let big = vec![7u8; RING_BYTES];
    c.write_all(&big).unwrap();
    // The ring is full and nobody reads: the timeout is what ends the wait for room.
    c.set_send_timeout(Some(Duration::from_millis(30))).unwrap();
    let e = c.write(b"one more").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn a_corrupted_end_counter_is_an_error_not_a_wild_read() {
    if !ucx_here() {
        return;
    }
    let (c, mut a, _l) = pair();
    // The peer claims far more bytes than the ring holds.
    c.shared.worker().am_send(AM_ID, &doorbell(KIND_HEAD, u64::MAX / 2), None).unwrap();
    let mut b = [0u8; 8];
    let e = a.read(&mut b).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("corrupted the ring"), "{e}");
    assert!(a.read(&mut b).is_err(), "the connection stays ended");
}

#[test]
fn a_consumed_counter_beyond_what_was_sent_is_an_error() {
    if !ucx_here() {
        return;
    }
    let (c, mut a, _l) = pair();
    c.shared.worker().am_send(AM_ID, &doorbell(KIND_TAIL, 1 << 40), None).unwrap();
    // The bad doorbell arrives with the next progress of `a`'s worker.
    let e = loop {
        a.shared.worker().progress();
        if let Err(e) = a.write(b"x") {
            break e;
        }
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
}

#[test]
fn a_counter_that_goes_back_is_an_error() {
    if !ucx_here() {
        return;
    }
    let (mut c, mut a, _l) = pair();
    c.write_all(b"0123456789").unwrap();
    c.shared.worker().am_send(AM_ID, &doorbell(KIND_HEAD, 3), None).unwrap();
    let mut b = [0u8; 10];
    // The ten bytes may be read first; the doorbell that goes back ends the connection then.
    let e = loop {
        match a.read(&mut b) {
            Ok(n) => assert!(n > 0, "no end of stream before the error"),
            Err(e) => break e,
        }
    };
    assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("went back"), "{e}");
}

#[test]
fn nobody_listening_is_an_error() {
    if !ucx_here() {
        return;
    }
    // A port just freed: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let r = UcxTransport.connect(&format!("ucx:127.0.0.1:{port}"), Duration::from_secs(5));
    assert!(r.is_err());
}

#[test]
fn a_peer_puts_into_a_registered_region() {
    if !ucx_here() {
        return;
    }
    let (mut c, mut a, _l) = pair();
    let len = 1 << 20;
    let region = a.register(anonymous_map(len).unwrap()).unwrap();
    let key = region.key();
    a.write_all(&(key.len() as u32).to_le_bytes()).unwrap();
    a.write_all(&key).unwrap();

    let mut n = [0u8; 4];
    c.read_exact(&mut n).unwrap();
    let mut key = vec![0u8; u32::from_le_bytes(n) as usize];
    c.read_exact(&mut key).unwrap();
    let remote = c.remote_region(&key).unwrap();
    assert_eq!(remote.len(), len as u64);
    let body: Vec<u8> = (0..100_000u64).map(pattern).collect();
    remote.put(12_345, &[IoSlice::new(b"head"), IoSlice::new(&body)]).unwrap();
    remote.flush().unwrap();
    let e = remote.put(len as u64 - 2, &[IoSlice::new(b"abc")]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    c.write_all(b"!").unwrap();

    let mut bell = [0u8; 1];
    a.read_exact(&mut bell).unwrap();
    let mut got = vec![0u8; 4 + body.len()];
    region.map().read(12_345, &mut got);
    assert_eq!(&got[..4], b"head");
    assert_eq!(&got[4..], &body[..]);
    let mut before = [1u8; 16];
    region.map().read(12_345 - 16, &mut before);
    assert_eq!(before, [0u8; 16], "nothing before the offset was written");
}

#[test]
fn a_listener_takes_the_port_of_one_just_closed_with_a_connection() {
    if !ucx_here() {
        return;
    }
    // A port below the kernel's ephemeral range, so that no other socket of the parallel tests
    // is given it between the two listeners.
    let start = 20_000 + (std::process::id() % 10_000) as u16;
    let port = (start..32_000)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port below 32000");
    let addr = format!("ucx:127.0.0.1:{port}");
    let l = UcxTransport.listen(&addr).unwrap();
    let dial = addr.clone();
    let c = std::thread::spawn(move || UcxTransport.connect(&dial, Duration::from_secs(10)).unwrap());
    let mut a = UcxTransport.accept(&l).unwrap();
    let mut c = c.join().unwrap();
    a.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    drop((a, l));
    drop(c);
    // The accepting side closed first: its end of the connection waits in TIME_WAIT.
    let again = UcxTransport.listen(&addr).unwrap();
    assert_eq!(UcxTransport.local_addr(&again).unwrap(), addr);
}

#[test]
fn a_writer_that_finds_no_room_gets_it_while_the_reader_is_not_reading() {
    if !ucx_here() {
        return;
    }
    let (mut c, mut a, _l) = pair();
    c.write_all(&vec![1u8; RING_BYTES]).unwrap();
    // Fewer bytes than a reader hands back on its own: only the writer's request brings the
    // room back, answered by `a`'s progress thread (no thread of `a` is in a read).
    let mut b = vec![0u8; 100];
    a.read_exact(&mut b).unwrap();
    c.set_send_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(&[2u8; 50]).unwrap();
    let mut rest = vec![0u8; RING_BYTES - 100 + 50];
    a.read_exact(&mut rest).unwrap();
    assert!(
        rest[..RING_BYTES - 100].iter().all(|&x| x == 1) && rest[RING_BYTES - 100..].iter().all(|&x| x == 2)
    );
}

#[test]
fn an_offered_file_is_placed_into_with_puts() {
    if !ucx_here() {
        return;
    }
    let (c, a, _l) = pair();
    let path = format!("/dev/shm/mojim-ucx-test-{}-offered", std::process::id());
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    file.set_len(1 << 16).unwrap();
    assert!(a.shares_with_remote_writers(), "a peer with the key writes at any time");
    let token = a.offer_memory(&file, 4096).unwrap().expect("UCX offers memory");
    assert!(token.len() > 16 && token.len() <= mojim_format::handshake::LOG_TOKEN_MAX);
    let registered = u64::from_le_bytes(token[8..16].try_into().unwrap());
    assert_eq!(registered, (1 << 16) - 4096, "only the bytes from the offset are registered");

    let e = c.take_memory(1 << 20, &token).err().expect("smaller than announced");
    assert!(e.to_string().contains("61440"), "{e}");
    assert!(c.take_memory(1 << 12, &token[..8]).is_err(), "a token cut short");
    let mut mem = c.take_memory((1 << 16) - 4096, &token).unwrap();
    let src = anonymous_map(8192).unwrap();
    let body: Vec<u8> = (0..5000u64).map(pattern).collect();
    src.write(100, &body);
    // Offsets are the offer's: byte 0 is the file's byte 4096.
    let crc = mem.place(0, src.view(100, body.len())).unwrap();
    assert_eq!(crc, mojim_format::checksum::crc32c(&body), "the checksum of the bytes placed");
    assert_eq!(mem.write(60_000, b"marker").unwrap(), mojim_format::checksum::crc32c(b"marker"));
    mem.flush().unwrap();
    assert!(mem.view(0, 1).is_none(), "the peer's memory is not readable here");
    let mut back = vec![0u8; body.len()];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back, 4096).unwrap();
    assert_eq!(back, body);
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut back[..6], 4096 + 60_000).unwrap();
    assert_eq!(&back[..6], b"marker");
    let mut header = vec![1u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, 0).unwrap();
    assert!(header.iter().all(|&b| b == 0), "nothing was written before the offset");
    assert!(mem.write((1 << 16) - 4096 - 2, b"abc").is_err(), "past the end of the offered memory");
}
