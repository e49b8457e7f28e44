//! A commit on the Redis backend: shadow pages, the switch of the master entry in one
//! `MULTI`/`EXEC`, then the deletion of what it superseded.

use super::keys::{page_key, pages_of, written};
use super::page;
use super::resp::{Conn, Reply, RespError};
use super::{fail, RedisRmem, CHECKED_FIELD, CHUNK};
use crate::error::Result;
use crate::layout::PAGE;
use mojim_region::Arena;
use std::io::Write;

fn number_arg(conn: &mut Conn, buf: &mut Vec<u8>, n: u64) {
    buf.clear();
    let _ = write!(buf, "{n}");
    conn.arg(buf);
}

impl RedisRmem {
    /// Reads the replies to the last commit's `DEL`s.
    pub(super) fn drain(&mut self, conn: &mut Conn) -> Result<()> {
        while self.owed > 0 {
            let what = format!("deleting the pages commit {} superseded", self.seq);
            match conn.read().map_err(|e| self.fail(&what, e))? {
                Reply::Int(_) => self.owed -= 1,
                other => return Err(self.fail(&what, format!("DEL answered {other}"))),
            }
        }
        Ok(())
    }

    /// Sends the `DEL`s of the keys the last commit superseded; their replies are read before
    /// the next command. A failure here leaves garbage only (the commit is whole): the
    /// connection is dropped, and the next one collects it.
    pub(super) fn delete_superseded(&mut self) {
        let Some(conn) = self.conn.as_mut() else { return };
        for chunk in self.superseded.chunks(CHUNK as usize) {
            conn.begin(1 + chunk.len());
            conn.arg(b"DEL");
            for &(p, v) in chunk {
                page_key(&mut self.scratch, &self.opts.key, p, v);
                conn.arg(&self.scratch);
            }
            self.owed += 1;
        }
        if let Err(e) = conn.flush() {
            tracing::warn!(server = %self.opts.addr, "deleting superseded pages failed ({e}); the next connection collects them");
            self.last_error = Some(format!("deleting superseded pages: {e}"));
            self.conn = None;
            self.owed = 0;
        }
        self.superseded.clear();
    }

    /// Steps 1 and 2 of a commit: the shadow pages, then the switch.
    pub(super) fn write_and_switch(
        &mut self,
        conn: &mut Conn,
        runs: &[(u64, u64)],
        memory: &Arena,
    ) -> Result<()> {
        let v = self.seq + 1;
        let addr = self.opts.addr.clone();
        let io = |what: &str| {
            let what = format!("{what} of commit {v}");
            let addr = addr.clone();
            move |e: RespError| fail(&addr, what, e)
        };
        // 1. Shadow pages, each with its check.
        let mut sets = 0u64;
        for p in pages_of(runs) {
            page_key(&mut self.scratch, &self.opts.key, p, v);
            conn.begin(3);
            conn.arg(b"SET");
            conn.arg(&self.scratch);
            conn.arg_view_checked(memory.view((p * PAGE) as usize, PAGE as usize), |b| page::check(b, p, v));
            conn.flush_if_full().map_err(io("writing the shadow pages"))?;
            sets += 1;
        }
        conn.flush().map_err(io("writing the shadow pages"))?;
        self.read_set_replies(conn, sets, v)?;
        // 2. The switch.
        let freed: Vec<u64> = self
            .freed
            .iter()
            .copied()
            .filter(|&p| !written(runs, p) && self.master.contains_key(&p))
            .collect();
        self.switch(conn, v, pages_of(runs), freed, Some(self.opts.capacity))?;
        self.freed.clear();
        Ok(())
    }

    /// Reads the replies to `sets` shadow-page `SET`s of commit `v`: each must be `+OK`.
    pub(super) fn read_set_replies(&mut self, conn: &mut Conn, sets: u64, v: u64) -> Result<()> {
        let what = format!("writing the shadow pages of commit {v}");
        for _ in 0..sets {
            match conn.read().map_err(|e| self.fail(&what, e))? {
                Reply::Status(s) if s == "OK" => {}
                other => return Err(self.fail(&what, format!("SET answered {other}"))),
            }
        }
        Ok(())
    }

    /// Switches the master to commit `v` in one `MULTI`/`EXEC`: `pages` (whose shadow pages of
    /// version `v` are written) to `v`, `freed` out, `seq` to `v`, `checked` to 1, and
    /// `capacity` if given. Then the master in memory is the new one, and the keys it
    /// superseded wait in `superseded` for their deletion.
    pub(super) fn switch(
        &mut self,
        conn: &mut Conn,
        v: u64,
        pages: impl Iterator<Item = u64> + Clone,
        freed: Vec<u64>,
        capacity: Option<u64>,
    ) -> Result<()> {
        let addr = self.opts.addr.clone();
        let io = |what: &str| {
            let what = format!("{what} of commit {v}");
            let addr = addr.clone();
            move |e: RespError| fail(&addr, what, e)
        };
        conn.command(&[b"MULTI"]);
        let mut queued = 0;
        let mut left = pages.clone().count() as u64;
        let mut named = pages.clone();
        while left > 0 {
            let n = left.min(CHUNK);
            conn.begin(2 + 2 * n as usize);
            conn.arg(b"HSET");
            conn.arg(&self.master_key);
            for _ in 0..n {
                let p = named.next().expect("as many pages as counted");
                number_arg(conn, &mut self.scratch, p);
                number_arg(conn, &mut self.scratch, v);
            }
            left -= n;
            queued += 1;
        }
        for chunk in freed.chunks(CHUNK as usize) {
            conn.begin(2 + chunk.len());
            conn.arg(b"HDEL");
            conn.arg(&self.master_key);
            for &p in chunk {
                number_arg(conn, &mut self.scratch, p);
            }
            queued += 1;
        }
        conn.begin(if capacity.is_some() { 8 } else { 6 });
        conn.arg(b"HSET");
        conn.arg(&self.master_key);
        conn.arg(b"seq");
        number_arg(conn, &mut self.scratch, v);
        conn.arg(CHECKED_FIELD);
        conn.arg(b"1");
        if let Some(c) = capacity {
            conn.arg(b"capacity");
            number_arg(conn, &mut self.scratch, c);
        }
        queued += 1;
        conn.command(&[b"EXEC"]);
        self.in_doubt = true;
        conn.flush().map_err(io("sending the switch"))?;
        let switch = format!("the switch (MULTI … EXEC) of commit {v}");
        for i in 0..=queued {
            let want = if i == 0 { "OK" } else { "QUEUED" };
            match conn.read().map_err(io("reading the switch's replies"))? {
                Reply::Status(s) if s == want => {}
                other => {
                    // The server discards the transaction (EXECABORT): nothing was switched.
                    self.in_doubt = false;
                    return Err(self.fail(&switch, format!("a queued command was answered {other}")));
                }
            }
        }
        match conn.read().map_err(io("reading EXEC's reply"))? {
            Reply::Array(results) => {
                if let Some(e) = results.iter().find(|r| matches!(r, Reply::Error(_))) {
                    return Err(self.fail(&switch, format!("a command in it failed: {e}")));
                }
            }
            Reply::Error(e) => {
                self.in_doubt = false;
                return Err(self.fail(&switch, format!("EXEC answered -{e}")));
            }
            other => return Err(self.fail(&switch, format!("EXEC answered {other}"))),
        }
        self.in_doubt = false;
        // Switched: the master is the new one.
        for p in pages {
            if let Some(old) = self.master.insert(p, v) {
                self.superseded.push((p, old));
            }
        }
        for p in freed {
            if let Some(old) = self.master.remove(&p) {
                self.superseded.push((p, old));
            }
        }
        self.seq = v;
        self.checked = true;
        Ok(())
    }
}
