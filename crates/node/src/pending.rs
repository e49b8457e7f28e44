//! Connections still in their handshake: bounded per source address (an IPv6 /64 is one source)
//! and in all.
//!
//! A peer that has not proven the secret holds a thread and a place here until its handshake
//! ends, at most the handshake's deadline. When a limit is reached, a newcomer is never turned
//! away: it displaces the oldest pending connection of its own address if that address is at
//! its limit, else (all places taken) the oldest of the address that holds the most. A peer
//! that proves the secret needs its place for one round trip, so slow peers, even from the
//! operator's own address, cannot keep it out; only a peer that opens connections faster than
//! a handshake completes can (a flood, which these limits do not claim to stop).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// A pending connection's source, from `peer` ("ip:port"): an IPv4 address (an IPv4-mapped
/// IPv6 address counts as its IPv4 address), or an IPv6 address's /64 network, since one host
/// is commonly given a whole /64 and could otherwise open connections from 2⁶⁴ sources;
/// `peer` itself when it is not a socket address.
pub(crate) fn source(peer: &str) -> String {
    match peer.parse::<SocketAddr>().map(|a| a.ip().to_canonical()) {
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => format!("{}/64", Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        Err(_) => peer.to_string(),
    }
}

struct Entry<C> {
    id: u64,
    source: String,
    conn: C,
}

/// The pending connections, oldest first.
pub(crate) struct Pending<C> {
    per_source: usize,
    total: usize,
    next_id: u64,
    entries: VecDeque<Entry<C>>,
}

impl<C> Pending<C> {
    pub fn new(per_source: usize, total: usize) -> Pending<C> {
        assert!(
            1 <= per_source && per_source <= total,
            "pending limits {per_source} per source, {total} in all"
        );
        Pending { per_source, total, next_id: 0, entries: VecDeque::with_capacity(total) }
    }

    /// Admits a connection from `source`; returns its id and the connection it displaced (for
    /// the caller to close), if a limit was reached.
    pub fn admit(&mut self, source: &str, conn: C) -> (u64, Option<C>) {
        let from_source = self.entries.iter().filter(|e| e.source == source).count();
        let victim = if from_source >= self.per_source {
            self.entries.iter().position(|e| e.source == source)
        } else if self.entries.len() >= self.total {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for e in &self.entries {
                *counts.entry(e.source.as_str()).or_default() += 1;
            }
            let most = counts.values().copied().max().unwrap_or(0);
            self.entries.iter().position(|e| counts[e.source.as_str()] == most)
        } else {
            None
        };
        let displaced = victim.and_then(|i| self.entries.remove(i)).map(|e| e.conn);
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Entry { id, source: source.to_string(), conn });
        assert!(self.entries.len() <= self.total);
        (id, displaced)
    }

    /// Ends connection `id`'s place; false if it was displaced before.
    pub fn remove(&mut self, id: u64) -> bool {
        match self.entries.iter().position(|e| e.id == id) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_ip_addresses() {
        assert_eq!(source("127.0.0.1:4000"), "127.0.0.1");
        assert_eq!(source("[::ffff:10.0.0.1]:80"), "10.0.0.1");
        assert_eq!(source("[::1]:80"), "::/64");
        assert_eq!(source("mem-7"), "mem-7");
    }

    #[test]
    fn an_ipv6_source_is_its_64_network() {
        // One /64, whatever the interface identifier and port.
        let net = source("[2001:db8:1:2::1]:4000");
        assert_eq!(net, "2001:db8:1:2::/64");
        for peer in ["[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "[2001:db8:1:2:abcd::9]:65535"] {
            assert_eq!(source(peer), net, "{peer}");
        }
        // The next /64 is another source.
        assert_eq!(source("[2001:db8:1:3::1]:4000"), "2001:db8:1:3::/64");
        // IPv4-mapped IPv6 is its IPv4 address, not the ::ffff:0:0/96 network.
        assert_eq!(source("[::ffff:10.0.0.1]:80"), "10.0.0.1");
        assert_ne!(source("[::ffff:10.0.0.1]:80"), source("[::ffff:10.0.0.2]:80"));
        // So one host's whole /64 holds at most its share of places.
        let mut p = Pending::new(2, 64);
        let mut displaced = 0;
        for i in 0..100u32 {
            let peer = format!("[2001:db8:1:2:{:x}::{:x}]:{}", i, i + 1, 1000 + i);
            displaced += usize::from(p.admit(&source(&peer), i).1.is_some());
        }
        assert_eq!((p.len(), displaced), (2, 98));
    }

    #[test]
    fn a_source_at_its_limit_gives_up_its_oldest() {
        let mut p = Pending::new(2, 10);
        let (a, _) = p.admit("x", 'a');
        let (_, none) = p.admit("x", 'b');
        assert!(none.is_none());
        let (_, d) = p.admit("y", 'c');
        assert!(d.is_none(), "another source has room");
        let (c, d) = p.admit("x", 'd');
        assert_eq!(d, Some('a'), "x was at its limit");
        assert!(!p.remove(a), "a was displaced");
        assert!(p.remove(c));
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn when_full_the_source_holding_the_most_gives_up_its_oldest() {
        let mut p = Pending::new(3, 5);
        for (s, c) in [("x", 'a'), ("y", 'b'), ("x", 'c'), ("y", 'd'), ("y", 'e')] {
            assert!(p.admit(s, c).1.is_none());
        }
        // Full: y holds the most; its oldest goes, though x's 'a' is older.
        assert_eq!(p.admit("z", 'f').1, Some('b'));
        // Now x and y hold two each: the older of their oldest goes.
        assert_eq!(p.admit("z", 'g').1, Some('a'));
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn a_newcomer_always_gets_a_place() {
        let mut p = Pending::new(16, 64);
        let mut ids = Vec::new();
        for i in 0..1000u32 {
            let source = format!("10.0.0.{}", i % 7);
            ids.push(p.admit(&source, i).0);
            assert!(p.len() <= 64);
        }
        // The last admitted is there, whatever came before it.
        assert!(p.remove(*ids.last().expect("admitted")));
    }
}
