//! The etcd coordinator (`[cluster] coordinator = "etcd"`), in the manner of Patroni.
//!
//! Keys under the prefix (default `/mojim/<region uuid>`):
//!
//! | key | value | written by |
//! |---|---|---|
//! | `roles` | JSON [`Roles`]: the epoch, the primary's node name, the mirror's node name, the address the primary connects to | the first primary (create-if-absent), the mirror (its name, see below), each take-over (compare-and-swap) |
//! | `leader` | JSON [`Leader`], held with the primary's lease | the primary, while it may acknowledge |
//! | `members/<node>` | the node's listen address | each named daemon at start |
//!
//! Nodes are told apart by their names (`[cluster] node`, `--node`), never by how an address is
//! spelled: a mirror may listen on `0.0.0.0:7420` while the primary connects to
//! `mirror.example:7420`. The first primary writes the roles with the address it replicates to
//! (its `[primary] mirror`) and no mirror name; the daemon that then serves that primary's
//! session (in the roles' epoch) writes its own name into the roles. A take-over names no mirror
//! either, only the first backup's address: that node names itself once the new primary's
//! application connects to it.
//!
//! The primary acknowledges only while its lease is certainly alive and not known to be lost
//! (see `mojim_etcd::Leadership::is_valid`), and demotes itself when it cannot renew it. The
//! mirror named in `roles` watches `leader`: once a primary held it in the current epoch and
//! the key is gone (the lease expired or was revoked), the mirror claims `roles` for epoch + 1
//! with itself as primary and its first backup as mirror, then promotes its copy. The
//! application then starts on the new primary's node (its region is the mirror's
//! `<dir>/data.mojim`), takes the lease, and resynchronises with the new mirror. A node that
//! cannot tell whether it is the mirror (it has no name), or sees the lease expire while the
//! roles name no mirror, says so at start-up and when the lease expires.

//!
//! The coordinator needs the cargo feature `etcd` (on by default). Built without it, a
//! configuration that asks for etcd is refused with an error that names the feature.

use serde::{Deserialize, Serialize};

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "etcd")]
pub use etcd::{Coordinator, Lease};

#[cfg(not(feature = "etcd"))]
mod without_etcd;
#[cfg(not(feature = "etcd"))]
pub use without_etcd::{Coordinator, Lease};

/// Who is who in an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roles {
    /// The epoch these roles hold for; each take-over raises it by one.
    pub epoch: u64,
    /// The primary's node name.
    pub primary: String,
    /// The mirror's node name, written by the mirror itself once it serves the primary's
    /// session in this epoch; empty until then. (Roles written by older versions may hold an
    /// address here: the mirror overwrites it with its name in the same way.)
    pub mirror: String,
    /// The address the primary connects to, as the primary (or the take-over) was given it.
    pub mirror_addr: String,
    /// Written by a mirror's take-over (which then promotes itself): a take-over cut short by a
    /// restart is finished when the node comes back.
    #[serde(default)]
    pub by_takeover: bool,
}

/// The value of the leader key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// The primary's node name.
    pub node: String,
    /// The epoch it leads in.
    pub epoch: u64,
}
