//! `log`: a backup killed and restarted catches up from its mirror's log.

use super::node::wait_status;
use super::result::ResyncResult;
use super::round::{bar, fill, Round, COUNT_BAR};
use super::{failed, CHUNK, GROUP_CHUNKS, POLL};
use crate::bench::harness::Scratch;
use mojim::config::{ConfigFile, Mode};
use mojim::error::Result;
use mojim::primary::Primary;
use mojim_core::Range;
use mojim_node::{BackupStatus, MirrorStatus};
use std::time::{Duration, Instant};

impl<'a> Round<'a> {
    /// `log`: a mirror with one backup; the backup is killed, the primary changes the chunks,
    /// and the restarted backup catches up from the mirror's log. On a new (sparse) region of
    /// the same size: the catch-up's work is the changed bytes, not the region's.
    pub(super) fn log(&mut self) -> Result<ResyncResult> {
        let scratch = Scratch::create(self.dir.0.join("log"))?;
        let region = scratch.0.join("region.mojim");
        mojim::create_region(&region, self.id)?;
        let changed = self.chunks.len() as u64 * CHUNK;
        // The mirror keeps every group until the backup has it; one writer uses one lane.
        let log_capacity = (2 * changed + (64 << 20)).next_multiple_of(CHUNK);
        let keep = |f: &mut ConfigFile| {
            f.mirror.log_capacity = log_capacity.to_string();
            f.mirror.secondary_tier_thresh = log_capacity.to_string();
        };
        let cfg = self.config(&scratch.0, "backup", keep)?;
        let mut backup = self.node(&cfg, &scratch.0.join("backup"))?;
        let backup_addr = backup.addr.clone();
        let cfg = self.config(&scratch.0, "mirror", |f| {
            keep(f);
            f.mirror.backups = vec![backup_addr];
        })?;
        let mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        let mut admin = mirror.admin()?;
        let p = Primary::open(&self.options(&region, &mirror.addr, Mode::Sync))?;
        let link = |st: &MirrorStatus| st.backups.first().cloned().unwrap_or_default();
        // A backup in service: it has received groups (and so created its log) before it fails.
        let mut page = vec![0u8; CHUNK as usize];
        fill(&mut page, &mut self.rng);
        p.write(0, &page)?;
        p.msync(0, CHUNK)?;
        let warm = p.status().next_seq.saturating_sub(1);
        wait_status(&mut admin, "log", Duration::from_secs(30), |st| {
            let l = link(st);
            l.connected && l.acked_seq >= warm
        })?;

        self.say(&format!(
            "log: killing the backup, changing {} chunks of 4KiB as groups",
            self.chunks.len()
        ));
        backup.kill();
        let pb = bar(self.a, self.chunks.len() as u64, COUNT_BAR, "chunks changed while the backup is away");
        for group in self.chunks.clone().chunks(GROUP_CHUNKS) {
            let mut ranges = Vec::with_capacity(group.len());
            for &off in group {
                fill(&mut page, &mut self.rng);
                p.write(off, &page)?;
                ranges.push(Range::new(off, CHUNK));
            }
            p.gmsync(&ranges)?;
            pb.inc(group.len() as u64);
        }
        pb.finish_and_clear();
        let st = self.wait_applied(&p, &mut admin, "log")?;
        let applied = st.applied_seq;
        let st = wait_status(&mut admin, "log", Duration::from_secs(30), |st| !link(st).connected)?;
        let before: BackupStatus = link(&st);
        if before.acked_seq >= applied {
            return Err(failed(
                "log",
                format!(
                    "the killed backup had acknowledged {} of {applied} groups already",
                    before.acked_seq
                ),
            ));
        }

        backup.restart()?;
        let restarted = Instant::now();
        let deadline = restarted + Duration::from_secs(60) + Duration::from_secs(changed / 1_000_000);
        let mut connected: Option<Instant> = None;
        let done = loop {
            let st = admin.status()?;
            let l = link(&st);
            let now = Instant::now();
            if l.needs_copy {
                return Err(failed(
                    "log",
                    format!("the mirror says the restarted backup needs a full copy: {:?}", l.error),
                ));
            }
            if l.connected {
                connected.get_or_insert(now);
                if l.acked_seq >= st.applied_seq {
                    break now;
                }
            }
            if now > deadline {
                return Err(failed(
                    "log",
                    format!(
                        "the restarted backup did not catch up in {:.0} s: {l:?}",
                        (now - restarted).as_secs_f64()
                    ),
                ));
            }
            std::thread::sleep(POLL);
        };
        let connected = connected.expect("set before the loop breaks");
        let mut backup_admin = backup.admin()?;
        wait_status(&mut backup_admin, "log", Duration::from_secs(60), |st| st.applied_seq >= applied)?;
        let verified = self.compare_changed(&p, &mut backup_admin, "log")?;
        let mut r = ResyncResult::new("log", changed, (done - connected).as_secs_f64(), self, verified);
        r.since_restart_s = Some((done - restarted).as_secs_f64());
        drop(backup_admin);
        drop(admin);
        p.close()?;
        Ok(r)
    }
}
