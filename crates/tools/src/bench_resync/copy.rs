//! `full`, `full-tls` and `bitmap`: a primary's copy of its region to a new, empty mirror, and
//! to a returning mirror from the dirty bitmap.

use super::cpu::CpuSpent;
use super::result::ResyncResult;
use super::round::{bar, fill, Round, BYTES_BAR, COUNT_BAR};
use super::{failed, CHUNK, POLL};
use crate::bench::harness::Scratch;
use crate::child::ChildNode;
use mojim::config::Mode;
use mojim::error::{Error, Result};
use mojim::primary::{CopyKind, Primary, ResyncStatus};
use mojim_transport::tls::TlsPaths;
use mojim_transport::TlsContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl<'a> Round<'a> {
    /// `full-tls`: `full` with every link mutual TLS (`[security] tls`, a CA and certificates
    /// made for the round): a new, empty mirror gets the whole region over TLS.
    pub(super) fn full_tls(&mut self) -> Result<ResyncResult> {
        let scratch = Scratch::create(self.dir.0.join("copy-tls"))?;
        let region = scratch.0.join("region.mojim");
        self.prepare(&scratch.0, &region)?;
        self.say("full-tls: a new, empty mirror meets the primary, over mutual TLS");
        crate::certs::make_cluster_certs(&scratch.0, "")?;
        let file = |name: &str| scratch.0.join("tls").join(name);
        let paths = |role: &str| TlsPaths {
            ca: file("ca.pem"),
            cert: file(&format!("{role}.pem")),
            key: file(&format!("{role}.key")),
            crl: None,
        };
        let load = |role: &str| {
            TlsContext::load(&paths(role)).map(Arc::new).map_err(|e| Error::Config(e.to_string()))
        };
        let node = paths("node");
        let cfg = self.config(&scratch.0, "mirror", |f| {
            f.security.tls = true;
            f.security.ca_file = node.ca.to_string_lossy().into_owned();
            f.security.cert_file = node.cert.to_string_lossy().into_owned();
            f.security.key_file = node.key.to_string_lossy().into_owned();
        })?;
        let mut mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        mirror.operator_tls = Some(load("operator")?);
        let mut o = self.options(&region, &mirror.addr, Mode::Sync);
        o.tls = Some(load("application")?);
        let mirror_pid = mirror.child.as_ref().map(ChildNode::pid).expect("just started");
        let cpu = CpuSpent::since_now(vec![std::process::id(), mirror_pid])?;
        let opened = Instant::now();
        let p = Primary::open(&o)?;
        let open_s = opened.elapsed().as_secs_f64();
        let st = self.wait_copy(&p, "full-tls")?;
        let cpu_s = cpu.seconds()?;
        self.expect_full_copy(&st, "full-tls")?;
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "full-tls")?;
        self.compare(&p, &mut admin, &[(0, self.id.size)], "full-tls")?;
        let mut r = ResyncResult::new("full-tls", st.total_bytes, st.seconds, self, "whole region".into());
        r.cpu_s = Some(cpu_s);
        r.open_s = Some(open_s);
        drop(admin);
        p.close()?;
        mirror.kill();
        Ok(r)
    }

    /// A new, empty mirror must have been given the whole region.
    pub(super) fn expect_full_copy(&self, st: &ResyncStatus, stage: &str) -> Result<()> {
        if st.kind == CopyKind::Full && st.total_bytes == self.id.size {
            return Ok(());
        }
        Err(failed(
            stage,
            format!(
                "a new mirror got a {} copy of {} bytes; expected a full copy of {} bytes",
                st.kind.name(),
                st.total_bytes,
                self.id.size
            ),
        ))
    }

    /// `tcp` around `full`, then `bitmap` with the same primary and mirror.
    pub(super) fn full_and_bitmap(&mut self) -> Result<(ResyncResult, ResyncResult, ResyncResult)> {
        let scratch = Scratch::create(self.dir.0.join("copy"))?;
        let region = scratch.0.join("region.mojim");
        self.prepare(&scratch.0, &region)?;

        self.say("full: a new, empty mirror meets the primary");
        let cfg = self.config(&scratch.0, "mirror", |_| {})?;
        let mut mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        let tcp_before = self.tcp()?;
        let mirror_pid = mirror.child.as_ref().map(ChildNode::pid).expect("just started");
        let cpu = CpuSpent::since_now(vec![std::process::id(), mirror_pid])?;
        let opened = Instant::now();
        let p = Primary::open(&self.options(&region, &mirror.addr, Mode::Sync))?;
        let open_s = opened.elapsed().as_secs_f64();
        let st = self.wait_copy(&p, "full")?;
        let full_cpu = cpu.seconds()?;
        self.expect_full_copy(&st, "full")?;
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "full")?;
        let tcp_after = self.tcp()?;
        let tcp = ResyncResult::around(tcp_before, tcp_after, self, "full");
        self.compare(&p, &mut admin, &[(0, self.id.size)], "full")?;
        let mut full = ResyncResult::new("full", st.total_bytes, st.seconds, self, "whole region".into());
        full.cpu_s = Some(full_cpu);
        full.open_s = Some(open_s);
        drop(admin);

        self.say(&format!(
            "bitmap: killing the mirror, changing {} chunks of 4KiB, restarting it",
            self.chunks.len()
        ));
        let before = p.status();
        let old = before.resync.clone();
        mirror.kill();
        let pb = bar(self.a, self.chunks.len() as u64, COUNT_BAR, "chunks changed while degraded");
        let mut page = vec![0u8; CHUNK as usize];
        for &off in &self.chunks {
            fill(&mut page, &mut self.rng);
            p.write(off, &page)?;
            p.msync(off, CHUNK)?;
            pb.inc(1);
        }
        pb.finish_and_clear();
        let st = p.status();
        if !st.degraded || st.dirty_bytes == 0 {
            return Err(failed(
                "bitmap",
                format!(
                    "after the mirror was killed and {} chunks changed, the primary is not degraded with a \
                     dirty bitmap: status {st:?}",
                    self.chunks.len()
                ),
            ));
        }
        let dirty_bytes = st.dirty_bytes;
        mirror.restart()?;
        self.wait_new_resync(&p, before.session, old.as_ref())?;
        let st = self.wait_copy(&p, "bitmap")?;
        if st.kind != CopyKind::Bitmap {
            return Err(failed(
                "bitmap",
                format!(
                    "the restarted mirror got a {} copy of {} bytes; expected a bitmap copy of the {dirty_bytes} \
                     dirty bytes",
                    st.kind.name(),
                    st.total_bytes
                ),
            ));
        }
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "bitmap")?;
        let verified = self.compare_changed(&p, &mut admin, "bitmap")?;
        let bitmap = ResyncResult::new("bitmap", st.total_bytes, st.seconds, self, verified);
        drop(admin);
        p.close()?;
        mirror.kill();
        Ok((tcp, full, bitmap))
    }

    /// Waits for the primary's current copy to finish, showing its progress.
    pub(super) fn wait_copy(&self, p: &Primary, stage: &str) -> Result<ResyncStatus> {
        let Some(first) = p.status().resync else {
            return Err(failed(
                stage,
                "the session began without a copy (the primary planned: in sync)".into(),
            ));
        };
        let pb = bar(self.a, first.total_bytes, BYTES_BAR, &format!("{stage} copy"));
        // Generous: a copy slower than 5 MB/s is broken on any machine this runs on.
        let deadline =
            Instant::now() + Duration::from_secs(60) + Duration::from_secs(first.total_bytes / 5_000_000);
        loop {
            let st = p.wait_resync(Duration::from_millis(200));
            let Some(st) = st else {
                return Err(failed(stage, "the copy's status disappeared".into()));
            };
            pb.set_position(st.sent_bytes);
            if let Some(e) = &st.error {
                pb.finish_and_clear();
                return Err(failed(
                    stage,
                    format!("the {} copy failed: {e}; status {:?}", st.kind.name(), p.status()),
                ));
            }
            if st.done {
                pb.finish_and_clear();
                return Ok(st);
            }
            if Instant::now() > deadline {
                pb.finish_and_clear();
                return Err(failed(
                    stage,
                    format!(
                        "the {} copy did not finish in {:.0} s: {} of {} bytes sent; status {:?}",
                        st.kind.name(),
                        st.seconds,
                        st.sent_bytes,
                        st.total_bytes,
                        p.status()
                    ),
                ));
            }
        }
    }

    /// Waits until the keeper has reconnected (a session other than `old_session`) and that
    /// session's copy has begun.
    pub(super) fn wait_new_resync(
        &self,
        p: &Primary,
        old_session: u64,
        old: Option<&ResyncStatus>,
    ) -> Result<()> {
        let same = |r: &ResyncStatus| {
            old.is_some_and(|o| {
                o.kind == r.kind
                    && o.total_bytes == r.total_bytes
                    && o.seconds.to_bits() == r.seconds.to_bits()
            })
        };
        let t0 = Instant::now();
        let mut reconnected: Option<Instant> = None;
        loop {
            let st = p.status();
            if st.session != 0 && st.session != old_session {
                let at = *reconnected.get_or_insert_with(Instant::now);
                if st.resync.as_ref().is_some_and(|r| !same(r)) {
                    return Ok(());
                }
                if at.elapsed() > Duration::from_secs(2) {
                    return Err(failed(
                        "bitmap",
                        format!(
                            "the restarted mirror's session began without a copy (the primary planned: in sync), \
                             although {} chunks changed while it was away; status {st:?}",
                            self.chunks.len()
                        ),
                    ));
                }
            } else if t0.elapsed() > Duration::from_secs(30) {
                return Err(failed(
                    "bitmap",
                    format!("the primary did not reconnect to the restarted mirror in 30 s; status {st:?}"),
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}
