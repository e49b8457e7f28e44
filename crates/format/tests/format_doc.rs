//! docs/FORMAT.md against the code: every example's bytes decode to what the text says they
//! are, and every size and version the text states is the code's. The document cannot drift
//! from the code without this failing.

use mojim_format::frame::{FLAG_ENCRYPTED, FLAG_END, FLAG_MAC};
use mojim_format::handshake::{
    Request, CHALLENGE_SIZE, HELLO_ENCRYPT, HELLO_PLACE, HELLO_SIZE, PROOF_SIZE, REFUSE_MAX, REQUEST_SIZE,
    WELCOME_SIZE,
};
use mojim_format::log::{
    tail_of, tail_slot, LogHeader, LOG_HEADER_USED, LOG_VERSION, LOG_VERSION_UNCHECKED_TAIL,
    TAIL_SLOT_OFFSETS, TAIL_SLOT_SIZE,
};
use mojim_format::region::REGION_VERSION;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE, PROTOCOL_VERSION};

const DOC: &str = include_str!("../../../docs/FORMAT.md");

/// The bytes of every hex example (`0000: xx xx ...   comment` lines), in document order, each
/// with the `Example:` line before it.
fn examples() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut title = String::new();
    let mut in_block = false;
    for line in DOC.lines() {
        if line.starts_with("Example:") {
            title = line.to_string();
        }
        let is_dump =
            line.len() > 6 && line.as_bytes()[4] == b':' && line[..4].chars().all(|c| c.is_ascii_hexdigit());
        if !is_dump {
            in_block = false;
            continue;
        }
        let offset = usize::from_str_radix(&line[..4], 16).expect("a hex offset");
        if !in_block {
            assert_eq!(offset, 0, "an example starts at offset 0: {line}");
            out.push((title.clone(), Vec::new()));
            in_block = true;
        }
        let bytes = &mut out.last_mut().expect("a block").1;
        assert_eq!(offset, bytes.len(), "offsets run on without gaps: {line}");
        let hex = line[6..].split("   ").next().expect("the bytes before the comment");
        bytes.extend(
            hex.split(' ')
                .map(|b| u8::from_str_radix(b, 16).unwrap_or_else(|_| panic!("hex byte {b:?} in {line}"))),
        );
    }
    out
}

#[test]
fn every_example_decodes_to_what_the_text_says() {
    let ex = examples();
    assert_eq!(ex.len(), 3, "FORMAT.md's examples: {:?}", ex.iter().map(|e| &e.0).collect::<Vec<_>>());

    let (title, ack) = &ex[0];
    assert!(title.contains("`Ack` for group 3, lane 1, epoch 2, session `0x1122334455667788`"), "{title}");
    let hb: &[u8; FRAME_HEADER_SIZE] = ack.as_slice().try_into().expect("a 64-byte frame header");
    let h = FrameHeader::decode(hb).expect("the Ack example decodes");
    assert_eq!(
        (h.kind, h.lane, h.epoch, h.seq, h.session, h.body_len, h.log_pos),
        (FrameKind::Ack, 1, 2, 3, 0x1122_3344_5566_7788, 0, 0)
    );
    assert_eq!(&h.to_bytes(), hb, "the example is the one encoding of that header");

    let (title, req) = &ex[1];
    assert!(
        title.contains("a `backup_add` request for `10.0.0.3:7070` (66 bytes: 24, then 42 of JSON)"),
        "{title}"
    );
    let json = r#"{"op":"backup_add","addr":"10.0.0.3:7070"}"#;
    assert_eq!(Request::decode(req), Ok(Request::Command(json.into())), "the backup_add example decodes");
    assert_eq!((req.len(), json.len()), (66, 42));
    assert_eq!(
        &Request::Command(json.into()).encode(),
        req,
        "the example is the one encoding of that request"
    );

    let (title, log) = &ex[2];
    assert!(
        title.contains(
            "lane 1 of region `ab ab ...`, capacity 1 MiB, slot 0 holding `tail_pos` = 128 and slot 1"
        ),
        "{title}"
    );
    let h = LogHeader::decode(log).expect("the log header example decodes");
    assert_eq!(h, LogHeader { region_uuid: [0xab; 16], lane: 1, capacity: 1 << 20 });
    assert_eq!(tail_of(log), Ok(128), "the larger of the two");
    // The one encoding of that header and those slots.
    let mut page = vec![0u8; LOG_HEADER_USED];
    h.encode(&mut page);
    let crc = u32::from_le_bytes(page[12..16].try_into().expect("4 bytes"));
    for (slot, pos) in [(0, 128), (1, 64)] {
        let at = TAIL_SLOT_OFFSETS[slot];
        page[at..at + TAIL_SLOT_SIZE].copy_from_slice(&tail_slot(crc, pos));
    }
    assert_eq!(log, &page, "the example is what encode and the slots write");
}

/// The line of the document that contains `what`, or a failure naming it.
fn line_with(what: &str) -> &'static str {
    DOC.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("FORMAT.md has no line with {what:?}"))
}

#[test]
fn sizes_and_versions_are_the_codes() {
    for (heading, size) in [
        ("### 3.1 Hello", HELLO_SIZE),
        ("### 3.2 Challenge", CHALLENGE_SIZE),
        ("### 3.3 Proof", PROOF_SIZE),
        ("### 3.4 Welcome", WELCOME_SIZE),
        ("### 3.6 Request", REQUEST_SIZE),
    ] {
        let l = line_with(heading);
        assert!(l.starts_with(&format!("{heading} ({size} bytes")), "{l:?}: the code's size is {size}");
    }
    assert!(line_with("### 3.5 Refuse").starts_with(&format!("### 3.5 Refuse (4 to {REFUSE_MAX} bytes)")));
    // The summary table at the top, in the headings' order.
    let row = line_with("[Hello](#31-hello");
    let sizes =
        format!("{HELLO_SIZE}, {CHALLENGE_SIZE}, {PROOF_SIZE}, {WELCOME_SIZE}, 4..={REFUSE_MAX} bytes");
    assert!(row.contains(&sizes), "{row:?} should say {sizes:?}");
    for (name, size) in [
        ("hello", HELLO_SIZE),
        ("challenge", CHALLENGE_SIZE),
        ("proof", PROOF_SIZE),
        ("welcome", WELCOME_SIZE),
    ] {
        assert!(
            row.contains(&format!(
                "(#3{}-{name}-{size}-bytes)",
                1 + ["hello", "challenge", "proof", "welcome"].iter().position(|n| *n == name).unwrap()
            )),
            "{row:?}: link to {name}"
        );
    }
    assert!(line_with("| 6 | `Welcome` |").contains(&format!("(#34-welcome-{WELCOME_SIZE}-bytes)")));
    // Versions, where the conventions name them and where each format's table does.
    assert!(line_with("Frames carry `PROTOCOL_VERSION`").contains(&format!("(= {PROTOCOL_VERSION})")));
    assert!(line_with("`LOG_VERSION` (=").contains(&format!("`LOG_VERSION` (= {LOG_VERSION})")));
    assert!(line_with("`REGION_VERSION` (=").contains(&format!("`REGION_VERSION` (= {REGION_VERSION})")));
    assert!(
        line_with("| 10 | 1 | `version` |").contains(&format!("`PROTOCOL_VERSION` = {PROTOCOL_VERSION} "))
    );
    assert!(line_with("| 8 | 4 | `version` | `LOG_VERSION`").contains(&format!("= {LOG_VERSION} ")));
    assert!(line_with("`LOG_VERSION_UNCHECKED_TAIL`")
        .starts_with(&format!("**Version {LOG_VERSION_UNCHECKED_TAIL}**")));
    for (slot, at) in TAIL_SLOT_OFFSETS.iter().enumerate() {
        let row = format!("| {at} | {TAIL_SLOT_SIZE} | tail slot {slot} |");
        line_with(&row);
    }
    assert!(line_with("`LogHeader::encode` writes bytes 0..").contains(&format!("0..{LOG_HEADER_USED} ")));
    assert!(line_with("| 8 | 4 | `version` | `REGION_VERSION`").contains(&format!("= {REGION_VERSION} ")));
}

/// The flag bits the header's and the Hello's tables name are the code's, and what a decoder
/// refuses is what the text says.
#[test]
fn flag_bits_are_the_codes() {
    let row = line_with("| 12 | 1 | `flags` |");
    for (bit, name, value) in [(0, "END", FLAG_END), (1, "MAC", FLAG_MAC), (2, "ENCRYPTED", FLAG_ENCRYPTED)] {
        assert_eq!(value, 1 << bit, "{name}");
        assert!(row.contains(&format!("bit {bit} `{name}`")), "{row:?} should name bit {bit} {name}");
    }
    assert!(row.contains("bits 3..7 must be 0"), "{row:?}");
    let row = line_with("| 6 | 2 | `flags` |");
    for (bit, name, value) in [(0, "PLACE", HELLO_PLACE), (1, "ENCRYPT", HELLO_ENCRYPT)] {
        assert_eq!(value, 1 << bit, "{name}");
        assert!(row.contains(&format!("bit {bit} `{name}`")), "{row:?} should name bit {bit} {name}");
    }
    // The decoder refuses what the text says it refuses: ENCRYPTED without MAC, ENCRYPT
    // without PLACE.
    let mut h = FrameHeader::new(FrameKind::Data);
    h.flags = FLAG_ENCRYPTED;
    assert!(FrameHeader::decode(&h.to_bytes()).is_err());
    assert!(line_with("5. `flags` has no bit but").contains("`ENCRYPTED` only with `MAC`"));
    let mut hello = [0u8; HELLO_SIZE];
    hello[0] = 1;
    hello[6] = HELLO_ENCRYPT as u8;
    assert!(mojim_format::handshake::Hello::decode(&hello).is_err());
    assert!(line_with("Decode rejects a size other than 96").contains("`ENCRYPT` without `PLACE`"));
}

#[test]
fn sections_are_numbered_in_order() {
    let mut last = (0u32, 0u32);
    for l in DOC.lines().filter(|l| l.starts_with("## ") || l.starts_with("### ")) {
        let num = l.split_whitespace().nth(1).expect("a number after the hashes");
        let mut parts =
            num.trim_end_matches('.').split('.').map(|p| p.parse::<u32>().expect("a section number"));
        let major = parts.next().expect("a major number");
        let minor = parts.next().unwrap_or(0);
        let ok = if minor == 0 { major == last.0 + 1 } else { major == last.0 && minor == last.1 + 1 };
        assert!(ok, "{l:?} follows section {}.{}", last.0, last.1);
        last = (major, minor);
    }
}
