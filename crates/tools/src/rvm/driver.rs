//! Running a program on recoverable memory: open (recovering), step, commit, fail, reopen.
//!
//! A [`Program`] says how to find or create its state in an open [`Rvm`] and how to take a
//! step; [`run`] does the rest as a [`Schedule`] says, the same for every program.

use super::rvm_error;
use super::schedule::{Event, Injector, Outcome, Schedule};
use mojim::error::{Error, Result};
use mojim_rvm::{Rvm, RvmOptions};
use std::time::Instant;

/// A program's state in recoverable memory, taking steps.
pub trait Steps {
    /// Steps done, as the state says (after a recovery: the steps committed).
    fn done(&self) -> u64;
    /// Takes the next step, storing into the state.
    fn step(&mut self) -> Result<()>;
}

/// A program that keeps its state in recoverable memory.
pub trait Program {
    /// Its state in an open memory.
    type State<'a>: Steps;
    /// What it computes.
    type Answer;
    /// Steps in all.
    fn total(&self) -> u64;
    /// Pages of its state, for reports.
    fn state_pages(&self) -> u64;
    /// Finds its state in `rvm` and reports [`Event::Resumed`], or creates it (discarding
    /// whatever was there), commits it and reports [`Event::Started`]; with `fresh`, always
    /// creates it. A state of another program, or of other parameters, is an error naming it
    /// that changes nothing.
    fn attach<'a>(
        &self,
        rvm: &'a Rvm,
        fresh: bool,
        opened: Instant,
        ev: &mut dyn FnMut(Event),
    ) -> Result<Self::State<'a>>;
    /// The answer, from a finished state.
    fn answer(&self, st: &Self::State<'_>) -> Self::Answer;
}

/// Runs `prog` on the memory of `opts` to the end: commits and injects failures as `s` says
/// (a failure closes the memory without committing and opens it again).
pub fn run<P: Program>(
    prog: &P,
    opts: &RvmOptions,
    s: &Schedule,
    fresh: bool,
    ev: &mut dyn FnMut(Event),
) -> Result<(P::Answer, Outcome)> {
    s.check().map_err(Error::Config)?;
    let t0 = Instant::now();
    let total = prog.total();
    let mut inj = Injector::new(s.fail_every);
    let mut out = Outcome { state_pages: prog.state_pages(), ..Outcome::default() };
    let mut fresh = fresh;
    let mut failed_at: Option<Instant> = None;
    loop {
        let opened = Instant::now();
        let rvm = Rvm::open(opts).map_err(rvm_error)?;
        let status = rvm.status();
        (out.backend, out.tracking) = (status.backend, status.tracking);
        let mut st = prog.attach(&rvm, std::mem::take(&mut fresh), opened, ev)?;
        if let Some(f) = failed_at.take() {
            out.recoveries.push(f.elapsed());
        }
        let mut failed = false;
        while st.done() < total {
            st.step()?;
            out.steps_run += 1;
            let i = st.done();
            if inj.due(i) {
                ev(Event::Failed { step: i });
                failed = true;
                break;
            }
            if s.commit_after(i, total) {
                let tc = Instant::now();
                rvm.txn_commit().map_err(rvm_error)?;
                out.commits.push(tc.elapsed());
                out.pages_sent += rvm.status().last_commit_pages;
                ev(Event::Committed { step: i, total });
            }
        }
        let answer = (!failed).then(|| prog.answer(&st));
        drop(st);
        if failed {
            failed_at = Some(Instant::now());
        }
        rvm.close().map_err(rvm_error)?;
        if let Some(answer) = answer {
            out.failures = inj.failures;
            out.total = t0.elapsed();
            return Ok((answer, out));
        }
    }
}
