//! Leadership of one etcd key, held with a lease that a background thread renews.
//!
//! The holder may act as leader while [`Leadership::is_valid`]: until [`Leadership::valid_until`]
//! (the time the last successful grant or keepalive was *sent*, plus the lease's TTL, less a
//! margin for clock-rate differences), and only as long as nothing said the leadership is lost.
//! etcd received that request no earlier than it was sent and counts the TTL from then, so the
//! lease (and with it the key, which nobody else can take while it exists) outlives the validity.
//! A renewal that fails for want of an answer (etcd unreachable, slow, or between leaders) is
//! retried while the validity lasts, and one sent before it lapsed extends it again.
//!
//! The leadership is lost for good, and the holder must stop at once, as soon as the renewer
//! learns that the lease or the key is gone (etcd says the lease expired, or the key was deleted
//! or is held under another lease: an `etcdctl del`, an etcd restored from a snapshot), or when
//! the validity lapsed without a renewal. A renewer that finds the validity lapsed (its process
//! was frozen, say) sends no keepalive, which etcd would still honour, but revokes the lease, so
//! that another node can take the key at once.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::EtcdError;

/// How the lease is timed.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl: Duration,
    renew_every: Duration,
    margin: Duration,
}

/// What the renewer thread and the holder share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when `stop`, `paused` or `renewing` changes.
    changed: Condvar,
}

#[derive(Debug)]
struct State {
    valid_until: Instant,
    /// Why the leadership can no longer be renewed; never cleared once set.
    lost: Option<String>,
    /// The holder resigned or dropped the leadership: the renewer must exit.
    stop: bool,
    /// Renewals are held back (for tests that play a stalled leader).
    paused: bool,
    /// A renewal is in flight.
    renewing: bool,
    /// Renewal attempts finished (whatever their outcome); counted under the lock that sets
    /// `lost`, so a holder that sees the count move past an attempt sees that attempt's verdict.
    renewals: u64,
    /// Once `lost` is set: the renewer's first attempt to revoke the lease has finished (or the
    /// holder stopped waiting for it).
    released: bool,
}

/// Leadership of one key held with a lease (as Patroni holds its leader key).
///
/// Dropping it stops the renewals but leaves the key until the lease expires; [`Leadership::resign`]
/// gives the key up at once.
#[derive(Debug)]
pub struct Leadership {
    client: Client,
    key: String,
    lease: i64,
    timing: Timing,
    shared: Arc<Shared>,
    renewer: Option<JoinHandle<()>>,
}

impl Leadership {
    /// Tries once to take `key`: grants a lease of `ttl` and stores `value` under `key` with it
    /// if the key does not exist. `Ok(None)` if someone else holds the key.
    ///
    /// The lease is renewed every `renew_every`; validity ends `margin` before the lease could
    /// expire. `renew_every` plus the time a renewal takes (up to the client's timeout per
    /// endpoint) must stay below `ttl - margin`, or the validity lapses between renewals.
    pub fn campaign(
        client: Client,
        key: &str,
        value: &[u8],
        ttl: Duration,
        renew_every: Duration,
        margin: Duration,
    ) -> Result<Option<Leadership>, EtcdError> {
        if renew_every.is_zero() || margin >= ttl || renew_every >= ttl - margin {
            return Err(EtcdError::InvalidArgument {
                what: format!(
                    "lease timing ttl {ttl:?}, renew every {renew_every:?}, margin {margin:?}: need \
                     0 < renew_every < ttl - margin"
                ),
            });
        }
        let timing = Timing { ttl, renew_every, margin };
        let sent = Instant::now();
        let (lease, granted) = client.grant_with_ttl(ttl)?;
        match client.create_if_absent(key, value, Some(lease)) {
            Ok(true) => {}
            Ok(false) => {
                // Best effort: an unused lease expires on its own.
                let _ = client.revoke(lease);
                return Ok(None);
            }
            Err(e) => {
                // The transaction may have been applied; revoking the lease deletes the key if so.
                let _ = client.revoke(lease);
                return Err(e);
            }
        }
        // etcd may grant more than asked (never less); count only what was asked.
        let valid_until = sent + granted.min(ttl) - margin;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                valid_until,
                lost: None,
                stop: false,
                paused: false,
                renewing: false,
                renewals: 0,
                released: false,
            }),
            changed: Condvar::new(),
        });
        let renewer = {
            let (client, key, shared) = (client.clone(), key.to_owned(), Arc::clone(&shared));
            thread::Builder::new()
                .name(format!("etcd-lease-{lease:x}"))
                .spawn(move || renew(&client, &key, lease, timing, sent, &shared))
                .map_err(|e| EtcdError::Local { what: format!("cannot start the lease renewal thread: {e}") })
        };
        let renewer = match renewer {
            Ok(r) => r,
            Err(e) => {
                let _ = client.revoke(lease);
                return Err(e);
            }
        };
        Ok(Some(Leadership { client, key: key.to_owned(), lease, timing, shared, renewer: Some(renewer) }))
    }

    /// The instant until which this holder may act as leader.
    pub fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    /// Whether this holder may act as leader now: the validity lasts and the leadership is not
    /// known to be lost (a lease or key found gone ends it before `valid_until`).
    pub fn is_valid(&self) -> bool {
        self.lost().is_none()
    }

    /// Why this holder may no longer act as leader, or `None` while it may. Once set it stays
    /// set.
    ///
    /// The first time it says so, it waits for the renewer's first attempt to revoke the lease
    /// (at most one TTL): a holder that stops, or exits, on this answer leaves no key behind to
    /// delay the next leader.
    pub fn lost(&self) -> Option<String> {
        let mut state = self.state();
        if state.lost.is_none() && Instant::now() >= state.valid_until {
            state.lost = Some("the lease was not renewed in time and the validity lapsed".into());
            self.shared.changed.notify_all();
        }
        let why = state.lost.clone()?;
        let deadline = Instant::now() + self.timing.ttl;
        while !state.released && !state.paused && !state.stop {
            let now = Instant::now();
            if now >= deadline {
                state.released = true;
                break;
            }
            state =
                self.shared.changed.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        Some(why)
    }

    /// How many renewal attempts have finished, successful or not. An attempt counted after a
    /// change in etcd (the key deleted, say) may have looked before it; the next one did not.
    /// No attempt follows one that found the leadership lost.
    pub fn renewals(&self) -> u64 {
        self.state().renewals
    }

    /// The lease the key is held with.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Holds back renewals until the leadership is dropped, as a stalled leader would, and waits
    /// for a renewal in flight to finish: `valid_until` does not move after this returns.
    #[cfg(any(test, feature = "testing"))]
    pub fn pause_renewal(&self) {
        let mut state = self.state();
        state.paused = true;
        while state.renewing {
            state = self.shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Lets renewals go on after [`Leadership::pause_renewal`], as a stalled leader that wakes
    /// up would.
    #[cfg(any(test, feature = "testing"))]
    pub fn resume_renewal(&self) {
        self.state().paused = false;
        self.shared.changed.notify_all();
    }

    /// Gives up the leadership: stops renewing and revokes the lease, which deletes the key.
    pub fn resign(mut self) -> Result<(), EtcdError> {
        self.stop_renewer();
        match self.client.revoke(self.lease) {
            Ok(()) | Err(EtcdError::LeaseExpired { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The renewer never panics while holding the lock, and the state stays consistent if it did.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stop_renewer(&mut self) {
        self.state().stop = true;
        self.shared.changed.notify_all();
        if let Some(renewer) = self.renewer.take() {
            // A second panic while this one unwinds would abort; the first one tells enough.
            if renewer.join().is_err() && !thread::panicking() {
                panic!("the lease renewal thread of {:?} panicked", self.key);
            }
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.renewer.is_some() {
            self.stop_renewer();
        }
    }
}

/// The renewer thread: renews `lease` every `renew_every` after `sent` and checks `key` is
/// still held with it, until stopped or the leadership is lost; then it lets the lease go.
fn renew(client: &Client, key: &str, lease: i64, timing: Timing, sent: Instant, shared: &Shared) {
    let lock = || shared.state.lock().unwrap_or_else(|p| p.into_inner());
    let mut next = sent + timing.renew_every;
    loop {
        let mut state = lock();
        loop {
            let now = Instant::now();
            if state.stop {
                return;
            }
            if state.lost.is_some() && !state.paused {
                // The holder saw the validity lapse first.
                drop(state);
                return let_go(client, lease, timing, shared);
            }
            if !state.paused && now >= next {
                break;
            }
            state = if state.paused {
                shared.changed.wait(state).unwrap_or_else(|p| p.into_inner())
            } else {
                shared.changed.wait_timeout(state, next - now).unwrap_or_else(|p| p.into_inner()).0
            };
        }
        let sent = Instant::now();
        if sent >= state.valid_until {
            // This process was held up (frozen, or starved) past the validity. etcd would still
            // honour a keepalive sent now, which could not make this holder valid again but would
            // keep the key from the node that should take over.
            state.lost = Some(format!(
                "the validity of lease {lease:#x} of {key:?} lapsed {:?} before its renewal could be sent \
                 (was this process stopped or starved?)",
                sent - state.valid_until
            ));
            drop(state);
            return let_go(client, lease, timing, shared);
        }
        state.renewing = true;
        drop(state);

        let outcome = renew_once(client, key, lease);

        let mut state = lock();
        state.renewing = false;
        state.renewals += 1;
        shared.changed.notify_all();
        if state.lost.is_some() {
            // The holder saw the validity lapse; a late success must not revive it.
            drop(state);
            return let_go(client, lease, timing, shared);
        }
        match outcome {
            Ok(ttl) => {
                let until = sent + ttl.min(timing.ttl) - timing.margin;
                state.valid_until = state.valid_until.max(until);
                next = sent + timing.renew_every;
            }
            Err(Renewal::Gone(why)) => {
                state.lost = Some(why);
                drop(state);
                return let_go(client, lease, timing, shared);
            }
            Err(Renewal::Unanswered(why)) => {
                // Try again soon, while a success could still count.
                let now = Instant::now();
                if now >= state.valid_until {
                    state.lost = Some(format!("{why}; the validity lapsed before a renewal succeeded"));
                    drop(state);
                    return let_go(client, lease, timing, shared);
                }
                next = now + retry_interval(timing);
            }
        }
    }
}

/// Tells a holder waiting in [`Leadership::lost`] that the lease was let go (or tried to be).
fn released(shared: &Shared) {
    shared.state.lock().unwrap_or_else(|p| p.into_inner()).released = true;
    shared.changed.notify_all();
}

/// Revokes a lease whose holder may no longer act, so that the key (if it is still held with
/// it) is free at once rather than when etcd expires the lease. A revocation that gets no answer
/// is retried until the lease would have expired anyway, or the holder drops the leadership.
fn let_go(client: &Client, lease: i64, timing: Timing, shared: &Shared) {
    let until = Instant::now() + timing.ttl;
    loop {
        let r = client.revoke(lease);
        released(shared);
        match r {
            Ok(()) | Err(EtcdError::LeaseExpired { .. }) => return,
            Err(_) if Instant::now() >= until => return,
            Err(_) => {}
        }
        let state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let (state, _) =
            shared.changed.wait_timeout(state, retry_interval(timing)).unwrap_or_else(|p| p.into_inner());
        if state.stop {
            return;
        }
    }
}

/// Why a renewal did not succeed.
enum Renewal {
    /// The lease or the key is gone: no renewal can succeed.
    Gone(String),
    /// No usable answer (etcd unreachable, too slow, or without a leader): worth retrying.
    Unanswered(String),
}

/// How soon an unanswered renewal is tried again.
fn retry_interval(timing: Timing) -> Duration {
    (timing.renew_every / 4).max(Duration::from_millis(10))
}

/// Renews the lease once and checks the key still carries it; the TTL granted, or why not.
fn renew_once(client: &Client, key: &str, lease: i64) -> Result<Duration, Renewal> {
    let ttl = match client.keep_alive(lease) {
        Ok(ttl) => ttl,
        Err(EtcdError::LeaseExpired { .. }) => {
            return Err(Renewal::Gone(format!("lease {lease:#x} of {key:?} expired")))
        }
        Err(e) => {
            return Err(Renewal::Unanswered(format!("renewing lease {lease:#x} of {key:?} failed: {e}")))
        }
    };
    match client.get(key) {
        Ok(Some(kv)) if kv.lease == lease => Ok(ttl),
        Ok(Some(kv)) => Err(Renewal::Gone(format!("{key:?} was taken over under lease {:#x}", kv.lease))),
        Ok(None) => Err(Renewal::Gone(format!("{key:?} was deleted while its lease {lease:#x} was alive"))),
        Err(e) => {
            Err(Renewal::Unanswered(format!("checking {key:?} after renewing lease {lease:#x} failed: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::EtcdServer;

    /// 2 s, validity 1.7 s: a test that checks the validity still lasts after a renewal or two
    /// (about 0.45 s) leaves a loaded machine over a second. With 1 s (validity 0.7 s) that
    /// room was a quarter of a second, and a thread can wait that long for a core.
    const TTL: Duration = Duration::from_secs(2);
    const RENEW: Duration = Duration::from_millis(200);
    const MARGIN: Duration = Duration::from_millis(300);

    fn campaign(client: &Client, value: &[u8]) -> Option<Leadership> {
        Leadership::campaign(client.clone(), "leader", value, TTL, RENEW, MARGIN).unwrap()
    }

    #[test]
    fn timing_that_cannot_work_is_refused() {
        let client = Client::new(&["127.0.0.1:9".into()], Duration::from_secs(1)).unwrap();
        for (ttl, renew, margin) in [(1000, 0, 100), (1000, 500, 1000), (1000, 700, 300), (1000, 200, 2000)] {
            let r = Leadership::campaign(
                client.clone(),
                "k",
                b"v",
                Duration::from_millis(ttl),
                Duration::from_millis(renew),
                Duration::from_millis(margin),
            );
            assert!(matches!(r, Err(EtcdError::InvalidArgument { .. })), "{ttl} {renew} {margin}: {r:?}");
        }
    }

    #[test]
    fn one_holder_at_a_time_and_resign_frees_the_key() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let a = campaign(&client, b"a").expect("the key was free");
        assert!(a.is_valid() && a.lost().is_none());
        assert!(campaign(&client, b"b").is_none(), "a second holder while the first renews");
        let kv = client.get("leader").unwrap().unwrap();
        assert_eq!((kv.value.as_slice(), kv.lease), (&b"a"[..], a.lease()));
        a.resign().unwrap();
        assert_eq!(client.get("leader").unwrap(), None);
        let b = campaign(&client, b"b").expect("the key was freed by resign");
        b.resign().unwrap();
    }

    #[test]
    fn renewals_extend_validity_and_the_key_outlives_it() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let started = Instant::now();
        let a = campaign(&client, b"a").expect("the key was free");
        // Whatever grant or keepalive it counts from was sent before now.
        assert!(a.valid_until() <= Instant::now() + TTL - MARGIN);
        thread::sleep(TTL);
        assert!(a.valid_until() > started + TTL, "renewals did not extend the validity");
        assert!(a.is_valid() && a.lost().is_none(), "{:?}", a.lost());
        assert!(campaign(&client, b"b").is_none());

        a.pause_renewal();
        let valid_until = a.valid_until();
        // Watch the key until etcd expires it; it must still be there after the validity ended.
        let mut last_seen = Instant::now();
        loop {
            let asked = Instant::now();
            if client.get("leader").unwrap().is_none() {
                break;
            }
            last_seen = asked;
            assert!(asked < valid_until + TTL * 3, "the key outlived its lease");
            thread::sleep(Duration::from_millis(10));
        }
        let gone = Instant::now();
        assert!(valid_until < gone);
        assert!(
            valid_until <= last_seen,
            "validity ended {:?} after the key was last seen",
            valid_until.duration_since(last_seen)
        );
        assert_eq!(a.valid_until(), valid_until, "a paused leadership was extended");
        assert!(!a.is_valid() && a.lost().is_some());
        let b = campaign(&client, b"b").expect("the expired key was free");
        assert_eq!(client.get("leader").unwrap().unwrap().value, b"b");
        b.resign().unwrap();
    }

    /// Waits until a renewal attempt that began after this call has finished, or an earlier
    /// one ended the renewals.
    fn next_renewal(a: &Leadership) {
        // The attempt counted next may have looked at etcd before this call; the one after it
        // began later.
        let target = a.renewals() + 2;
        let t0 = Instant::now();
        while a.renewals() < target && a.lost().is_none() {
            assert!(t0.elapsed() < TTL * 4, "no renewal attempt finished");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_deleted_key_ends_the_leadership_at_the_next_renewal() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let a = campaign(&client, b"a").expect("the key was free");
        client.delete("leader").unwrap();
        next_renewal(&a);
        assert!(Instant::now() < a.valid_until(), "the test needs the validity to last");
        assert!(!a.is_valid(), "a holder whose key was deleted still acts as leader");
        let why = a.lost().expect("lost");
        assert!(why.contains("deleted"), "{why}");
    }

    #[test]
    fn a_key_taken_under_another_lease_ends_the_leadership_and_stays_with_its_holder() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let a = campaign(&client, b"a").expect("the key was free");
        // What an etcd restored from an older snapshot, or an operator, can do.
        client.delete("leader").unwrap();
        let b = campaign(&client, b"b").expect("the deleted key was free");
        next_renewal(&a);
        assert!(!a.is_valid(), "a holder whose key was taken still acts as leader");
        let why = a.lost().expect("lost");
        assert!(why.contains("taken over"), "{why}");
        // Letting its own lease go did not take the key from its new holder.
        thread::sleep(RENEW);
        let kv = client.get("leader").unwrap().expect("the new holder's key");
        assert_eq!((kv.value.as_slice(), kv.lease), (&b"b"[..], b.lease()));
        assert!(b.is_valid());
        b.resign().unwrap();
    }

    #[test]
    fn a_holder_woken_past_its_validity_renews_nothing_and_lets_the_key_go() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let (ttl, margin) = (Duration::from_secs(3), Duration::from_secs(1));
        let a = Leadership::campaign(client.clone(), "leader", b"a", ttl, RENEW, margin)
            .unwrap()
            .expect("the key was free");
        // A holder stalled (as a frozen process is) until its validity lapsed, which is at
        // least `margin` before etcd could expire its lease.
        a.pause_renewal();
        let valid_until = a.valid_until();
        while Instant::now() < valid_until {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(client.get("leader").unwrap().is_some(), "the lease expired before the validity");
        a.resume_renewal();
        // A keepalive now would be honoured and keep the key for another `ttl`; the holder must
        // instead give it up, well before the lease could have expired by itself.
        while client.get("leader").unwrap().is_some() {
            assert!(
                Instant::now() < valid_until + margin,
                "the woken holder kept its key: its lease was renewed, or not revoked"
            );
            thread::sleep(Duration::from_millis(5));
        }
        assert!(!a.is_valid());
        assert!(a.lost().expect("lost").contains("lapsed"), "{:?}", a.lost());
        let b = campaign(&client, b"b").expect("the key is free at once");
        b.resign().unwrap();
    }

    #[test]
    fn dropping_without_resign_keeps_the_key_until_the_lease_expires() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_secs(1));
        let dropped = {
            let a = campaign(&client, b"a").expect("the key was free");
            drop(a);
            Instant::now()
        };
        assert!(campaign(&client, b"b").is_none(), "the dropped holder's key vanished at once");
        let b = loop {
            if let Some(b) = campaign(&client, b"b") {
                break b;
            }
            assert!(dropped.elapsed() < TTL * 4, "the dropped holder's key never expired");
            thread::sleep(Duration::from_millis(20));
        };
        assert!(b.is_valid());
    }

    #[test]
    fn a_short_stall_of_etcd_is_ridden_out() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_millis(100));
        let ttl = TTL * 2;
        let a = Leadership::campaign(client.clone(), "leader", b"a", ttl, RENEW, MARGIN)
            .unwrap()
            .expect("the key was free");
        thread::sleep(RENEW * 2);
        // Two renewals fail for want of an answer, well inside the validity left (at least
        // ttl - MARGIN - RENEW = 3.5 s).
        server.freeze();
        thread::sleep(RENEW * 2);
        let before = a.valid_until();
        server.resume();
        let resumed = Instant::now();
        while a.valid_until() == before {
            assert!(a.lost().is_none(), "a {:?} stall ended the leadership: {:?}", RENEW * 2, a.lost());
            assert!(resumed.elapsed() < ttl, "renewals did not resume after the stall");
            thread::sleep(Duration::from_millis(5));
        }
        assert!(a.is_valid() && a.lost().is_none(), "{:?}", a.lost());
        a.resign().unwrap();
    }

    #[test]
    fn losing_etcd_stops_the_validity() {
        let Some(mut server) = EtcdServer::start_for_test() else { return };
        let client = server.client(Duration::from_millis(200));
        let a = campaign(&client, b"a").expect("the key was free");
        server.kill();
        let killed = Instant::now();
        let why = loop {
            if let Some(why) = a.lost() {
                break why;
            }
            assert!(killed.elapsed() < TTL * 2, "losing etcd went unnoticed");
            thread::sleep(Duration::from_millis(10));
        };
        assert!(why.contains("reachable") || why.contains("lapsed"), "{why}");
        let valid_until = a.valid_until();
        assert!(valid_until <= killed + TTL - MARGIN);
        thread::sleep(RENEW * 2);
        assert_eq!(a.valid_until(), valid_until);
        assert!(a.lost().is_some());
        assert!(a.resign().is_err(), "resigning without etcd must report it");
    }
}
