//! `mojim rejoin`: a former primary's node comes back as a backup of the current mirror, in one
//! command that says each step as it takes it: its region file placed as the data area, a node
//! serving it, demoted (its copy may hold writes nobody acknowledged), and the mirror's
//! `backup add` for it, until its full copy has landed. Then it stops, and the node is started
//! as every node is, with `mojim serve`.

use crate::{serve_then, ConfigArgs, ServeArgs};
use clap::Args;
use mojim::{Error, RegionLock};
use mojim_node::MirrorOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(crate) const ABOUT: &str = "Bring a former primary's node back as a backup of the current mirror, \
after a promotion elsewhere, in one command that says each step as it takes it:

  1. place the old primary's region file ([region] path, or --region) as <dir>/data.mojim, where \
`mojim serve` keeps its copy (a rename: the same file system); refused while an application still \
has the region open;
  2. serve that folder on --listen, as `mojim serve` would, feeding no backup;
  3. demote the node at the mirror's epoch: its copy may hold writes nobody acknowledged, so it \
takes a full copy from the mirror;
  4. ask the mirror (--mirror) to feed it (`mojim backup add`), and wait until its full copy has \
landed.

Then it stops: start the node as every node is started, `mojim serve --config ... --listen ... \
--dir <dir>` (the mirror feeds it again from its log as soon as it serves). The mirror feeds it \
until the mirror restarts: add this node's address to the mirror's [mirror] backups too.";

#[derive(Args)]
pub(crate) struct RejoinArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// The current mirror's address (the node that is to feed this one).
    #[arg(long)]
    mirror: String,
    /// The old primary's region file, instead of [region] path.
    #[arg(long)]
    region: Option<PathBuf>,
}

/// Prints one step of the rejoin.
fn step(n: u32, what: &str) {
    println!("rejoin {n}/4: {what}");
    let _ = std::io::stdout().flush();
}

pub(crate) fn rejoin(a: RejoinArgs) -> mojim::Result<()> {
    if !a.serve.backups.is_empty() {
        return Err(Error::Config(
            "a rejoining node feeds no backup: leave out --backup (the current mirror feeds the backups)"
                .into(),
        ));
    }
    if a.serve.check_config {
        return Err(Error::Config("--check-config is for `mojim serve`, not `mojim rejoin`".into()));
    }
    let cfg = crate::config_load::load(&a.serve.config.config)?;
    let region = a.region.clone().unwrap_or_else(|| cfg.resolve(&cfg.file.region.path));
    let mut opts = MirrorOptions::from_config(&cfg, a.serve.config.insecure)?;
    if let Some(d) = &a.serve.dir {
        opts.dir = d.clone();
    }
    let data = opts.data_path();
    step(1, &format!("placing the old primary's region {} as {}", region.display(), data.display()));
    // Held while this node serves: no application opens the region or the data area meanwhile.
    let _lock = place(&region, &data)?;
    let (config, mirror) = (a.serve.config.config.clone(), a.mirror.clone());
    let insecure = a.serve.config.insecure;
    step(2, &format!("serving {} (it feeds no backup)", opts.dir.display()));
    let dir = opts.dir.clone();
    let mut serve = a.serve;
    serve.feed_none = true;
    serve_then(serve, move |addr| {
        let me = ConfigArgs { config: config.clone(), insecure };
        after_serving(&me, &mirror, addr)?;
        println!(
            "rejoined: {mirror} feeds {addr}. Now serve it as any node: mojim serve --config {} --listen {addr} \
             --dir {}; and add {addr} to the mirror's [mirror] backups for its next start",
            config.display(),
            dir.display()
        );
        let _ = std::io::stdout().flush();
        Ok(false)
    })
}

/// Renames `region` to `data` (same file system) unless it is there already, and returns the
/// lock on it.
fn place(region: &Path, data: &Path) -> mojim::Result<RegionLock> {
    let same = |x: &Path, y: &Path| match (std::fs::canonicalize(x), std::fs::canonicalize(y)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    if same(region, data) {
        println!("  {} is already this node's data area", data.display());
        return RegionLock::acquire(data);
    }
    match (region.exists(), data.exists()) {
        (false, true) => {
            println!(
                "  {} is gone and {} exists: placed by an earlier rejoin, kept",
                region.display(),
                data.display()
            );
            RegionLock::acquire(data)
        }
        (true, true) => Err(Error::Config(format!(
            "{} exists already: this node's folder holds another copy. Move it away (or point --dir at \
             an empty folder), then run rejoin again",
            data.display()
        ))),
        (false, false) => Err(Error::Config(format!(
            "the old primary's region {} does not exist (nor {}); name it with --region",
            region.display(),
            data.display()
        ))),
        (true, false) => {
            // Refused while an application has the region: it would go on writing a file the
            // node now owns.
            let lock = RegionLock::acquire(region)?;
            if let Some(dir) = data.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(Error::io(format!("create folder {}", dir.display())))?;
            }
            std::fs::rename(region, data).map_err(|e| Error::Io {
                op: format!(
                    "rename {} to {} (they must be on one file system; otherwise copy it there yourself, \
                     and run rejoin again)",
                    region.display(),
                    data.display()
                ),
                source: e,
            })?;
            Ok(lock)
        }
    }
}

/// Steps 3 and 4, once this node serves on `addr`.
fn after_serving(cfg: &ConfigArgs, mirror: &str, addr: &str) -> mojim::Result<()> {
    if addr.starts_with("0.0.0.0:") || addr.starts_with("[::]:") {
        return Err(Error::Config(format!(
            "this node listens on {addr}, which the mirror cannot be told to reach; pass --listen with \
             this node's own address"
        )));
    }
    let connect = |x: &str| {
        crate::admin(&crate::AddrArgs {
            config: ConfigArgs { config: cfg.config.clone(), insecure: cfg.insecure },
            addr: Some(x.to_string()),
        })
    };
    let mut m = connect(mirror)?;
    let mut me = connect(addr)?;
    let epoch = m.status()?.epoch.max(me.status()?.epoch);
    step(
        3,
        &format!("demoting this node at the mirror's epoch {epoch}: it takes a full copy from the mirror"),
    );
    me.command(&format!(r#"{{"op":"demote","epoch":{epoch}}}"#))?;
    step(4, &format!("asking the mirror {mirror} to feed this node ({addr})"));
    let add = serde_json::json!({ "op": "backup_add", "addr": addr }).to_string();
    match m.command(&add) {
        Ok(_) => {}
        Err(Error::Refused { message, .. }) if message.contains("already a backup") => {
            println!("  the mirror feeds {addr} already");
        }
        Err(e) => return Err(e),
    }
    crate::backup::wait_fed(&mut m, addr)?;
    Ok(())
}
