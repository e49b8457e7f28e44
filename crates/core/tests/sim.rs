//! The deterministic simulator over many seeds.
//!
//! `MOJIM_SIM_SEED=<seed>` runs one seed (to replay a failure), `MOJIM_SIM_SEEDS=<n>` runs `n`
//! seeds, and `MOJIM_SIM_STEPS=<n>` changes the length of each run.

use mojim_core::sim::{run, Sabotage, SimConfig, SimReport};
use std::time::Instant;

const DEFAULT_SEEDS: u64 = 200;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not an unsigned integer")))
}

fn config(seed: u64) -> SimConfig {
    let c = SimConfig::new(seed);
    match env_u64("MOJIM_SIM_STEPS") {
        Some(steps) => c.with_steps(steps),
        None => c,
    }
}

#[test]
fn seeded_runs_keep_the_invariants() {
    let (seeds, single) = match env_u64("MOJIM_SIM_SEED") {
        Some(seed) => (seed..=seed, true),
        None => (1..=env_u64("MOJIM_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS), false),
    };
    let started = Instant::now();
    let mut total = SimReport::default();
    let mut runs = 0u64;
    let mut most_lanes = 0;
    for seed in seeds {
        match run(config(seed)) {
            Ok(report) => {
                if single {
                    eprintln!("seed {seed}: {report}");
                }
                total.add(&report);
                most_lanes = most_lanes.max(report.lanes);
                runs += 1;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    eprintln!("{runs} runs in {:?}: {total}", started.elapsed());
    if runs >= 50 {
        // The faults the invariants are about did happen, so the runs were not vacuous.
        assert!(total.groups_acked > 1000, "{total}");
        // Some runs use many lanes, toward the node's limit (`handshake::MAX_LANES`).
        assert!(most_lanes > 32, "at most {most_lanes} lanes in {runs} runs");
        assert!(total.crashes > 0 && total.torn_writes > 0 && total.torn_applies > 0);
        // Power cuts happened and lost writes that were never persisted.
        assert!(total.power_cuts > 0 && total.writes_lost > 0, "{total}");
        assert!(total.seal_crashes > 0 && total.recovery_crashes > 0);
        assert!(total.disconnects > 0 && total.groups_dropped > 0);
        assert!(total.groups_recovered > 0 && total.groups_discarded > 0);
        assert!(total.stale_injected > 0 && total.replays_injected > 0 && total.log_full_waits > 0);
        // Fail-over happened: promotions while the old primary ran on, partitions noticed only by
        // timeouts, stale primaries refused at the handshake and writing into the void.
        assert!(total.promotions > 0 && total.partitions > 0 && total.frames_lost > 0, "{total}");
        assert!(total.timeouts > 0 && total.epoch_refusals > 0 && total.fenced_groups > 0, "{total}");
        // The data area's media failed: the node's engine fail-stopped, and restarts lost nothing.
        assert!(total.fail_stops > 0, "{total}");
        // Every bad frame delivered was refused (a run fails otherwise); the rest were still in
        // flight when their session ended for another reason.
        assert!(total.violations_detected > total.violations_injected / 2, "{total}");
        // A hostile peer that authenticated sent group numbers only the session's window refuses:
        // groups already received on another lane, and numbers far ahead (up to 2^64-2).
        assert!(total.seq_resends_injected > 0 && total.seq_ahead_injected > 0, "{total}");
        assert!(total.seq_window_refusals > 0, "{total}");
        // The ack gate held acknowledgements for the backups, over the threshold and in chain
        // mode.
        assert!(total.acks_held > total.acks_held_chain && total.acks_held_chain > 0, "{total}");
        // The mirror needed copies (wiped, discarded, a primary's new generation, a split brain
        // resolved by a discard); copies began, crashes and power cuts interrupted some, and
        // others ran to their end, checked against the fold and the generation.
        assert!(total.copy_faults > 0 && total.split_brains > 0, "{total}");
        assert!(total.copies_begun > total.copies_completed && total.copies_completed > 0, "{total}");
        assert!(total.crashes_mid_copy > 0, "{total}");
        // Copy frames corrupted in flight were asked for again (CopyRetry) and sent again before
        // their copy could end.
        assert!(total.copy_retries > 0, "{total}");
        // Primaries caught a returning mirror up from their metadata log.
        assert!(total.catch_ups > 0, "{total}");
        // Degraded primaries stored without their mirror, and bitmap copies brought it.
        assert!(total.degraded_writes > 0, "{total}");
        // Primaries without a mirror refused sync points, and later sessions sent their bytes.
        assert!(total.refused_syncs > 0, "{total}");
    }
}

#[test]
fn same_seed_same_run() {
    let a = run(SimConfig::new(42).with_steps(800)).expect("seed 42");
    let b = run(SimConfig::new(42).with_steps(800)).expect("seed 42");
    assert_eq!(a, b);
}

#[test]
fn a_fault_free_run_acknowledges_everything() {
    let mut c = SimConfig::new(7).with_steps(1500);
    c.faults = mojim_core::sim::FaultRates::NONE;
    let r = run(c).expect("fault-free run");
    assert_eq!(r.crashes + r.disconnects + r.violations_injected, 0);
    assert_eq!(r.promotions + r.partitions + r.timeouts + r.frames_lost, 0, "{r}");
    assert_eq!(r.groups_failed, 0, "{r}");
    assert_eq!(r.groups_acked, r.groups_sent, "{r}");
    assert_eq!(r.groups_applied, r.groups_sent, "{r}");
}

/// The checks are not vacuous: a mirror broken on purpose is caught, with its seed named.
///
/// When last measured (2026-11-29), of seeds 1..=100 at 1500 steps each, the seeds that caught
/// each sabotage, and the first (seed, step):
///
/// | sabotage | seeds | first | | sabotage | seeds | first |
/// |---|---:|---|---|---|---:|---|
/// | AckBeforeEnd | 87 | 1, 283 | | EpochNotPersisted | 29 | 5, 1370 |
/// | LogsLostOnRestart | 65 | 1, 1390 | | SecondSession | 43 | 2, 1143 |
/// | TailBeforeData | 54 | 1, 661 | | AckPastThreshold | 26 | 7, 145 |
/// | SkippedPersist | 66 | 1, 661 | | ChainAckEarly | 14 | 2, 4 |
/// | GapAfterRestart | 26 | 3, 1551 | | CopyCompleteAtBegin | 93 | 1, 163 |
/// | AcceptStaleEpoch | 26 | 3, 1340 | | CatchUpFromApplied | 3 | 6, 1507 |
/// | PersistGroupOnly | 4 | 15, 1436 | | UnmarkedStore | 1 | 76, 1502 |
/// | NoSeqWindow | 20 | 1, 848 | | RefusedSyncUnrecorded | 8 | 11, 415 |
///
/// The rarest get 300 seeds here. Seeds shift whenever the simulator draws differently.
#[test]
fn sabotaged_mirrors_are_caught() {
    for (sabotage, expect) in [
        // Faults in the node's record rules: an Ack as soon as a group's first record is in the
        // log; a persist of a group's own records without the Pad before them (found in the
        // daemon by reading it: a power cut must come while a Pad is unpersisted and still
        // needed by the scan; a lost pad also hides a group whose apply it interrupted).
        (Sabotage::AckBeforeEnd, &["acknowledged loss"][..]),
        (Sabotage::PersistGroupOnly, &["acknowledged loss", "torn or lost group"][..]),
        // Faults in the media under the node's own executor and scan: logs that lose their
        // records at a restart (acknowledged groups lost, an interrupted apply left torn), a
        // reordered persist (the data's write-back lands after its applied number and tail),
        // and a skipped one.
        (Sabotage::LogsLostOnRestart, &["acknowledged loss", "torn or lost group"][..]),
        (Sabotage::TailBeforeData, &["torn or lost group", "acknowledged loss"][..]),
        (Sabotage::SkippedPersist, &["torn or lost group", "acknowledged loss"][..]),
        // Found by this simulator in the daemon: see `Sabotage::GapAfterRestart`. Resuming past
        // a number far ahead that the session's window refused (it still counts as seen) leaves
        // the primary no sequence number at all.
        (Sabotage::GapAfterRestart, &["stuck", "no sequence number is left"][..]),
        (Sabotage::AcceptStaleEpoch, &["fencing broken"][..]),
        // Faults in the node's session slot: no numbers taken for the session (per-lane checks
        // alone store a group another lane already took, or a number far ahead); an adopted
        // epoch not persisted (a restart forgets it); a session begun over a live one (the old
        // one is never sealed, or a lane of it still holds an open group: the lane's own
        // assertion stops it).
        (Sabotage::NoSeqWindow, &["stored a SeqResend frame", "stored a SeqAhead frame"][..]),
        (Sabotage::EpochNotPersisted, &["restarted at epoch"][..]),
        (
            Sabotage::SecondSession,
            &["wait to be applied", "its connections belong to", "begin with an open group"][..],
        ),
        // Faults in the node's ack gate: an acknowledgement over the secondary tier's threshold
        // (it takes a run with backups, not in chain mode, whose backups fall behind by more
        // than its logs hold), and one in chain mode before every backup has its group.
        (Sabotage::AckPastThreshold, &["secondary tier broken"][..]),
        (Sabotage::ChainAckEarly, &["chain broken"][..]),
        // A fault in the copy's bookkeeping in the node's session slot: a copy recorded complete
        // when it begins. The half-copied area reads consistent as soon as a copied byte lands.
        (Sabotage::CopyCompleteAtBegin, &["the area reads consistent"][..]),
        // A fault in the primary's metadata log: the catch-up starts after the mirror's applied
        // number alone, as the library's did until this simulator's primaries kept the log.
        (Sabotage::CatchUpFromApplied, &["were never sent again"][..]),
        // A fault in the primary's dirty bitmap: a store without the mirror left unmarked. It
        // takes a degraded period with a bitmap that no wipe, discard or promotion makes moot,
        // and a quiet moment before the bytes are written again.
        (Sabotage::UnmarkedStore, &["were never sent again"][..]),
        // A sync point refused for want of a mirror left out of the metadata log, as the
        // library's primary did.
        (Sabotage::RefusedSyncUnrecorded, &["were never sent again"][..]),
    ] {
        let seeds = match sabotage {
            Sabotage::PersistGroupOnly | Sabotage::UnmarkedStore => 300,
            _ => 100,
        };
        let caught = (1..=seeds)
            .find_map(|seed| run(SimConfig::new(seed).with_sabotage(sabotage).with_steps(1500)).err());
        let failure = caught.unwrap_or_else(|| panic!("{sabotage:?} was never detected"));
        let text = failure.to_string();
        assert!(
            expect.iter().any(|e| text.contains(e))
                && text.contains(&format!("MOJIM_SIM_SEED={}", failure.seed)),
            "{sabotage:?} caught for another reason:\n{text}"
        );
        eprintln!(
            "{sabotage:?} caught with seed {} at step {}: {}",
            failure.seed, failure.step, failure.message
        );
    }
}

/// Without the session's window (each lane checking its own numbers), both hostile cases get
/// through: a group already received on another lane sent again, and a Data or Skip frame
/// numbered far ahead (up to 2^64-2). In runs of 1500 steps about one seed in five catches it
/// (38 of seeds 1..=200 when this was written): when last measured, a number far ahead first at
/// seed 6 (step 1039), a resend on another lane first at seed 26 (step 283).
#[test]
fn a_mirror_without_the_session_window_stores_both_hostile_cases() {
    let mut first = [None, None];
    for seed in 1..=150 {
        let Err(failure) = run(SimConfig::new(seed).with_sabotage(Sabotage::NoSeqWindow).with_steps(1500))
        else {
            continue;
        };
        let case = if failure.message.contains("stored a SeqResend frame") {
            0
        } else if failure.message.contains("stored a SeqAhead frame") {
            1
        } else if failure.message.contains("already applied")
            || failure.message.contains("starts with a record of group")
        {
            // The stored frame tripped the checkpointer's own order check, or the check of a
            // group read back from its log, before the checker named it (a Skip far ahead
            // covering numbers already applied, a group number taken twice): caught, but
            // neither case by name.
            continue;
        } else {
            panic!("NoSeqWindow caught for another reason:\n{failure}");
        };
        first[case].get_or_insert((seed, failure.step));
        if first.iter().all(Option::is_some) {
            break;
        }
    }
    let [resend, ahead] = first;
    eprintln!("NoSeqWindow: a resend on another lane stored at (seed, step) {resend:?}, a number far ahead at {ahead:?}");
    assert!(resend.is_some() && ahead.is_some(), "not both caught: resend {resend:?}, ahead {ahead:?}");
}
