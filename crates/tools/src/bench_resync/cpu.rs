//! CPU time spent by the processes of a measurement.

use mojim::error::{Error, Result};
use std::time::Duration;

/// CPU time spent since it was made by the given processes, less the calling thread's (which
/// only times and waits).
pub(super) struct CpuSpent {
    pub(super) pids: Vec<u32>,
    pub(super) at: Duration,
}

impl CpuSpent {
    pub(super) fn since_now(pids: Vec<u32>) -> Result<CpuSpent> {
        let at = Self::total(&pids)?;
        Ok(CpuSpent { pids, at })
    }

    pub(super) fn total(pids: &[u32]) -> Result<Duration> {
        let mut sum = Duration::ZERO;
        for &pid in pids {
            sum += crate::cpu_time::process(pid)
                .map_err(Error::io(format!("read the CPU time of process {pid}")))?;
        }
        let mine = crate::cpu_time::this_thread().map_err(Error::io("read this thread's CPU time"))?;
        Ok(sum.saturating_sub(mine))
    }

    pub(super) fn seconds(&self) -> Result<f64> {
        Ok(Self::total(&self.pids)?.saturating_sub(self.at).as_secs_f64())
    }
}
