//! A small sorted set's value (Redis's `listpack` encoding): `count` (u32), then per member, in
//! the set's order (score, then member bytes), `score` (f64; never -0: Redis's listpack holds a
//! whole score as an integer, so -0 is written 0), `mlen` (u32), the member. A
//! change writes the whole value again (copy-on-write, like every value); a set that passes
//! `zset-max-listpack-entries` members or a member longer than `zset-max-listpack-value` bytes
//! moves to an index (`zindex.rs`).

use super::error::StoreError;

/// The value of `items` (in order).
pub fn encode<'a>(items: impl ExactSizeIterator<Item = (f64, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + 16 * items.len());
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    for (score, member) in items {
        // -0 + 0 is 0; every other score is itself.
        out.extend_from_slice(&(score + 0.0).to_le_bytes());
        out.extend_from_slice(&(member.len() as u32).to_le_bytes());
        out.extend_from_slice(member);
    }
    out
}

/// The members of a value, checked as they are read.
pub fn decode(blob: &[u8]) -> Result<Vec<(f64, Vec<u8>)>, StoreError> {
    let bad = |at: usize| StoreError::Corrupt(format!("a sorted set's value runs past its end at byte {at}"));
    let n = u32::from_le_bytes(blob.get(..4).ok_or_else(|| bad(0))?.try_into().expect("4 bytes")) as usize;
    let mut out = Vec::with_capacity(n.min(blob.len() / 12));
    let mut at = 4;
    for _ in 0..n {
        let head = blob.get(at..at + 12).ok_or_else(|| bad(at))?;
        let score = f64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
        let member = blob.get(at + 12..at + 12 + len).ok_or_else(|| bad(at))?;
        out.push((score, member.to_vec()));
        at += 12 + len;
    }
    if at != blob.len() {
        return Err(StoreError::Corrupt(format!(
            "a sorted set's value has {} bytes after its members",
            blob.len() - at
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let items = [(1.5, &b"a"[..]), (f64::INFINITY, &b""[..]), (-0.0, &b"xyz"[..])];
        let blob = encode(items.iter().copied());
        assert_eq!(blob.len(), 4 + 3 * 12 + 4);
        assert_eq!(&blob[..4], &3u32.to_le_bytes());
        assert_eq!(&blob[4..12], &1.5f64.to_le_bytes());
        let back = decode(&blob).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].1, b"xyz");
        assert!(back[2].0 == 0.0 && back[2].0.is_sign_positive(), "-0 is kept as 0, as a listpack keeps it");
        for cut in 0..blob.len() {
            assert!(decode(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = blob.clone();
        long.push(0);
        assert!(decode(&long).is_err());
    }
}
