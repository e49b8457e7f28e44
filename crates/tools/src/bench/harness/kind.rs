//! What `--mode` names: a mode of the library, `tcp-rtt`, the disk file, or a scheme on a
//! cluster of its own.

use crate::bench::BenchArgs;
use crate::cluster::Topology;
use mojim::config::Mode;
use mojim::error::{Error, Result};

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Mode(Mode),
    TcpRtt,
    DiskFile,
    /// `sync` on a cluster of its own: a topology, and whether its backup links are slow.
    Scheme(Topology, bool),
}

/// The pseudo-modes naming a [`Kind::Scheme`].
pub(crate) const SCHEME_NAMES: [(&str, Topology, bool); 4] = [
    ("sync-backup", Topology::TwoTier, false),
    ("sync-backup-slow", Topology::TwoTier, true),
    ("chain", Topology::Chain, false),
    ("broadcast", Topology::Broadcast, false),
];

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mode(m) => m.name(),
            Kind::TcpRtt => "tcp-rtt",
            Kind::DiskFile => "unreplicated-disk",
            Kind::Scheme(t, slow) => {
                SCHEME_NAMES.iter().find(|s| s.1 == t && s.2 == slow).map_or("scheme", |s| s.0)
            }
        }
    }
}

pub(crate) fn parse_kinds(a: &BenchArgs) -> Result<Vec<Kind>> {
    let mut out = Vec::new();
    for m in &a.mode {
        let m = m.trim();
        out.push(match m {
            "tcp-rtt" => Kind::TcpRtt,
            _ if SCHEME_NAMES.iter().any(|s| s.0 == m) => {
                let s = SCHEME_NAMES.iter().find(|s| s.0 == m).expect("found");
                Kind::Scheme(s.1, s.2)
            }
            _ => Kind::Mode(m.parse().map_err(|e: mojim::config::UnknownChoice| {
                Error::Config(format!("--mode: {e}; or tcp-rtt"))
            })?),
        });
    }
    if a.disk_file.is_some() {
        out.push(Kind::DiskFile);
    }
    Ok(out)
}
