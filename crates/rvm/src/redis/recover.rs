//! Recovery on the Redis backend: the master entry read and checked, and the page keys it does
//! not name deleted.

use super::keys::{canonical, glob_escape, parse_page_key};
use super::resp::{Conn, Head, Reply, RespError};
use super::{RedisRmem, CHECKED_FIELD, SCAN_COUNT};
use crate::error::{Result, RvmError};
use std::collections::HashMap;

/// The master entry as read.
pub(super) struct Master {
    pub(super) seq: u64,
    pub(super) pages: HashMap<u64, u64>,
    /// Whether its pages carry checks (`checked` = 1); an older build's memory has no such
    /// field.
    pub(super) checked: bool,
}

impl RedisRmem {
    /// `HGETALL P:master`, read field by field and checked.
    pub(super) fn read_master(&self, conn: &mut Conn) -> Result<Master> {
        let key = String::from_utf8_lossy(&self.master_key).into_owned();
        let what = format!("reading the master entry {key}");
        let io = |e: RespError| self.fail(&what, e);
        conn.command(&[b"HGETALL", &self.master_key]);
        conn.flush().map_err(io)?;
        let n = match conn.read_head().map_err(io)? {
            Head::Array(n) if n % 2 == 0 => n,
            Head::Error(e) if e.starts_with("WRONGTYPE") => {
                return Err(self.fail(
                    &what,
                    format!(
                    "-{e}: the key is not a hash, so it is not this memory's: choose another [rvm] redis_key"
                ),
                ))
            }
            Head::Error(e) => return Err(self.fail(&what, format!("the server answered -{e}"))),
            other => return Err(self.fail(&what, format!("protocol violation: HGETALL answered {other:?}"))),
        };
        let mut field = [0u8; 32];
        let mut value = [0u8; 32];
        let small = |conn: &mut Conn, out: &mut [u8; 32]| -> Result<usize> {
            match conn.read_head().map_err(io)? {
                Head::Bulk(len) if len <= out.len() => {
                    conn.read_bulk(&mut out[..len]).map_err(io)?;
                    Ok(len)
                }
                Head::Bulk(len) => Err(RvmError::Layout(format!(
                    "the master entry {key} at {}: a field or value of {len} bytes, longer than any of \
                     this memory's: the key is not this memory's; choose another [rvm] redis_key",
                    self.opts.addr
                ))),
                other => Err(self.fail(
                    &what,
                    format!("protocol violation: a field or value of the hash came as {other:?}"),
                )),
            }
        };
        let (mut seq, mut pages, mut checked) = (None, HashMap::new(), false);
        let layout =
            |m: String| RvmError::Layout(format!("the master entry {key} at {}: {m}", self.opts.addr));
        for _ in 0..n / 2 {
            let f = small(conn, &mut field)?;
            let v = small(conn, &mut value)?;
            let (f, v) = (&field[..f], &value[..v]);
            let num = canonical(v).ok_or_else(|| {
                layout(format!(
                    "field {:?} holds {:?}, not a number: the key is not this memory's; choose another \
                     [rvm] redis_key",
                    String::from_utf8_lossy(f),
                    String::from_utf8_lossy(v)
                ))
            })?;
            match f {
                b"seq" => seq = Some(num),
                b"capacity" => {}
                CHECKED_FIELD if num == 1 => checked = true,
                CHECKED_FIELD => {
                    return Err(layout(format!(
                        "field {:?} holds {num}, where this memory's holds 1: the key is not this \
                         memory's; choose another [rvm] redis_key",
                        String::from_utf8_lossy(f)
                    )))
                }
                _ => match canonical(f) {
                    Some(page) => {
                        pages.insert(page, num);
                    }
                    None => {
                        return Err(layout(format!(
                            "field {:?} is not a page number, seq or capacity: the key is not this \
                             memory's; choose another [rvm] redis_key",
                            String::from_utf8_lossy(f)
                        )))
                    }
                },
            }
        }
        let seq = match seq {
            Some(s) => s,
            None if pages.is_empty() => 0,
            None => return Err(layout(format!("it names {} pages but no seq", pages.len()))),
        };
        if let Some((p, v)) = pages.iter().find(|&(_, &v)| v == 0 || v > seq) {
            return Err(layout(format!("page {p} is at version {v}, outside commits 1 to {seq}")));
        }
        Ok(Master { seq, pages, checked })
    }

    /// Deletes the page keys under the prefix that the master does not name.
    pub(super) fn collect_garbage(&self, conn: &mut Conn) -> Result<usize> {
        let what = format!("collecting garbage under {}:p:*", self.opts.key);
        let mut pattern = glob_escape(&self.opts.key);
        pattern.extend_from_slice(b":p:*");
        let mut cursor = b"0".to_vec();
        let mut removed = 0;
        loop {
            let reply = conn
                .call(&[b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", SCAN_COUNT])
                .map_err(|e| self.fail(&what, e))?;
            let (next, keys) = match reply {
                Reply::Array(mut v) if v.len() == 2 => match (v.remove(0), v.remove(0)) {
                    (Reply::Bulk(c), Reply::Array(keys)) => (c, keys),
                    (c, k) => {
                        return Err(self.fail(&what, format!("protocol violation: SCAN answered [{c}, {k}]")))
                    }
                },
                other => return Err(self.fail(&what, format!("SCAN answered {other}"))),
            };
            let orphans: Vec<Vec<u8>> = keys
                .into_iter()
                .filter_map(|k| match k {
                    Reply::Bulk(k) => Some(k),
                    _ => None,
                })
                .filter(|k| {
                    parse_page_key(&self.opts.key, k).is_some_and(|(p, v)| self.master.get(&p) != Some(&v))
                })
                .collect();
            if !orphans.is_empty() {
                conn.begin(1 + orphans.len());
                conn.arg(b"DEL");
                for k in &orphans {
                    conn.arg(k);
                }
                conn.flush().map_err(|e| self.fail(&what, e))?;
                match conn.read().map_err(|e| self.fail(&what, e))? {
                    Reply::Int(n) => removed += n.max(0) as usize,
                    other => return Err(self.fail(&what, format!("DEL answered {other}"))),
                }
            }
            if next == b"0" {
                return Ok(removed);
            }
            cursor = next;
        }
    }
}
