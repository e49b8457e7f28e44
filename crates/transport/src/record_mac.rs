//! The MAC of a placed record: a record whose body a primary wrote straight into its mirror's
//! log (shared memory, UCX puts) never travels through TLS, so on a TLS connection each one
//! carries a tag that the mirror checks where the record lies before it acknowledges it
//! (docs/FORMAT.md §2.4, docs/SECURITY.md).
//!
//! - **Key**: 32 bytes from the lane's TLS session's exporter (RFC 5705, RFC 8446 §7.5), label
//!   [`RECORD_MAC_LABEL`], context the session id (u64) then the lane (u16), little-endian.
//!   Both sides derive it right after the handshake; it never leaves the process.
//! - **Tag**: GMAC, AES-256-GCM with no plaintext and the record's body as the additional
//!   data; the 16-byte GCM tag is the record's tag.
//! - **Nonce** (12 bytes): the group's `seq` (u64) then the record's `frame_index` (u32),
//!   little-endian. A key serves one lane of one session, and a lane sends a group's frame once
//!   per session, so no nonce repeats under a key. A `Copied` record is frame 0 of its own group.
//!
//! The header needs no tag: it is the doorbell, which travels through TLS. The tag binds the
//! body to the group and frame the header names, so a body cannot be moved to another record
//! either.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

/// The exporter label of placed records' keys.
pub const RECORD_MAC_LABEL: &[u8] = b"EXPORTER-mojim-placed-record-v1";
/// Bytes of the key.
pub const RECORD_KEY_SIZE: usize = 32;
/// Bytes of a tag (the header's `MAC` flag says one follows the body).
pub const TAG_SIZE: usize = mojim_format::frame::RECORD_TAG_SIZE;
const _: () = assert!(TAG_SIZE == 16);

/// A lane's key for placed records' tags.
#[derive(Clone)]
pub struct RecordMac {
    key: LessSafeKey,
}

impl std::fmt::Debug for RecordMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordMac(..)")
    }
}

impl RecordMac {
    /// The exporter's context for lane `lane` of session `session`.
    pub fn context(session: u64, lane: u16) -> [u8; 10] {
        let mut c = [0u8; 10];
        c[..8].copy_from_slice(&session.to_le_bytes());
        c[8..].copy_from_slice(&lane.to_le_bytes());
        c
    }

    /// The key made from `key`, 32 bytes the exporter gave.
    pub fn new(key: &[u8; RECORD_KEY_SIZE]) -> RecordMac {
        let unbound = UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte key is an AES-256-GCM key");
        RecordMac { key: LessSafeKey::new(unbound) }
    }

    fn nonce(seq: u64, frame_index: u32) -> Nonce {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&seq.to_le_bytes());
        n[8..].copy_from_slice(&frame_index.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    }

    /// The tag of `body` as frame `frame_index` of group `seq`.
    pub fn tag(&self, seq: u64, frame_index: u32, body: &[u8]) -> [u8; TAG_SIZE] {
        let tag = self
            .key
            .seal_in_place_separate_tag(Self::nonce(seq, frame_index), Aad::from(body), &mut [])
            .expect("GCM seals up to 2^36 bytes of additional data");
        let mut out = [0u8; TAG_SIZE];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Whether `tag` is the tag of `body` as frame `frame_index` of group `seq` (compared in
    /// constant time).
    pub fn verify(&self, seq: u64, frame_index: u32, body: &[u8], tag: &[u8; TAG_SIZE]) -> bool {
        let mut t = *tag;
        self.key.open_in_place(Self::nonce(seq, frame_index), Aad::from(body), &mut t).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tag is AES-256-GCM's over an empty plaintext with the body as additional data: the
    /// NIST GCM test vector of that shape (gcmEncryptExtIV256.rsp, [Keylen = 256] [IVlen = 96]
    /// [PTlen = 0] [AADlen = 128] [Taglen = 128], Count = 0), with its IV as seq and frame_index.
    #[test]
    fn the_tag_is_gmac_of_the_body_under_the_nonce_of_seq_and_frame() {
        let hex = |s: &str| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
        };
        let key: [u8; 32] =
            hex("78dc4e0aaf52d935c3c01eea57428f00ca1fd475f5da86a49c8dd73d68c8e223").try_into().unwrap();
        let iv = hex("d79cf22d504cc793c3fb6c8a");
        let aad = hex("b96baa8c1c75a671bfb2d08d06be5f36");
        let expected: [u8; 16] = hex("3e5d486aa2e30b22e040b85723a06e76").try_into().unwrap();
        let seq = u64::from_le_bytes(iv[..8].try_into().unwrap());
        let frame_index = u32::from_le_bytes(iv[8..].try_into().unwrap());
        let mac = RecordMac::new(&key);
        assert_eq!(mac.tag(seq, frame_index, &aad), expected);
        assert!(mac.verify(seq, frame_index, &aad, &expected));
    }

    #[test]
    fn a_changed_body_tag_group_frame_or_key_fails() {
        let mac = RecordMac::new(&[7u8; 32]);
        let body = vec![0x5au8; 4096];
        let tag = mac.tag(9, 2, &body);
        assert!(mac.verify(9, 2, &body, &tag));
        let mut changed = body.clone();
        changed[100] ^= 1;
        assert!(!mac.verify(9, 2, &changed, &tag));
        let mut forged = tag;
        forged[15] ^= 0x80;
        assert!(!mac.verify(9, 2, &body, &forged));
        assert!(!mac.verify(10, 2, &body, &tag), "another group");
        assert!(!mac.verify(9, 3, &body, &tag), "another frame");
        assert!(!RecordMac::new(&[8u8; 32]).verify(9, 2, &body, &tag), "another key");
        assert_eq!(RecordMac::context(0x0102_0304_0506_0708, 0x0a0b), [8, 7, 6, 5, 4, 3, 2, 1, 0x0b, 0x0a]);
    }
}
