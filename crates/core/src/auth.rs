//! Challenge–response proofs of the cluster secret (HMAC-SHA256), in both directions.
//!
//! The connecting side proves first, over its Hello (which holds its fresh nonce) and the
//! accepting side's fresh nonce; only once that proof checks does the accepting side prove,
//! over the same bytes. So an anonymous peer gets nothing that depends on the secret. Each
//! proof carries its own label, so neither can be replayed as the other.

use hmac::{Hmac, Mac};
use mojim_format::handshake::{NONCE_SIZE, PROOF_SIZE};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const SERVER_LABEL: &[u8] = b"mojim v3 server proof";
const CLIENT_LABEL: &[u8] = b"mojim v3 client proof";

fn mac(secret: &[u8], label: &[u8], hello: &[u8], nonces: &[&[u8; NONCE_SIZE]]) -> HmacSha256 {
    // HMAC takes keys of any length, so this cannot fail.
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    m.update(label);
    m.update(hello);
    for n in nonces {
        m.update(&n[..]);
    }
    m
}

/// The accepting side's proof.
pub fn server_proof(secret: &[u8], hello: &[u8], server_nonce: &[u8; NONCE_SIZE]) -> [u8; PROOF_SIZE] {
    mac(secret, SERVER_LABEL, hello, &[server_nonce]).finalize().into_bytes().into()
}

/// The connecting side's proof.
pub fn client_proof(secret: &[u8], hello: &[u8], server_nonce: &[u8; NONCE_SIZE]) -> [u8; PROOF_SIZE] {
    mac(secret, CLIENT_LABEL, hello, &[server_nonce]).finalize().into_bytes().into()
}

/// Checks a server proof in constant time.
pub fn verify_server(secret: &[u8], hello: &[u8], server_nonce: &[u8; NONCE_SIZE], proof: &[u8]) -> bool {
    mac(secret, SERVER_LABEL, hello, &[server_nonce]).verify_slice(proof).is_ok()
}

/// Checks a client proof in constant time.
pub fn verify_client(secret: &[u8], hello: &[u8], server_nonce: &[u8; NONCE_SIZE], proof: &[u8]) -> bool {
    mac(secret, CLIENT_LABEL, hello, &[server_nonce]).verify_slice(proof).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_with_the_same_secret_and_direction() {
        let hello = [1u8; 96];
        let n = [2u8; 32];
        let p = server_proof(b"s3cret", &hello, &n);
        assert!(verify_server(b"s3cret", &hello, &n, &p));
        assert!(!verify_server(b"other", &hello, &n, &p));
        assert!(!verify_client(b"s3cret", &hello, &n, &p), "a server proof is not a client proof");
        let mut n2 = n;
        n2[0] ^= 1;
        assert!(!verify_server(b"s3cret", &hello, &n2, &p));
    }
}
