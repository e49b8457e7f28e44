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
//!
//! **Encrypted** (`[security] encrypt_placed`, [`RecordMac::encrypting`]): the body is the
//! plaintext of AES-256-GCM under the same key and nonce, with no additional data; the
//! ciphertext takes the body's place and the GCM tag the tag's. A lane's session either
//! encrypts every record or none (its Hello says which), so a nonce still serves one record
//! under a key. The mirror decrypts a body before it writes its header; the record then holds
//! the plaintext, and its tag is the tag of that plaintext's encryption, which whoever holds the
//! key checks by encrypting it again ([`RecordMac::verify_decrypted`]).

use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

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
    /// The bodies are encrypted, not only authenticated.
    encrypt: bool,
}

impl std::fmt::Debug for RecordMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordMac(.., encrypt: {})", self.encrypt)
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
        RecordMac { key: LessSafeKey::new(unbound), encrypt: false }
    }

    /// This key, sealing by encryption when `on` (`[security] encrypt_placed`), by a tag alone
    /// otherwise.
    pub fn encrypting(mut self, on: bool) -> RecordMac {
        self.encrypt = on;
        self
    }

    /// Whether the bodies sealed with this key are encrypted.
    pub fn encrypts(&self) -> bool {
        self.encrypt
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

    /// Encrypts `body`, frame `frame_index` of group `seq`, in place, and returns its tag.
    pub fn encrypt(&self, seq: u64, frame_index: u32, body: &mut [u8]) -> [u8; TAG_SIZE] {
        let tag = self
            .key
            .seal_in_place_separate_tag(Self::nonce(seq, frame_index), Aad::empty(), body)
            .expect("GCM seals up to 2^36 bytes");
        let mut out = [0u8; TAG_SIZE];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Decrypts `body`, frame `frame_index` of group `seq`, in place if `tag` is its tag
    /// (checked in constant time, before anything is decrypted). False: the bytes of `body`
    /// are then unspecified.
    pub fn decrypt(&self, seq: u64, frame_index: u32, body: &mut [u8], tag: &[u8; TAG_SIZE]) -> bool {
        let nonce = Self::nonce(seq, frame_index);
        self.key.open_in_place_separate_tag(nonce, Aad::empty(), Tag::from(*tag), body, 0..).is_ok()
    }

    /// Whether `tag` is the tag of the encryption of `plain`, frame `frame_index` of group
    /// `seq`: a record the mirror decrypted, checked again. `plain` is encrypted in place and,
    /// if the tag checks, decrypted back (true: it holds the plaintext again; false: its bytes
    /// are unspecified).
    pub fn verify_decrypted(
        &self,
        seq: u64,
        frame_index: u32,
        plain: &mut [u8],
        tag: &[u8; TAG_SIZE],
    ) -> bool {
        self.encrypt(seq, frame_index, plain);
        self.decrypt(seq, frame_index, plain, tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from hexadecimal digits (the NIST vectors').
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The tag is AES-256-GCM's over an empty plaintext with the body as additional data: the
    /// NIST GCM test vector of that shape (gcmEncryptExtIV256.rsp, [Keylen = 256] [IVlen = 96]
    /// [PTlen = 0] [AADlen = 128] [Taglen = 128], Count = 0), with its IV as seq and frame_index.
    #[test]
    fn the_tag_is_gmac_of_the_body_under_the_nonce_of_seq_and_frame() {
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

    /// An encrypted body is AES-256-GCM's encryption with no additional data: the NIST GCM test
    /// vector of that shape (gcmEncryptExtIV256.rsp, [Keylen = 256] [IVlen = 96] [PTlen = 128]
    /// [AADlen = 0] [Taglen = 128], Count = 0), with its IV as seq and frame_index.
    #[test]
    fn an_encrypted_body_is_aes_256_gcm_under_the_nonce_of_seq_and_frame() {
        let key: [u8; 32] =
            hex("31bdadd96698c204aa9ce1448ea94ae1fb4a9a0b3c9d773b51bb1822666b8f22").try_into().unwrap();
        let iv = hex("0d18e06c7c725ac9e362e1ce");
        let plain = hex("2db5168e932556f8089a0622981d017d");
        let cipher = hex("fa4362189661d163fcd6a56d8bf0405a");
        let expected: [u8; 16] = hex("d636ac1bbedd5cc3ee727dc2ab4a9489").try_into().unwrap();
        let seq = u64::from_le_bytes(iv[..8].try_into().unwrap());
        let frame_index = u32::from_le_bytes(iv[8..].try_into().unwrap());
        let mac = RecordMac::new(&key).encrypting(true);
        assert!(mac.encrypts() && !RecordMac::new(&key).encrypts());
        let mut body = plain.clone();
        assert_eq!(mac.encrypt(seq, frame_index, &mut body), expected);
        assert_eq!(body, cipher);
        assert!(mac.decrypt(seq, frame_index, &mut body, &expected));
        assert_eq!(body, plain);
        assert!(mac.verify_decrypted(seq, frame_index, &mut body, &expected));
        assert_eq!(body, plain, "checked, and the plaintext again");
    }

    #[test]
    fn a_changed_ciphertext_plaintext_tag_group_or_key_fails() {
        let mac = RecordMac::new(&[7u8; 32]).encrypting(true);
        let plain = vec![0x5au8; 4096];
        let mut body = plain.clone();
        let tag = mac.encrypt(9, 2, &mut body);
        assert_ne!(body, plain);
        let cipher = body.clone();
        let opens = |m: &RecordMac, seq: u64, frame: u32, bytes: &[u8], tag: &[u8; 16]| {
            let mut b = bytes.to_vec();
            m.decrypt(seq, frame, &mut b, tag)
        };
        assert!(opens(&mac, 9, 2, &cipher, &tag));
        let mut changed = cipher.clone();
        changed[100] ^= 1;
        assert!(!opens(&mac, 9, 2, &changed, &tag));
        let mut forged = tag;
        forged[0] ^= 1;
        assert!(!opens(&mac, 9, 2, &cipher, &forged));
        assert!(!opens(&mac, 10, 2, &cipher, &tag), "another group");
        assert!(!opens(&mac, 9, 3, &cipher, &tag), "another frame");
        assert!(!opens(&RecordMac::new(&[8u8; 32]), 9, 2, &cipher, &tag), "another key");
        // The plaintext the mirror left in its log, checked again: changed, it fails.
        let mut again = plain.clone();
        again[4095] ^= 0x80;
        assert!(!mac.verify_decrypted(9, 2, &mut again, &tag));
        let mut again = plain.clone();
        assert!(mac.verify_decrypted(9, 2, &mut again, &tag));
        // A GMAC tag of the plaintext is not the tag of its encryption, and the other way.
        assert!(!mac.verify_decrypted(9, 2, &mut plain.clone(), &mac.tag(9, 2, &plain)));
        assert!(!mac.verify(9, 2, &plain, &tag));
    }
}
