//! A primary that closes right after a copy into this node leaves the node's copy consistent,
//! even when a lane's `CopyEnd` is still on its way while another lane ends the session.
//!
//! A relay between a real primary and this node (over TCP) holds lane 1's `CopyEnd` and what
//! follows it, the way a network can deliver one connection's frame after another connection's
//! end. The primary's `close` runs meanwhile; the relay lets the held frames go once the primary
//! has sent something more on lane 1 (it waits for the node's word that the copy ended), or
//! else, once it closed the lane, only after the node ended the session: the worst order the
//! network could have chosen.

use crate::test_peer::{node_options, primary_options, region, region_with_history, wait_for, Scratch};
use crate::Mirror;
use mojim::config::Heartbeat;
use mojim::Primary;
use mojim_format::handshake::Hello;
use mojim_format::FrameKind;
use mojim_transport::frames::read_frame;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// What the relay saw on the held lane.
#[derive(Debug, PartialEq)]
enum Seen {
    /// A `CopyEnd`, held with everything after it.
    Held,
    /// The first frame the primary sent after it (held too).
    After(FrameKind),
    /// The primary closed the lane after it.
    Closed,
}

/// A relay to `node` whose lane `lane` holds its `CopyEnd` and everything after it until the test
/// lets them go; the other lanes, and every frame from the node, pass as they come.
struct Relay {
    addr: String,
    seen: mpsc::Receiver<Seen>,
    go: mpsc::Sender<()>,
}

impl Relay {
    fn start(node: String, lane: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let addr = listener.local_addr().expect("the relay's address").to_string();
        let (seen_tx, seen) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = Arc::new(Mutex::new(Some(go_rx)));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(primary) = conn else { return };
                let up = TcpStream::connect(&node).expect("the relay connects to the node");
                let (seen, go) = (seen_tx.clone(), go_rx.clone());
                std::thread::spawn(move || pass(primary, up, lane, seen, go));
            }
        });
        Relay { addr, seen, go }
    }
}

/// The test's go-ahead, taken by the first connection of the held lane.
type Go = Arc<Mutex<Option<mpsc::Receiver<()>>>>;

/// Passes one connection: the node's frames back as they come, the primary's frame by frame,
/// holding the `CopyEnd` of the first connection of lane `held` and what follows until the
/// test's go-ahead.
fn pass(mut primary: TcpStream, mut up: TcpStream, held: u16, seen: mpsc::Sender<Seen>, go_all: Go) {
    let (mut back_from, mut back_to) = (up.try_clone().expect("clone"), primary.try_clone().expect("clone"));
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut back_from, &mut back_to);
        let _ = back_to.shutdown(Shutdown::Write);
    });
    let mut body = Vec::new();
    let mut go: Option<mpsc::Receiver<()>> = None;
    let mut hold: Option<Vec<u8>> = None;
    loop {
        let h = match read_frame(&mut primary, 16 << 20, &mut body) {
            Ok(h) => h,
            Err(_) => {
                if let Some(held) = hold.take() {
                    let _ = seen.send(Seen::Closed);
                    let _ = go.take().map(|g| g.recv());
                    let _ = up.write_all(&held);
                }
                let _ = up.shutdown(Shutdown::Write);
                return;
            }
        };
        if h.kind == FrameKind::Hello && Hello::decode(&body).is_ok_and(|hello| hello.lane == held) {
            go = go_all.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        let mut frame = h.to_bytes().to_vec();
        frame.extend_from_slice(&body);
        match hold.as_mut() {
            Some(held) => {
                held.extend_from_slice(&frame);
                let _ = seen.send(Seen::After(h.kind));
                let _ = go.take().map(|g| g.recv());
                let held = hold.take().expect("held");
                if up.write_all(&held).is_err() {
                    return;
                }
            }
            None if h.kind == FrameKind::CopyEnd && go.is_some() => {
                hold = Some(frame);
                let _ = seen.send(Seen::Held);
            }
            None => {
                if up.write_all(&frame).is_err() {
                    return;
                }
            }
        }
    }
}

#[test]
fn a_close_right_after_a_copy_leaves_the_node_consistent() {
    let scratch = Scratch::new("copy-end");
    // One copy group for the whole region, on lane 0: lane 1 carries only CopyBegin and CopyEnd.
    let id = region(1 << 20);
    // No heartbeat is due on the idle lane while the test runs: the first frame after its CopyEnd
    // is one the primary sends because it closes.
    let heartbeat = Heartbeat { interval: Duration::from_secs(10), timeout: Duration::from_secs(30) };
    let mut opts = node_options(&scratch.dir.join("node"), "node", id, 1 << 20);
    opts.listen = "127.0.0.1:0".into();
    opts.heartbeat = heartbeat;
    std::fs::create_dir_all(&opts.dir).expect("make the node's folder");
    let node = Mirror::open(opts).expect("open the node").serve().expect("serve the node");
    let relay = Relay::start(node.addr().to_string(), 1);
    let path = scratch.dir.join("region");
    region_with_history(&path, id);

    let p = Primary::open(&primary_options(&path, &relay.addr, heartbeat)).expect("open the primary");
    assert_eq!(relay.seen.recv().expect("the relay runs"), Seen::Held, "lane 1's CopyEnd is on its way");
    let closing = std::thread::spawn(move || p.close());
    match relay.seen.recv().expect("the relay runs") {
        // The primary asks the node for its word before it ends the session.
        Seen::After(_) => {}
        // It ended the session: the node hears of that first.
        Seen::Closed => wait_for("the node to end the session", || node.status().session.is_none()),
        Seen::Held => unreachable!("one CopyEnd is held"),
    }
    relay.go.send(()).expect("let the held frames go");
    closing.join().expect("the closing thread").expect("the primary closes cleanly");
    wait_for("the node to end the session", || node.status().session.is_none());
    let status = node.status();
    assert!(status.consistent, "the node's copy is consistent once the primary has closed: {status:?}");
    node.shutdown();
}
