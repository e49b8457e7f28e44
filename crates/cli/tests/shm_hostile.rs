//! A hostile process on the mirror's host, at its shared-memory socket: it connects as the `shm`
//! transport does and sends a rings' file that it can resize, then truncates it. A mirror that
//! mapped such a file would die of SIGBUS at its next look at the rings, before any secret is
//! checked. The mirror refuses a file that is not sealed against resizing, keeps running, and
//! serves a primary that belongs.

mod common;

use common::{mirror_image, wait_applied, Cluster};
use mojim::Primary;
use mojim_transport::shm::{HELLO_LEN, HELLO_MAGIC, HELLO_VERSION, RING_BYTES, RING_HEADER};
use rustix::fs::MemfdFlags;
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
use std::io::{IoSlice, Read};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

#[test]
fn a_connector_that_truncates_its_rings_file_does_not_stop_the_mirror() {
    let mut c = Cluster::new("shm_truncate", 1 << 20, |_| {});
    let sock = c.dir.path().join("m.sock").to_str().expect("utf-8").to_string();
    c.start_mirror_with(&["--listen", &sock]);

    // What the transport sends, with a memfd the sender can still resize.
    let s = UnixStream::connect(&sock).expect("connect to the mirror's socket");
    let memfd = rustix::fs::memfd_create("hostile", MemfdFlags::CLOEXEC).expect("memfd");
    rustix::fs::ftruncate(&memfd, 2 * (RING_HEADER + RING_BYTES) as u64).expect("size the memfd");
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(HELLO_MAGIC);
    hello[8..12].copy_from_slice(&HELLO_VERSION.to_le_bytes());
    hello[12..16].copy_from_slice(&(RING_BYTES as u32).to_le_bytes());
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [memfd.as_fd()];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = rustix::net::sendmsg(&s, &[IoSlice::new(&hello)], &mut control, SendFlags::empty())
        .expect("send the hello and its file");
    assert_eq!(sent, HELLO_LEN);
    // The mirror answers `k` once it has mapped the file, or closes the connection if it
    // refuses it. Then the file shrinks under whatever the mirror mapped: a mirror that took
    // it dies at its next look at the rings, which closes the connection too.
    s.set_read_timeout(Some(common::WAIT)).expect("set a timeout");
    let mut answer = Vec::new();
    (&s).take(1).read_to_end(&mut answer).expect("the mirror's answer to the hello");
    rustix::fs::ftruncate(&memfd, 0).expect("truncate the memfd");
    let mut rest = Vec::new();
    (&s).read_to_end(&mut rest).expect("the mirror closes the connection");
    drop(s);

    // Still serving: a primary that belongs syncs, and the mirror applies it.
    let p =
        Primary::open(&c.primary_options()).expect("a primary connects to the mirror after the hostile peer");
    p.write(4096, b"still here").expect("write");
    p.msync(4096, 10).expect("msync through the mirror");
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(&mirror_image(&mut admin, c.size())[4096..4106], b"still here");
    drop(p);
    let mirror = c.mirror.as_mut().expect("the mirror");
    assert_eq!(mirror.wait_exit(Duration::ZERO), None, "the mirror is still running");
    assert!(answer.is_empty(), "the mirror took an unsealed rings' file (it answered {answer:?})");
}
