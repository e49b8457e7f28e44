//! CRC32C (Castagnoli), hardware-accelerated where the CPU has it.

/// CRC32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Continues a CRC32C over `bytes`, so that a body split across slices checks as one.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c_append(crc32c(&[0u8; 16]), &[0u8; 16]), 0x8A91_36AA);
    }
}
