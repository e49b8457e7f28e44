//! A page key's value: the page's 4096 bytes, then a check that ties them to the page and the
//! commit that wrote them, so that recovery finds a page changed in the server behind the
//! backend's back (or a value moved from another key) and names it.

use crate::layout::PAGE;
use mojim_format::checksum::{crc32c, crc32c_append};

/// Bytes of a page key's value: the page, then its check (u32, little-endian).
pub(super) const VALUE_LEN: usize = PAGE as usize + 4;

/// The check of page `page` as commit `version` wrote it: CRC32C of the 4096 bytes, then
/// `page` and `version` (u64 each, little-endian).
pub(super) fn check(bytes: &[u8], page: u64, version: u64) -> u32 {
    debug_assert_eq!(bytes.len() as u64, PAGE);
    let crc = crc32c_append(crc32c(bytes), &page.to_le_bytes());
    crc32c_append(crc, &version.to_le_bytes())
}

/// Checks a value read from `P:p:<page>:<version>`: `Err((stored, computed))` if its check does
/// not hold.
pub(super) fn verify(value: &[u8], page: u64, version: u64) -> Result<(), (u32, u32)> {
    assert_eq!(value.len(), VALUE_LEN, "the caller reads whole values");
    let (bytes, stored) = value.split_at(PAGE as usize);
    let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
    let computed = check(bytes, page, version);
    if stored == computed {
        Ok(())
    } else {
        Err((stored, computed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_checks_only_under_its_own_page_and_version() {
        let mut v = vec![7u8; VALUE_LEN];
        let c = check(&v[..PAGE as usize], 3, 9);
        v[PAGE as usize..].copy_from_slice(&c.to_le_bytes());
        assert_eq!(verify(&v, 3, 9), Ok(()));
        assert!(verify(&v, 4, 9).is_err(), "another page's value");
        assert!(verify(&v, 3, 8).is_err(), "another commit's value");
        v[100] ^= 1;
        assert_eq!(verify(&v, 3, 9), Err((c, check(&v[..PAGE as usize], 3, 9))));
    }
}
