//! Tests of the checked stream and of the ratios over rounds.

use super::result::{medians, ResyncResult, Spread};
use super::stream::{checked_header, receive_checked};
use mojim_format::FRAME_HEADER_SIZE;

fn result(kind: &str, mb_per_s: f64) -> ResyncResult {
    ResyncResult {
        kind: kind.into(),
        bytes: 1,
        seconds: 1.0 / mb_per_s,
        mb_per_s,
        region_size: 1,
        changed_bytes: 0,
        lanes: 1,
        verified: String::new(),
        since_restart_s: None,
        open_s: None,
        map_s: None,
        cpu_s: None,
    }
}

#[test]
fn a_checked_stream_refuses_a_frame_that_is_not_the_one_expected() {
    let body: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let frame = |at: u64, body: &[u8]| [&checked_header(at, body)[..], body].concat();
    let mut buf = vec![0u8; body.len()];
    receive_checked(&mut &frame(8192, &body)[..], 8192, &mut buf).expect("the frame expected");
    assert_eq!(buf, body);

    let mut flipped = frame(8192, &body);
    flipped[FRAME_HEADER_SIZE + 100] ^= 1;
    let e = receive_checked(&mut &flipped[..], 8192, &mut buf).expect_err("a changed body");
    assert!(e.to_string().contains("frame for 8192") && e.to_string().contains("checksum"), "{e}");

    let e = receive_checked(&mut &frame(0, &body)[..], 8192, &mut buf).expect_err("another offset");
    assert!(e.to_string().contains("expected a Copy frame of 4096 bytes for 8192"), "{e}");
    let e = receive_checked(&mut &frame(8192, &body[..100])[..], 8192, &mut buf).expect_err("shorter");
    assert!(e.to_string().contains("of 100 for 8192"), "{e}");

    let mut header = frame(8192, &body);
    header[20] ^= 1;
    let e = receive_checked(&mut &header[..], 8192, &mut buf).expect_err("a changed header");
    assert!(e.to_string().contains("frame for 8192"), "{e}");

    let cut = frame(8192, &body);
    let e = receive_checked(&mut &cut[..cut.len() - 1], 8192, &mut buf).expect_err("a cut stream");
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
}

#[test]
fn the_spread_of_a_ratio_is_taken_round_by_round() {
    let rounds: Vec<Vec<ResyncResult>> = [(100.0, 90.0), (200.0, 100.0), (100.0, 70.0)]
        .iter()
        .map(|&(tcp, full)| vec![result("tcp", tcp), result("full", full)])
        .collect();
    let s = Spread::of(&rounds, "full", "tcp", 0.8).expect("every round has both kinds");
    assert_eq!(s, Spread { min: 0.5, median: 0.7, max: 0.9, meeting: 1 });
    // The medians' ratio can look better than most rounds: 90 / 100 here.
    let m = medians(&rounds);
    assert_eq!((m[0].mb_per_s, m[1].mb_per_s), (100.0, 90.0));
    assert_eq!(Spread::of(&rounds, "full", "bitmap", 0.8), None);
    assert_eq!(Spread::of(&[], "full", "tcp", 0.8), None);
}
