//! CRC-64 with the Jones polynomial (0xad93d23594c935a9), bits reflected in and out, starting
//! from 0 and not inverted after: the checksum at the end of Redis's RDB files and DUMP payloads.
//! Redis's own test vector: "123456789" gives 0xe9c6d914c4b8d9ca.

/// The polynomial with its bits reversed (the reflected algorithm works from the low bit).
const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;

/// What each byte value does to the checksum.
const TABLE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY_REFLECTED } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The checksum `crc` goes on to after `data` (0 to start).
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    for &b in data {
        crc = TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum bit by bit, as the polynomial defines it.
    fn slow(data: &[u8]) -> u64 {
        let mut crc = 0u64;
        for &b in data {
            crc ^= u64::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ POLY_REFLECTED } else { crc >> 1 };
            }
        }
        crc
    }

    #[test]
    fn redis_test_vector() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(0, b""), 0);
        // In pieces, as in one.
        assert_eq!(crc64(crc64(0, b"12345"), b"6789"), 0xe9c6_d914_c4b8_d9ca);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(crc64(0, &data), slow(&data));
    }
}
