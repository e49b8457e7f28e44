//! Copy-then-check: applying a group from a log that a peer can write at any time.
//!
//! A lane's log offered over UCX stays registered for the peer's puts while the connection
//! lives: the peer can change a record's bytes after the lane checked and acknowledged it. The
//! checkpointer then applies nothing straight from the log: it copies the group's record bodies
//! into this buffer, checks each body's checksum on the copy, and writes only from the copy. A
//! group whose records no longer check is applied not at all.
//!
//! A record placed over TLS carries a tag (docs/FORMAT.md §2.4); while this process has the key
//! of the session that placed it, the tag is checked on the copy too, so a record changed by
//! someone without the key (a recomputed checksum is no obstacle to a writer) is not applied.
//! A record whose body was placed encrypted lies decrypted in the log: its tag is checked by
//! encrypting the copy again (and decrypting it back once the tag holds). A `Copied` record is
//! checked the same way (header, checksum, group, tag), though it writes nothing.
//!
//! The copy is laid out as the group's sealed form (`group_seal`: each record's header as a
//! backup gets it, then its body), and sealed under this node's own key once every record
//! checks: the forwarder sends a backup only what matches that seal.

use super::group_seal::{push_record, record_in_group, GroupSealer, Seal};
use super::log_changed::{Body, LogChanged};
use mojim_core::checkpoint::GroupRef;
use mojim_format::checksum::crc32c;
use mojim_format::log::{record_at_verified, RecordArea};
use mojim_format::FrameKind;
use mojim_region::MapSlice;
use mojim_transport::record_mac::TAG_SIZE;
use mojim_transport::RecordMac;

/// The applier's buffer for one group's bodies, reused from group to group (it grows to the
/// largest group once).
#[derive(Default)]
pub(crate) struct Scratch {
    /// The group's sealed form: each record's header (as sealed), then its body.
    bytes: Vec<u8>,
    /// `(data offset, start in bytes, len)` of each `Data` body copied.
    writes: Vec<(u64, usize, usize)>,
    /// The seals of the groups written in this pass, for the forwarder (handed over once the
    /// data area is no longer held: see the lock order in lib.rs).
    pub seals: Vec<(u64, Seal)>,
}

impl Scratch {
    /// Copies group `g`'s record bodies out of `area` and checks each, on the copy, against its
    /// header (also copied out), its tag under the key `macs` holds for its session, if any, and
    /// that it lies within a data area of `region_size` bytes; a `Copied` record's list is
    /// checked so too, and writes nothing. Returns the seal of what was checked, under
    /// `sealer`'s key. Err: what no longer holds (the peer changed the log after the lane
    /// checked it).
    pub fn copy_group(
        &mut self,
        area: MapSlice<'_>,
        g: &GroupRef,
        max_body: u32,
        region_size: u64,
        macs: &[(u64, RecordMac)],
        sealer: &GroupSealer,
    ) -> Result<Seal, LogChanged> {
        self.bytes.clear();
        self.writes.clear();
        let mut pos = g.start_pos;
        while pos < g.end_pos {
            let rec = record_in_group(&area, g, pos, max_body)?;
            pos = rec.end_pos();
            let h = rec.header;
            let data = match h.kind {
                FrameKind::Data => true,
                FrameKind::Copied => false,
                _ => continue,
            };
            let len = h.body_len as usize;
            let outside = data && h.offset.checked_add(len as u64).is_none_or(|end| end > region_size);
            if h.seq != g.seq || outside {
                return Err(LogChanged::Misplaced {
                    pos: rec.pos,
                    seq: h.seq,
                    len: len as u64,
                    offset: h.offset,
                });
            }
            let body = if data {
                Body::Data { len: len as u64, offset: h.offset }
            } else {
                Body::CopiedList { len: len as u64 }
            };
            let what = body;
            let start = push_record(&mut self.bytes, &h).start;
            let body = &mut self.bytes[start..];
            area.copy_out(rec.body_at, body);
            if h.check_checksum(len, crc32c(body)).is_err() {
                return Err(LogChanged::Checksum { pos: rec.pos, body: what });
            }
            if let Some((_, mac)) = macs.iter().find(|(s, _)| *s == h.session) {
                let mut tag = [0u8; TAG_SIZE];
                if h.has_mac() {
                    area.copy_out(rec.body_at + len, &mut tag);
                }
                // A body the mirror decrypted holds the plaintext: its tag is its encryption's.
                let checks = h.has_mac()
                    && if mac.encrypts() {
                        mac.verify_decrypted(h.seq, h.frame_index, body, &tag)
                    } else {
                        mac.verify(h.seq, h.frame_index, body, &tag)
                    };
                if !checks {
                    return Err(LogChanged::Mac { pos: rec.pos, body: what });
                }
            }
            // A Copied group writes nothing here (its bytes landed as it came): its list is
            // checked, and sealed, as what the backups are sent is read from it.
            if data {
                self.writes.push((h.offset, start, len));
            }
        }
        Ok(sealer.seal(g.seq, &self.bytes))
    }

    /// The bodies of the last group copied: `(data offset, bytes)`.
    pub fn writes(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.writes.iter().map(|&(off, start, len)| (off, &self.bytes[start..start + len]))
    }
}

/// The data ranges `(offset, len)` group `g`'s records in `area` name now, without a panic when
/// a record is no longer one: Err says where (the peer changed the log).
pub(crate) fn group_ranges(
    area: MapSlice<'_>,
    g: &GroupRef,
    max_body: u32,
    mut each: impl FnMut(u64, usize),
) -> Result<(), LogChanged> {
    let mut pos = g.start_pos;
    while pos < g.end_pos {
        let rec = record_at_verified(&area, pos, max_body).ok_or(LogChanged::NotARecord { pos })?;
        if rec.header.kind == FrameKind::Data {
            each(rec.header.offset, rec.header.body_len as usize);
        }
        pos = rec.end_pos();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_core::encode::{placed_copied_header, placed_data_header, sealed, FramePlan, SessionTag};
    use mojim_format::log::{record_size, LOG_HEADER_SIZE};
    use mojim_region::MappedFile;

    /// A log mapping holding group 1: two records of `bodies` at data offsets 0 and 4096.
    fn log_with(bodies: [&[u8]; 2]) -> (crate::test_peer::Scratch, MappedFile, GroupRef) {
        let dir = crate::test_peer::Scratch::new("copy-check");
        let map =
            MappedFile::create(&dir.dir.join("log"), (LOG_HEADER_SIZE + (1 << 16)) as u64).expect("mapped");
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut pos = 0u64;
        for (i, body) in bodies.iter().enumerate() {
            let plan = FramePlan {
                offset: 4096 * i as u64,
                len: body.len() as u32,
                frame_index: i as u32,
                end: i == 1,
            };
            let h = placed_data_header(tag, 1, plan, crc32c(body), pos);
            map.write(LOG_HEADER_SIZE + pos as usize, &h);
            map.write(LOG_HEADER_SIZE + pos as usize + 64, body);
            pos += record_size(body.len() as u64);
        }
        let g = GroupRef::data(1, 0, 0, pos, 200);
        (dir, map, g)
    }

    #[test]
    fn a_group_that_still_checks_is_copied_whole() {
        let (_dir, map, g) = log_with([&[1u8; 100], &[2u8; 100]]);
        let mut s = Scratch::default();
        let area = map.view(LOG_HEADER_SIZE, 1 << 16);
        s.copy_group(area, &g, 1 << 20, 1 << 20, &[], &GroupSealer::new()).expect("checks");
        let got: Vec<(u64, Vec<u8>)> = s.writes().map(|(o, b)| (o, b.to_vec())).collect();
        assert_eq!(got, vec![(0, vec![1u8; 100]), (4096, vec![2u8; 100])]);
        // The copy is the group's sealed form: the forwarder's copy of the same log checks
        // against the seal made here.
        let sealer = GroupSealer::new();
        let seal = s.copy_group(area, &g, 1 << 20, 1 << 20, &[], &sealer).expect("checks");
        let mut form = Vec::new();
        crate::group_seal::copy_form(area, &g, 1 << 20, &mut form).expect("a group");
        assert!(sealer.verify(g.seq, &form, &seal));
    }

    /// Writes a sealed record of `body` at log position `pos` of `map` (its header `header`,
    /// tag `tag` after its body) and returns the position after it.
    fn put_sealed(map: &MappedFile, pos: u64, header: [u8; 64], body: &[u8], tag: [u8; 16]) -> u64 {
        let at = LOG_HEADER_SIZE + pos as usize;
        map.write(at, &sealed(header));
        map.write(at + 64, body);
        map.write(at + 64 + body.len(), &tag);
        pos + record_size(body.len() as u64 + 16)
    }

    /// The header of the record at `pos` of `map`, its body's checksum made anew for `body`:
    /// what a writer without the key can do.
    fn rewrite(map: &MappedFile, pos: u64, body: &[u8]) {
        let at = LOG_HEADER_SIZE + pos as usize;
        let mut hb = [0u8; 64];
        map.read(at, &mut hb);
        let mut h = mojim_format::FrameHeader::decode(&hb).expect("a header");
        h.body_checksum = crc32c(body);
        map.write(at, &h.to_bytes());
        map.write(at + 64, body);
    }

    /// A body the mirror decrypted lies in the log as plaintext, its tag the tag of its
    /// encryption: the copy checks under the session's key, and a plaintext changed after (its
    /// checksum made anew) does not.
    #[test]
    fn a_decrypted_body_is_checked_by_its_encryptions_tag() {
        let dir = crate::test_peer::Scratch::new("copy-check-enc");
        let map =
            MappedFile::create(&dir.dir.join("log"), (LOG_HEADER_SIZE + (1 << 16)) as u64).expect("mapped");
        let tag = SessionTag { session: 7, epoch: 1, lane: 0 };
        let mac = RecordMac::new(&[3; 32]).encrypting(true);
        let body = vec![0x42u8; 300];
        let mut cipher = body.clone();
        let seal = mac.encrypt(1, 0, &mut cipher);
        let plan = FramePlan { offset: 4096, len: 300, frame_index: 0, end: true };
        let end = put_sealed(&map, 0, placed_data_header(tag, 1, plan, crc32c(&body), 0), &body, seal);
        let g = GroupRef::data(1, 0, 0, end, 300);
        let macs = [(7, mac.clone())];
        let mut s = Scratch::default();
        s.copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 1 << 20, &macs, &GroupSealer::new())
            .expect("checks");
        let got: Vec<(u64, Vec<u8>)> = s.writes().map(|(o, b)| (o, b.to_vec())).collect();
        assert_eq!(got, vec![(4096, body.clone())], "the plaintext, as it lies");
        // A GMAC tag would not do: the tag is the encryption's.
        let plain = [(7, RecordMac::new(&[3; 32]))];
        assert!(s
            .copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 1 << 20, &plain, &GroupSealer::new())
            .is_err());
        let mut changed = body.clone();
        changed[299] ^= 1;
        rewrite(&map, 0, &changed);
        let err = s
            .copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 1 << 20, &macs, &GroupSealer::new())
            .unwrap_err();
        assert!(
            matches!(err, LogChanged::Mac { pos: 0, body: Body::Data { len: 300, offset: 4096 } }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("record MAC") && err.to_string().contains("no longer checks"),
            "{err}"
        );
    }

    /// A sealed `Copied` record, its list changed after it was checked and its checksum made
    /// anew (what a writer without the key can do), fails its group: its tag is checked on the
    /// copy as a `Data` record's is, encrypted or not.
    #[test]
    fn a_copied_record_changed_after_it_was_checked_fails_its_group() {
        for encrypt in [false, true] {
            let dir = crate::test_peer::Scratch::new("copy-check-copied");
            let map = MappedFile::create(&dir.dir.join("log"), (LOG_HEADER_SIZE + (1 << 16)) as u64)
                .expect("mapped");
            let tag = SessionTag { session: 9, epoch: 1, lane: 0 };
            let mac = RecordMac::new(&[5; 32]).encrypting(encrypt);
            let mut list = [0u8; 16];
            list[8..].copy_from_slice(&4096u64.to_le_bytes());
            let seal = if encrypt { mac.encrypt(3, 0, &mut list.clone()) } else { mac.tag(3, 0, &list) };
            let header = placed_copied_header(tag, 3, 16, crc32c(&list), 0);
            let end = put_sealed(&map, 0, header, &list, seal);
            let g = GroupRef::data(3, 0, 0, end, 0);
            let macs = [(9, mac)];
            let mut s = Scratch::default();
            s.copy_group(
                map.view(LOG_HEADER_SIZE, 1 << 16),
                &g,
                1 << 20,
                1 << 20,
                &macs,
                &GroupSealer::new(),
            )
            .expect("checks");
            assert_eq!(s.writes().count(), 0, "a Copied group writes nothing");
            let mut changed = list;
            changed[15] = 0x10;
            rewrite(&map, 0, &changed);
            let err = s
                .copy_group(
                    map.view(LOG_HEADER_SIZE, 1 << 16),
                    &g,
                    1 << 20,
                    1 << 20,
                    &macs,
                    &GroupSealer::new(),
                )
                .unwrap_err();
            assert_eq!(err, LogChanged::Mac { pos: 0, body: Body::CopiedList { len: 16 } }, "{encrypt}");
            assert!(err.to_string().contains("a Copied list of 16 bytes"), "{encrypt}: {err}");
        }
    }

    #[test]
    fn a_body_changed_after_it_was_checked_fails_the_whole_group() {
        let (_dir, map, g) = log_with([&[1u8; 100], &[2u8; 100]]);
        // The second body changes under its header.
        let second = LOG_HEADER_SIZE + record_size(100) as usize + 64;
        map.write(second, &[9u8; 10]);
        let mut s = Scratch::default();
        let err = s
            .copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 1 << 20, &[], &GroupSealer::new())
            .unwrap_err();
        assert!(
            matches!(err, LogChanged::Checksum { body: Body::Data { len: 100, offset: 4096 }, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("no longer matches its checksum"), "{err}");
        // Past the region's end, or a header that is no longer one.
        let (_dir, map, g) = log_with([&[1u8; 100], &[2u8; 100]]);
        let err = s
            .copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 4096, &[], &GroupSealer::new())
            .unwrap_err();
        assert!(matches!(err, LogChanged::Misplaced { offset: 4096, len: 100, .. }), "{err:?}");
        map.write(LOG_HEADER_SIZE, &[0xff; 8]);
        let err = s
            .copy_group(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, 1 << 20, &[], &GroupSealer::new())
            .unwrap_err();
        assert_eq!(err, LogChanged::NotARecord { pos: 0 });
        assert!(group_ranges(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, |_, _| {}).is_err());
    }
}
