//! Emulated slow NVMM, as the Mojim paper's PMEP emulator did (§6.1): a delay after every
//! persistence barrier and a cap on the bandwidth of persistent writes, charged by spinning.
//!
//! DRAM (tmpfs) stands in for NVMM everywhere else in Mojim. NVMM is slower to persist to than
//! DRAM, and the paper's finding hangs on it: replicating to a mirror's memory over a fast
//! network (M-sync) beats persisting locally to slow NVMM (S-unreplicated). The model is
//! applied by the mapping after each barrier it issues (`clwb`/`clflush` + `sfence`, or the
//! streaming copy's fence), so every persist of a region or log that carries an [`Nvmm`] pays:
//!
//! ```text
//!   delay = barrier + the time its bytes wait for the write bandwidth
//! ```
//!
//! The bandwidth is one device shared by every thread that persists through the same [`Nvmm`]:
//! each persist reserves `bytes / rate` on a common timeline (after whatever is already
//! reserved), then spins until its reservation ends plus the barrier delay. Spinning, not
//! sleeping: a sleep is tens of microseconds at best, far above the delays modelled.
//!
//! A mapping without an [`Nvmm`] (the default, and whenever both settings are 0) pays one
//! untaken branch. Counters say how many barriers and bytes were charged, so that tests can
//! check the model is applied without timing anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The emulated medium: what one persistence barrier costs beyond the real instructions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmmModel {
    /// Added to every persistence barrier (the paper's PMEP: about 1 µs per `sfence`-class
    /// barrier). Zero: none.
    pub barrier: Duration,
    /// Most bytes per second persisted, shared by every thread using the same [`Nvmm`]. Zero:
    /// no cap.
    pub write_bytes_per_s: u64,
}

impl NvmmModel {
    /// Whether the model adds nothing (then no [`Nvmm`] is made for it).
    pub fn is_off(&self) -> bool {
        self.barrier.is_zero() && self.write_bytes_per_s == 0
    }

    /// What the model charges one barrier over `bytes` when nothing else is being written.
    pub fn delay(&self, bytes: u64) -> Duration {
        self.barrier + Duration::from_nanos(self.transfer_ns(bytes))
    }

    fn transfer_ns(&self, bytes: u64) -> u64 {
        match self.write_bytes_per_s {
            0 => 0,
            rate => (bytes as u128 * 1_000_000_000 / rate as u128).min(u64::MAX as u128) as u64,
        }
    }
}

/// What an [`Nvmm`] has charged so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmmCounters {
    /// Persistence barriers charged.
    pub barriers: u64,
    /// Bytes in the ranges those barriers persisted.
    pub bytes: u64,
    /// Nanoseconds of delay the model asked for (its arithmetic, not a measurement).
    pub delay_ns: u64,
}

/// One emulated NVMM device: the model, its bandwidth timeline and its counters. Shared (in an
/// `Arc`) by every file of one role that lives on it: the primary's region, or the mirror's
/// data area and logs.
#[derive(Debug)]
pub struct Nvmm {
    model: NvmmModel,
    /// Time zero of `busy_until_ns`.
    origin: Instant,
    /// When the device finishes the writes reserved so far, in nanoseconds after `origin`.
    busy_until_ns: AtomicU64,
    barriers: AtomicU64,
    bytes: AtomicU64,
    delay_ns: AtomicU64,
}

impl Nvmm {
    /// A device for `model`, or `None` when the model adds nothing (so that mappings pay
    /// nothing for it).
    pub fn shared(model: NvmmModel) -> Option<Arc<Nvmm>> {
        if model.is_off() {
            return None;
        }
        Some(Arc::new(Nvmm {
            model,
            origin: Instant::now(),
            busy_until_ns: AtomicU64::new(0),
            barriers: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            delay_ns: AtomicU64::new(0),
        }))
    }

    pub fn model(&self) -> NvmmModel {
        self.model
    }

    pub fn counters(&self) -> NvmmCounters {
        NvmmCounters {
            barriers: self.barriers.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            delay_ns: self.delay_ns.load(Ordering::Relaxed),
        }
    }

    /// Charges one barrier that persisted `bytes`: spins until the bytes have gone through the
    /// device's bandwidth (after what others reserved before) and the barrier delay has passed.
    /// Allocates nothing.
    pub fn charge(&self, bytes: usize) {
        let start = Instant::now();
        let mut wait_ns = self.model.barrier.as_nanos().min(u64::MAX as u128) as u64;
        let transfer = self.model.transfer_ns(bytes as u64);
        if transfer > 0 {
            let now = start.saturating_duration_since(self.origin).as_nanos() as u64;
            let reserve = |busy: u64| Some(transfer_done(busy, now, transfer));
            // The closure always returns `Some`: both arms hold the previous value.
            let before = match self.busy_until_ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, reserve) {
                Ok(v) | Err(v) => v,
            };
            let done = transfer_done(before, now, transfer);
            wait_ns = wait_ns.saturating_add(done - now);
        }
        self.barriers.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.delay_ns.fetch_add(wait_ns, Ordering::Relaxed);
        let until = start + Duration::from_nanos(wait_ns);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// When a transfer of `transfer` ns asked for at `now` ends on a device busy until `busy`: it
/// starts once the device is free.
fn transfer_done(busy: u64, now: u64, transfer: u64) -> u64 {
    busy.max(now).saturating_add(transfer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_model_makes_no_device() {
        assert!(Nvmm::shared(NvmmModel::default()).is_none());
        let m = NvmmModel { barrier: Duration::from_nanos(1), write_bytes_per_s: 0 };
        assert!(Nvmm::shared(m).is_some());
    }

    #[test]
    fn the_delay_is_the_barrier_plus_the_transfer() {
        let m = NvmmModel { barrier: Duration::from_nanos(500), write_bytes_per_s: 1_000_000_000 };
        assert_eq!(m.delay(4096), Duration::from_nanos(500 + 4096));
        assert_eq!(NvmmModel { write_bytes_per_s: 0, ..m }.delay(4096), Duration::from_nanos(500));
    }

    #[test]
    fn a_transfer_waits_behind_those_reserved_before_it() {
        assert_eq!(transfer_done(0, 1000, 3000), 4000, "an idle device starts at once");
        assert_eq!(transfer_done(5000, 1000, 3000), 8000, "a busy one after what it has");
        assert_eq!(transfer_done(u64::MAX, 0, 1), u64::MAX);
    }

    #[test]
    fn charges_are_counted_with_the_delay_they_ask_for() {
        // 1 byte per µs and 100 ns per barrier: each charge of 3 bytes asks for at least 3.1 µs.
        let m = NvmmModel { barrier: Duration::from_nanos(100), write_bytes_per_s: 1_000_000 };
        let n = Nvmm::shared(m).expect("a model that adds something");
        n.charge(3);
        n.charge(3);
        let c = n.counters();
        assert_eq!((c.barriers, c.bytes), (2, 6));
        assert!(c.delay_ns >= 2 * 3100, "{c:?}");
    }
}
