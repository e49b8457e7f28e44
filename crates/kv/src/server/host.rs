//! What the commands learn of the server: the primary's replication state, the clients, the
//! counters, the Sentinel view.

use crate::cmd::{Host, Replication, Sentinel, Stats};
use crate::options::{split_host_port, KvOptions};
use mojim::{Mode, Primary};

/// The host of one turn's commands.
pub struct ServerHost<'a> {
    pub primary: &'a Primary,
    pub opts: &'a KvOptions,
    pub listen: &'a str,
    pub clients: usize,
    pub stats: Stats,
}

impl Host for ServerHost<'_> {
    fn replication(&self) -> Replication {
        let st = self.primary.status();
        let mode = self.primary.mode();
        let acked = st.acked_seq.iter().copied().max().unwrap_or(0);
        let sent = st.next_seq.saturating_sub(1);
        let state = if mode == Mode::Unreplicated {
            "none"
        } else if st.failed.is_some() && st.degraded {
            "degraded"
        } else if st.failed.is_some() {
            "lost"
        } else {
            "online"
        };
        let durable = i64::from(mode.waits_for_mirror() && state == "online");
        Replication {
            mode: mode.name().to_string(),
            mirror: if mode == Mode::Unreplicated { String::new() } else { st.mirror.clone() },
            state: state.to_string(),
            lag_groups: sent.saturating_sub(acked),
            acked_seq: acked,
            durable_replicas: durable,
            epoch: st.epoch,
        }
    }

    fn connected_clients(&self) -> usize {
        self.clients
    }

    fn listen_addr(&self) -> String {
        self.listen.to_string()
    }

    fn stats(&self) -> Stats {
        self.stats.clone()
    }

    fn sentinel(&self) -> Sentinel {
        let me = if self.opts.announce.is_empty() { self.listen } else { &self.opts.announce };
        Sentinel {
            name: self.opts.sentinel_name.clone(),
            master: split_host_port(me).unwrap_or_default(),
            sentinels: self.opts.sentinels.iter().filter_map(|s| split_host_port(s)).collect(),
        }
    }
}
