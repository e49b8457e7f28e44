//! A memory an older build wrote: its pages without checks (values of 4096 bytes) and its master
//! entry without `checked`. The first connection rewrites it as this build's, in one commit
//! that changes no byte: every page the master names is read and written again, with its
//! check, as version `seq` + 1; then the switch names them all and sets `checked`; then the
//! old keys are deleted. A crash before the switch leaves the old memory and shadow pages that
//! the next connection's garbage collection removes, and that connection starts over.

use super::keys::page_key;
use super::page;
use super::resp::{Conn, Head, Reply};
use super::{RedisRmem, CHUNK};
use crate::error::Result;
use crate::layout::PAGE;

impl RedisRmem {
    /// Adds checks to every page of a memory whose master has no `checked` field.
    pub(super) fn add_checks(&mut self, conn: &mut Conn) -> Result<()> {
        let v = self.seq + 1;
        let what = format!(
            "adding checks to the pages of the memory under {}:* (written by a build before page \
             checks), as commit {v}",
            self.opts.key
        );
        let mut pages: Vec<(u64, u64)> = self.master.iter().map(|(&p, &v)| (p, v)).collect();
        pages.sort_unstable();
        let mut bodies = vec![0u8; CHUNK as usize * PAGE as usize];
        let mut value = vec![0u8; page::VALUE_LEN];
        for chunk in pages.chunks(CHUNK as usize) {
            conn.begin(1 + chunk.len());
            conn.arg(b"MGET");
            for &(p, old) in chunk {
                page_key(&mut self.scratch, &self.opts.key, p, old);
                conn.arg(&self.scratch);
            }
            conn.flush().map_err(|e| self.fail(&what, e))?;
            match conn.read_head().map_err(|e| self.fail(&what, e))? {
                Head::Array(n) if n == chunk.len() => {}
                other => {
                    return Err(self.fail(&what, format!("MGET of {} keys answered {other:?}", chunk.len())))
                }
            }
            for (i, &(p, old)) in chunk.iter().enumerate() {
                match conn.read_head().map_err(|e| self.fail(&what, e))? {
                    Head::Bulk(n) if n as u64 == PAGE => {
                        let body = &mut bodies[i * PAGE as usize..(i + 1) * PAGE as usize];
                        conn.read_bulk(body).map_err(|e| self.fail(&what, e))?;
                    }
                    other => {
                        page_key(&mut self.scratch, &self.opts.key, p, old);
                        return Err(self.fail(
                            &what,
                            format!(
                                "{} came as {other:?}, not the {PAGE} bytes an older build writes (Nil: \
                                 evicted or deleted; use maxmemory-policy noeviction)",
                                String::from_utf8_lossy(&self.scratch)
                            ),
                        ));
                    }
                }
            }
            for (i, &(p, _)) in chunk.iter().enumerate() {
                let body = &bodies[i * PAGE as usize..(i + 1) * PAGE as usize];
                value[..PAGE as usize].copy_from_slice(body);
                value[PAGE as usize..].copy_from_slice(&page::check(body, p, v).to_le_bytes());
                page_key(&mut self.scratch, &self.opts.key, p, v);
                conn.command(&[b"SET", &self.scratch, &value]);
                conn.flush_if_full().map_err(|e| self.fail(&what, e))?;
            }
            conn.flush().map_err(|e| self.fail(&what, e))?;
            self.read_set_replies(conn, chunk.len() as u64, v)?;
        }
        self.switch(conn, v, pages.iter().map(|&(p, _)| p), Vec::new(), None)?;
        // The old versions, deleted now: the connection is not handed out yet.
        let old = std::mem::take(&mut self.superseded);
        for chunk in old.chunks(CHUNK as usize) {
            conn.begin(1 + chunk.len());
            conn.arg(b"DEL");
            for &(p, old) in chunk {
                page_key(&mut self.scratch, &self.opts.key, p, old);
                conn.arg(&self.scratch);
            }
            conn.flush().map_err(|e| self.fail(&what, e))?;
            match conn.read().map_err(|e| self.fail(&what, e))? {
                Reply::Int(_) => {}
                other => return Err(self.fail(&what, format!("DEL answered {other}"))),
            }
        }
        tracing::info!(
            server = %self.opts.addr,
            pages = pages.len(),
            seq = v,
            "redis: added checks to every page of a memory an older build wrote"
        );
        Ok(())
    }
}
