//! `mojim backup add|remove|wait`: change which backups a running mirror feeds, and wait for a
//! backup to be fed, over the operator connection (the `backup_add` and `backup_remove`
//! commands, docs/FORMAT.md §3.6).

use crate::{admin, AddrArgs};
use clap::{Args, Subcommand};
use mojim::Error;
use mojim_node::admin_client::AdminClient;
use std::io::Write;
use std::time::Duration;

pub(crate) const ABOUT: &str = "Add or remove a backup of a running mirror, without restarting it: `add` \
starts feeding the backup as one named in [mirror] backups at start would be (a full copy while the \
primary keeps syncing, then every group); `remove` ends the feed and releases the log space held for \
it; `wait` waits until the mirror feeds a backup (its full copy landed). The change lasts until the \
mirror restarts: put it in the mirror's [mirror] backups (or --backup) too, for the next start. \
Refused: the mirror's own address, a backup it already feeds, more than 16, removing one it does not \
feed. Under TLS it needs an operator's (or a node's) certificate, as `mojim promote` does.";

#[derive(Subcommand)]
pub(crate) enum BackupCommand {
    /// Start feeding BACKUP from the mirror at --addr (not kept across the mirror's restart:
    /// also put it in the mirror's [mirror] backups).
    Add(BackupArgs),
    /// Stop feeding BACKUP from the mirror at --addr and release the log space held for it (not
    /// kept across the mirror's restart: also take it out of the mirror's [mirror] backups).
    Remove(BackupArgs),
    /// Wait until the mirror at --addr feeds BACKUP: connected, its full copy (if it needs one)
    /// landed.
    Wait(BackupArgs),
}

#[derive(Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    target: AddrArgs,
    /// The backup's address (its [mirror] listen).
    backup: String,
    /// With add: then wait as `mojim backup wait` does.
    #[arg(long)]
    wait: bool,
}

pub(crate) fn run(c: BackupCommand) -> mojim::Result<()> {
    let (a, op) = match c {
        BackupCommand::Add(a) => (a, "backup_add"),
        BackupCommand::Remove(a) => (a, "backup_remove"),
        BackupCommand::Wait(a) => {
            let mut node = admin(&a.target)?;
            return wait_fed(&mut node, &a.backup);
        }
    };
    let mut node = admin(&a.target)?;
    let json = serde_json::json!({ "op": op, "addr": a.backup }).to_string();
    let reply = node.command(&json)?;
    println!("{reply}");
    let mirror = node.status()?.listen;
    if op == "backup_add" {
        eprintln!(
            "{mirror} feeds {} now, until it restarts: also add it to the mirror's [mirror] backups",
            a.backup
        );
        if a.wait {
            wait_fed(&mut node, &a.backup)?;
        }
    } else {
        eprintln!(
            "{mirror} no longer feeds {}, until it restarts: also take it out of the mirror's [mirror] backups",
            a.backup
        );
    }
    Ok(())
}

/// Waits until the mirror on `m` feeds `backup`: its link is up and no full copy to it is
/// unfinished. Says what the link waits for when that changes.
pub(crate) fn wait_fed(m: &mut AdminClient, backup: &str) -> mojim::Result<()> {
    let mut said = None;
    loop {
        let st = m.status()?;
        let Some(b) = st.backups.iter().find(|b| b.addr == backup) else {
            return Err(Error::Config(format!(
                "{} does not feed {backup} (it feeds {}); `mojim backup add` it first",
                st.listen,
                if st.backups.is_empty() {
                    "none".to_string()
                } else {
                    st.backups.iter().map(|b| b.addr.as_str()).collect::<Vec<_>>().join(", ")
                }
            )));
        };
        if b.connected && !b.copying && !b.needs_copy {
            println!("{} feeds {backup}: up to group {}", st.listen, b.acked_seq);
            let _ = std::io::stdout().flush();
            return Ok(());
        }
        if let Some(e) = &b.error {
            if said.as_ref() != Some(e) {
                eprintln!("{backup}: {e}");
                said = Some(e.clone());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
