//! The ACL users' record (docs/FORMAT.md §11.10): one heap block that the dynamic part's
//! `acl` word names, replaced whole (copy-on-write) by every ACL change, so that a change is
//! part of its batch's group, undone with it, and found again by a restarted server or a
//! promoted mirror. The store keeps the bytes; `cmd/acl` says what they mean.

use super::error::StoreError;
use super::mem::Mem;
use super::Store;

/// Bytes before the record in its block.
pub const ACL_HEAD: u64 = 24;
/// Most bytes a record may have (a million patterns do not fit: the change is refused).
pub const ACL_MAX: usize = 4 << 20;

impl<M: Mem> Store<M> {
    /// The users' record, `None` while the store holds none.
    pub fn acl_record(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let off = self.dy.acl;
        if off == 0 {
            return Ok(None);
        }
        let mut head = [0u8; ACL_HEAD as usize];
        if !self.geo.in_heap(off, ACL_HEAD) {
            return Err(StoreError::Corrupt(format!("the ACL record's block {off} is not a heap block")));
        }
        self.mem.read(off, &mut head)?;
        let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
        let class = head[16];
        let fits = self
            .classes
            .get(class as usize)
            .is_some_and(|&s| ACL_HEAD + len <= s && self.geo.in_heap(off, s));
        if !fits {
            return Err(StoreError::Corrupt(format!(
                "the ACL record at {off} says {len} bytes in a block of class {class}"
            )));
        }
        let mut rec = vec![0u8; len as usize];
        self.mem.read(off + ACL_HEAD, &mut rec)?;
        if crc32c::crc32c(&rec) != crc {
            return Err(StoreError::Corrupt(format!("the ACL record at {off} fails its CRC")));
        }
        Ok(Some(rec))
    }

    /// The block the record lies in now (0: none); it changes with every new record.
    pub fn acl_block(&self) -> u64 {
        self.dy.acl
    }

    /// Replaces the users' record, in this batch: a new block, then the `acl` word (sealed
    /// with the dynamic part), the old block freed.
    pub fn set_acl_record(&mut self, rec: &[u8]) -> Result<(), StoreError> {
        if rec.len() > ACL_MAX {
            return Err(StoreError::TooLarge(format!(
                "the ACL users would take {} bytes, more than the {ACL_MAX} a record may have: remove \
                 patterns or users",
                rec.len()
            )));
        }
        let old = self.dy.acl;
        let old_class = if old != 0 {
            let mut c = [0u8; 1];
            self.mem.read(old + 16, &mut c)?;
            Some(c[0])
        } else {
            None
        };
        let block = self.alloc(ACL_HEAD + rec.len() as u64)?;
        let mut buf = Vec::with_capacity(ACL_HEAD as usize + rec.len());
        buf.extend_from_slice(&0u64.to_le_bytes());
        buf.extend_from_slice(&(rec.len() as u32).to_le_bytes());
        buf.extend_from_slice(&crc32c::crc32c(rec).to_le_bytes());
        buf.push(block.class);
        buf.extend_from_slice(&[0u8; 7]);
        buf.extend_from_slice(rec);
        if block.untouched {
            self.fresh(block.off, &buf)?;
        } else {
            // The first word holds a free list's link in the sealed state.
            self.fresh(block.off + 8, &buf[8..])?;
            self.meta(block.off, &buf[..8])?;
        }
        self.dy.acl = block.off;
        if let Some(c) = old_class {
            self.free(old, c)?;
        }
        Ok(())
    }

    /// Writes the record again after a flush emptied the heap (`rec`: what it held before).
    pub(crate) fn keep_acl_over_flush(&mut self, rec: Option<Vec<u8>>) -> Result<(), StoreError> {
        self.dy.acl = 0;
        match rec {
            Some(r) => self.set_acl_record(&r),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::VecMem;

    #[test]
    fn the_record_is_replaced_whole_undone_with_its_batch_and_kept_over_a_flush() {
        let mem = VecMem::new(4 << 20);
        let mut s = Store::open(&mem, 256).unwrap();
        assert_eq!(s.acl_record().unwrap(), None);
        s.set_acl_record(b"first").unwrap();
        s.seal(256).unwrap();
        let sp = s.savepoint();
        s.set_acl_record(b"second, longer").unwrap();
        assert_eq!(s.acl_record().unwrap().as_deref(), Some(&b"second, longer"[..]));
        s.rollback_to(&sp).unwrap();
        assert_eq!(s.acl_record().unwrap().as_deref(), Some(&b"first"[..]));
        s.put(b"k", crate::store::KIND_STRING, 0, &[b"v"], 0, None).unwrap();
        s.flush().unwrap();
        assert_eq!(s.acl_record().unwrap().as_deref(), Some(&b"first"[..]));
        s.seal(256).unwrap();
        drop(s);
        // A reopened store (a restart, a promoted mirror) finds it.
        let s = Store::open(&mem, 256).unwrap();
        assert_eq!(s.acl_record().unwrap().as_deref(), Some(&b"first"[..]));
        let mut s = s;
        assert!(matches!(s.set_acl_record(&vec![0u8; ACL_MAX + 1]), Err(StoreError::TooLarge(_))));
    }

    #[test]
    fn format_md_says_what_the_code_does() {
        let doc = include_str!("../../../../docs/FORMAT.md");
        let sec = &doc[doc.find("### 11.10 ACL users").expect("FORMAT.md has section 11.10")..];
        assert!(sec.contains(&format!("| {ACL_HEAD} | `len` | record |")));
        assert!(sec.contains(&format!("at most {ACL_MAX} bytes")));
        let mem = VecMem::new(4 << 20);
        let mut s = Store::open(&mem, 256).unwrap();
        s.set_acl_record(b"abc").unwrap();
        let off = s.acl_block();
        let mut b = [0u8; 27];
        mem.read(off, &mut b).unwrap();
        assert_eq!(&b[8..12], &3u32.to_le_bytes());
        assert_eq!(&b[12..16], &crc32c::crc32c(b"abc").to_le_bytes());
        assert_eq!(&b[24..], b"abc");
    }
}
