//! The other clients while a script runs past its time limit: the script's hook calls
//! [`BusyIo::serve`], which reads what they sent, lets the script engine answer each request
//! (`cmd/scripting/busy.rs`: `SCRIPT KILL`, `-BUSY`, ...) and writes the replies at once, and
//! accepts new connections (an operator's `redis-cli` that comes to kill the script). After
//! the turn, [`Server::after_busy`] files the accepted clients into the server's list and
//! catches up on those served.
//!
//! A client whose earlier replies still wait for their group is not read: its requests wait
//! for the script to end (its replies must stay in order).

use super::blocking::Waits;
use super::client::{Client, ReadOutcome};
use super::listeners::{self, Listeners};
use super::Server;
use crate::cmd::scripting::Answered;
use crate::cmd::{Args, Session};
use crate::resp::{Limits, Parsed, Reply};
use rustix::event::epoll;
use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};

/// Tokens of the clients accepted while a script runs (their index added).
pub const ARRIVAL: u64 = 1 << 62;
/// Clients accepted while one script runs, at most.
const MAX_ARRIVALS: usize = 1024;

/// What serving the other clients needs from the server.
pub struct BusyIo<'a> {
    pub ep: &'a OwnedFd,
    pub listeners: &'a Listeners,
    /// The slot of the client running the script.
    pub me: usize,
    pub waits: &'a RefCell<Waits>,
    /// Clients accepted while the script runs (ids given once filed).
    pub arrivals: &'a RefCell<Vec<Client>>,
    /// Slots of the clients served.
    pub touched: &'a RefCell<Vec<usize>>,
    pub limits: Limits,
    pub max_request: usize,
    /// New clients must authenticate.
    pub password: bool,
}

impl BusyIo<'_> {
    /// One pass over what is ready.
    pub fn serve(
        &self,
        others: &RefCell<[&mut [Option<Client>]; 2]>,
        answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> Answered,
    ) {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(256);
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        if epoll::wait(self.ep, rustix::buffer::spare_capacity(&mut events), Some(&zero)).is_err() {
            return;
        }
        for ev in &events {
            let token = ev.data.u64();
            if listeners::is_listener(token) {
                self.accept(token);
            } else if token >= ARRIVAL {
                let k = (token - ARRIVAL) as usize;
                if let Some(c) = self.arrivals.borrow_mut().get_mut(k) {
                    self.serve_client(c, token, true, answer);
                }
            } else {
                self.serve_slot(others, token as usize, true, answer);
            }
        }
        // Requests read before the script started (a client later in the turn's list) are
        // answered too.
        let n = {
            let o = others.borrow();
            o[0].len() + 1 + o[1].len()
        };
        for i in (0..n).filter(|&i| i != self.me) {
            self.serve_slot(others, i, false, answer);
        }
    }

    /// Serves the client in slot `i` (reading its socket when `read`).
    fn serve_slot(
        &self,
        others: &RefCell<[&mut [Option<Client>]; 2]>,
        i: usize,
        read: bool,
        answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> Answered,
    ) {
        let mut o = others.borrow_mut();
        let c = match i.cmp(&self.me) {
            std::cmp::Ordering::Less => o[0].get_mut(i),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => o[1].get_mut(i - self.me - 1),
        };
        let Some(c) = c.and_then(|c| c.as_mut()) else { return };
        if (!read && c.pending_input().is_empty()) || self.waits.borrow().is_parked(i) {
            return;
        }
        if self.serve_client(c, i as u64, read, answer) {
            self.touched.borrow_mut().push(i);
        }
    }

    fn accept(&self, token: u64) {
        loop {
            if self.arrivals.borrow().len() >= MAX_ARRIVALS {
                return;
            }
            let Ok(Some((stream, peer))) = self.listeners.accept(token) else { return };
            let laddr = stream.tcp().local_addr().map(|a| a.to_string()).unwrap_or_default();
            let mut c = Client::new(stream, Session::new(0, peer.to_string(), !self.password), self.limits);
            c.laddr = laddr.into();
            let token = ARRIVAL + self.arrivals.borrow().len() as u64;
            if epoll::add(self.ep, c.stream.as_fd(), epoll::EventData::new_u64(token), epoll::EventFlags::IN)
                .is_err()
            {
                continue;
            }
            self.arrivals.borrow_mut().push(c);
        }
    }

    /// Reads (when `read`) and answers one client; whether it was served.
    fn serve_client(
        &self,
        c: &mut Client,
        token: u64,
        read: bool,
        answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> Answered,
    ) -> bool {
        if c.closing || c.out.len() != c.releasable {
            return false;
        }
        if read {
            if let ReadOutcome::Closed = c.read(self.max_request) {
                c.closing = true;
                return true;
            }
        }
        loop {
            let Client { parser, buf, start, end, session, out, closing, .. } = &mut *c;
            let input = &buf[*start..*end];
            if input.is_empty() {
                break;
            }
            match parser.parse(input) {
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { len }) => *start += len,
                Ok(Parsed::Request { len }) => {
                    let args = Args::Parsed { parser, buf: input };
                    let mut r = Reply { buf: out, proto: session.proto };
                    let a = answer(session, &args, &mut r);
                    *start += len;
                    if a == Answered::Close {
                        *start = *end;
                        *closing = true;
                        break;
                    }
                }
                Err(e) => {
                    Reply { buf: out, proto: session.proto }.error(&format!("ERR Protocol error: {e}"));
                    *start = *end;
                    *closing = true;
                    break;
                }
            }
        }
        c.releasable = c.out.len();
        if !c.write() {
            c.closing = true;
        }
        if c.wants_write() && !c.interest.contains(epoll::EventFlags::OUT) {
            let want = c.interest | epoll::EventFlags::OUT;
            if epoll::modify(self.ep, c.stream.as_fd(), epoll::EventData::new_u64(token), want).is_ok() {
                c.interest = want;
            }
        }
        true
    }
}

impl Server<'_> {
    /// After a turn in which a script let the other clients in: files the clients it accepted,
    /// and brings those it served up to date (closing, interest, input left to run).
    pub(super) fn after_busy(&mut self) {
        let touched = std::mem::take(&mut *self.busy_touched.borrow_mut());
        for i in touched {
            self.settle_served(i);
        }
        let arrivals = std::mem::take(&mut *self.arrivals.borrow_mut());
        for mut c in arrivals {
            c.session.id = self.next_id;
            self.next_id += 1;
            self.stats.connections += 1;
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.clients.push(None);
                    self.clients.len() - 1
                }
            };
            if epoll::modify(&self.ep, c.stream.as_fd(), epoll::EventData::new_u64(slot as u64), c.interest)
                .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.clients[slot] = Some(c);
            self.settle_served(slot);
        }
    }

    fn settle_served(&mut self, i: usize) {
        let Some(c) = self.clients.get_mut(i).and_then(|c| c.as_mut()) else { return };
        if c.eof && c.pending_input().is_empty() {
            c.closing = true;
        }
        let (closing, done, input) = (c.closing, c.all_sent(), !c.pending_input().is_empty());
        if c.stream.is_tls() && c.stream.has_buffered_input() && !self.tls_backlog.contains(&i) {
            self.tls_backlog.push(i);
        }
        if closing && done {
            self.closing.push(i);
        } else if input {
            self.mark_ready(i);
        }
        self.update_interest(i);
    }
}
