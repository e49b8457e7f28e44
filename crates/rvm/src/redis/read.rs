//! Reading the Redis backend: pages by the master's versions, pipelined `MGET`s.

use super::keys::page_key;
use super::page::{self, VALUE_LEN};
use super::resp::{Conn, Head};
use super::{RedisRmem, CHUNK};
use crate::error::{Result, RvmError};
use crate::layout::PAGE;

impl RedisRmem {
    /// Reads pages `[offset, offset + out.len())` by the master's versions: one `MGET` per
    /// [`CHUNK`] pages, pipelined. Every page's check is verified (recovery reads the memory
    /// this way); one that fails is an error naming the page and its key.
    pub(super) fn read_pages(&mut self, conn: &mut Conn, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset + out.len() as u64;
        let pages = offset / PAGE..end.div_ceil(PAGE);
        let what = format!("reading bytes {offset}..{end}");
        let present = pages.clone().filter(|p| self.master.contains_key(p)).count() as u64;
        let mut left = present;
        let mut in_cmd = 0;
        for p in pages.clone() {
            let Some(&v) = self.master.get(&p) else { continue };
            if in_cmd == 0 {
                in_cmd = left.min(CHUNK);
                conn.begin(1 + in_cmd as usize);
                conn.arg(b"MGET");
            }
            page_key(&mut self.scratch, &self.opts.key, p, v);
            conn.arg(&self.scratch);
            in_cmd -= 1;
            left -= 1;
            conn.flush_if_full().map_err(|e| self.fail(&what, e))?;
        }
        conn.flush().map_err(|e| self.fail(&what, e))?;
        let mut left = present;
        let mut in_reply = 0;
        for p in pages {
            let (from, to) = ((p * PAGE).max(offset), ((p + 1) * PAGE).min(end));
            let dst = &mut out[(from - offset) as usize..(to - offset) as usize];
            let Some(&v) = self.master.get(&p) else {
                dst.fill(0);
                continue;
            };
            if in_reply == 0 {
                let n = left.min(CHUNK) as usize;
                match conn.read_head().map_err(|e| self.fail(&what, e))? {
                    Head::Array(m) if m == n => in_reply = n,
                    Head::Error(e) => return Err(self.fail(&what, format!("MGET answered -{e}"))),
                    other => {
                        return Err(self
                            .fail(&what, format!("protocol violation: MGET of {n} keys answered {other:?}")))
                    }
                }
            }
            in_reply -= 1;
            left -= 1;
            let key = || {
                let mut k = Vec::new();
                page_key(&mut k, &self.opts.key, p, v);
                String::from_utf8_lossy(&k).into_owned()
            };
            match conn.read_head().map_err(|e| self.fail(&what, e))? {
                Head::Bulk(VALUE_LEN) => {
                    conn.read_bulk(&mut self.page).map_err(|e| self.fail(&what, e))?;
                    if let Err((stored, computed)) = page::verify(&self.page, p, v) {
                        return Err(RvmError::Layout(format!(
                            "redis at {}: page {p} ({}) fails its check (stored {stored:#010x}, computed \
                             {computed:#010x}): it was changed in the server after commit {v} wrote it, \
                             or holds another page's value; nothing of it is used: restore the server's \
                             data from a backup",
                            self.opts.addr,
                            key()
                        )));
                    }
                    let at = (from - p * PAGE) as usize;
                    dst.copy_from_slice(&self.page[at..at + dst.len()]);
                }
                Head::Bulk(n) if n as u64 == PAGE => {
                    return Err(RvmError::Layout(format!(
                        "redis at {}: page {p} ({}) is {n} bytes without a check, as a build before \
                         page checks wrote it, but the master entry says every page of this memory has \
                         one: it was replaced in the server; nothing of it is used: restore the \
                         server's data from a backup",
                        self.opts.addr,
                        key()
                    )));
                }
                Head::Nil => {
                    return Err(self.fail(
                        &what,
                        format!(
                            "the master names {} but the server does not hold it: keys were evicted or \
                             deleted (use maxmemory-policy noeviction)",
                            key()
                        ),
                    ))
                }
                other => {
                    return Err(self.fail(
                        &what,
                        format!("{} came as {other:?}, not a bulk string of {VALUE_LEN} bytes", key()),
                    ))
                }
            }
        }
        Ok(())
    }
}
