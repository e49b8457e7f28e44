//! Where a key is served, for the load on a cluster target (`mojim-cluster`): each key's hash
//! slot (Redis's CRC16 and hash tags, `mojim_kv::cluster::slot`) and the shard that owns it, as
//! `CLUSTER SLOTS` answers once when a run starts. A `-MOVED <slot> <addr>` answer moves the
//! slot to that shard for the rest of the run; a `-ASK` answer sends the one command there
//! behind `ASKING` and changes nothing. A standalone target is a route of one address that owns
//! every slot.
//!
//! [`Keyspace`] is the same for the blocking clients that load the records and delete what a
//! run inserted.

use super::client::RespClient;
use super::resp::Value;
use mojim::error::{Error, Result};
use mojim_kv::cluster::slot::key_slot;
use mojim_kv::cluster::topology::SLOTS;
use std::time::Duration;

/// No shard owns the slot (`owner`'s entry).
const UNOWNED: u16 = u16::MAX;

/// The shards of a target and the slots each owns.
#[derive(Clone, Debug)]
pub struct Route {
    /// Each shard's primary, `host:port`, in the order `CLUSTER SLOTS` first names them.
    pub addrs: Vec<String>,
    /// Per slot, the index in `addrs` of its owner, or [`UNOWNED`]; empty for a standalone
    /// target.
    owner: Vec<u16>,
}

/// A redirect answer: `-MOVED <slot> <addr>` or `-ASK <slot> <addr>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// ASK (this command only) rather than MOVED (the slot's new owner).
    pub ask: bool,
    /// The slot.
    pub slot: u16,
    /// Where to send it.
    pub addr: String,
}

impl Redirect {
    /// Reads an error reply (without its `-`) as a redirect, if it is one.
    pub fn parse(error: &[u8]) -> Option<Redirect> {
        let text = std::str::from_utf8(error).ok()?;
        let mut words = text.split(' ');
        let ask = match words.next()? {
            "MOVED" => false,
            "ASK" => true,
            _ => return None,
        };
        let slot: u16 = words.next()?.parse().ok().filter(|s| *s < SLOTS)?;
        let addr = words.next()?.to_string();
        words.next().is_none().then_some(Redirect { ask, slot, addr })
    }
}

impl Route {
    /// One server that owns every key.
    pub fn standalone(addr: &str) -> Route {
        Route { addrs: vec![addr.to_string()], owner: Vec::new() }
    }

    /// Asks the server at `addr` for `CLUSTER SLOTS`.
    pub fn read(addr: &str) -> Result<Route> {
        let mut c = RespClient::connect(addr, Duration::from_secs(10))?;
        let v = c.command(&[b"CLUSTER", b"SLOTS"])?;
        Route::from_slots(&v).map_err(|why| Error::Io {
            op: format!("read CLUSTER SLOTS from {addr}"),
            source: std::io::Error::other(format!("{why}; it answered {v}")),
        })
    }

    /// Reads a `CLUSTER SLOTS` answer: per range `[start, end, [host, port, id, ...], ...]`,
    /// the first node the range's primary. Every slot must be owned.
    pub fn from_slots(v: &Value) -> std::result::Result<Route, String> {
        let Value::Array(Some(ranges)) = v else { return Err("not an array".into()) };
        let mut route = Route { addrs: Vec::new(), owner: vec![UNOWNED; usize::from(SLOTS)] };
        for r in ranges {
            let Value::Array(Some(r)) = r else { return Err("a range is not an array".into()) };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(Some(node)))) =
                (r.first(), r.get(1), r.get(2))
            else {
                return Err("a range is not [start, end, [host, port, ...], ...]".into());
            };
            let host = match node.first() {
                Some(Value::Bulk(Some(h))) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::Simple(h)) => h.clone(),
                _ => return Err("a node has no host".into()),
            };
            let Some(Value::Int(port)) = node.get(1) else { return Err("a node has no port".into()) };
            let addr = format!("{host}:{port}");
            let ix = match route.addrs.iter().position(|a| *a == addr) {
                Some(i) => i,
                None => {
                    route.addrs.push(addr);
                    route.addrs.len() - 1
                }
            };
            let ok = |s: i64| (0..i64::from(SLOTS)).contains(&s);
            if !ok(*start) || !ok(*end) || start > end {
                return Err(format!("range {start}-{end} is not within 0-{}", SLOTS - 1));
            }
            for s in *start..=*end {
                route.owner[s as usize] = ix as u16;
            }
        }
        if let Some(s) = route.owner.iter().position(|o| *o == UNOWNED) {
            return Err(format!("slot {s} has no owner (the cluster does not cover every slot)"));
        }
        Ok(route)
    }

    /// Whether this is a cluster's route (more than one address, or slots read).
    pub fn is_cluster(&self) -> bool {
        !self.owner.is_empty()
    }

    /// The index in `addrs` of the shard that serves `key` (0 for a standalone target).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        match self.owner.is_empty() {
            true => 0,
            false => usize::from(self.owner[usize::from(key_slot(key))]),
        }
    }

    /// The index in `addrs` of `addr`, if the route names it.
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        self.addrs.iter().position(|a| a == addr)
    }

    /// Follows a MOVED: `slot` is served by `addrs[shard]` from now on.
    pub fn moved(&mut self, slot: u16, shard: usize) {
        if let Some(o) = self.owner.get_mut(usize::from(slot)) {
            *o = shard as u16;
        }
    }
}

/// A blocking client per shard of a target, with its route.
pub struct Keyspace {
    /// The shards and their slots.
    pub route: Route,
    /// One client per address of `route`, in its order.
    pub clients: Vec<RespClient>,
}

impl Keyspace {
    /// Connects to the target at `addr`, and with `cluster` to every shard `CLUSTER SLOTS`
    /// names.
    pub fn connect(addr: &str, cluster: bool, timeout: Duration) -> Result<Keyspace> {
        let route = if cluster { Route::read(addr)? } else { Route::standalone(addr) };
        let clients = route
            .addrs
            .iter()
            .map(|a| RespClient::connect(a, timeout))
            .collect::<std::result::Result<_, _>>()?;
        Ok(Keyspace { route, clients })
    }

    /// The client of the shard that serves `key`.
    pub fn client_for(&mut self, key: &[u8]) -> &mut RespClient {
        let i = self.route.shard_of(key);
        &mut self.clients[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(Some(vec![
            Value::Bulk(Some(host.as_bytes().to_vec())),
            Value::Int(port),
            Value::Bulk(Some(b"0123".to_vec())),
        ]))
    }

    fn range(start: i64, end: i64, n: Value) -> Value {
        Value::Array(Some(vec![Value::Int(start), Value::Int(end), n]))
    }

    #[test]
    fn cluster_slots_give_each_key_its_owner() {
        let v = Value::Array(Some(vec![
            range(0, 8191, node("127.0.0.1", 7001)),
            range(8192, 16000, node("127.0.0.1", 7002)),
            range(16001, 16383, node("127.0.0.1", 7001)),
        ]));
        let mut r = Route::from_slots(&v).expect("a route");
        assert_eq!(r.addrs, ["127.0.0.1:7001", "127.0.0.1:7002"]);
        // foo is slot 12182, bar 5061 (as Redis's CLUSTER KEYSLOT answers).
        assert_eq!(r.shard_of(b"foo"), 1);
        assert_eq!(r.shard_of(b"bar"), 0);
        assert_eq!(r.shard_of(b"{bar}.x"), 0, "the hash tag decides");
        r.moved(12182, 0);
        assert_eq!(r.shard_of(b"foo"), 0, "a MOVED is followed");
        assert!(r.is_cluster() && !Route::standalone("a:1").is_cluster());
        assert_eq!(Route::standalone("a:1").shard_of(b"foo"), 0);
    }

    #[test]
    fn a_cluster_that_leaves_a_slot_unowned_is_refused_naming_it() {
        let v = Value::Array(Some(vec![range(0, 99, node("h", 1)), range(101, 16383, node("h", 2))]));
        assert_eq!(
            Route::from_slots(&v).unwrap_err(),
            "slot 100 has no owner (the cluster does not cover every slot)"
        );
        let v = Value::Array(Some(vec![range(0, 16384, node("h", 1))]));
        assert!(Route::from_slots(&v).unwrap_err().contains("0-16384"));
        assert!(Route::from_slots(&Value::Error("ERR This instance has cluster support disabled".into()))
            .is_err());
    }

    #[test]
    fn redirects_are_read_from_error_replies() {
        let m = Redirect::parse(b"MOVED 3999 127.0.0.1:6381").expect("a redirect");
        assert_eq!(m, Redirect { ask: false, slot: 3999, addr: "127.0.0.1:6381".into() });
        assert!(Redirect::parse(b"ASK 12 10.0.0.2:7000").expect("a redirect").ask);
        assert_eq!(Redirect::parse(b"MOVED 16384 h:1"), None, "no such slot");
        assert_eq!(Redirect::parse(b"ERR wrong number of arguments"), None);
        assert_eq!(Redirect::parse(b"MOVED 1 h:1 extra"), None);
    }
}
