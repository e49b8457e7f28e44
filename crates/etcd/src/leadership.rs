//! Leadership of one etcd key, held with a lease that a background thread renews.
//!
//! The holder may act as leader until [`Leadership::valid_until`]: the time the last successful
//! grant or keepalive was *sent*, plus the lease's TTL, less a margin for clock-rate differences.
//! etcd received that request no earlier than it was sent and counts the TTL from then, so the
//! lease (and with it the key, which nobody else can take while it exists) outlives the validity.
//! A renewal that fails for want of an answer (etcd unreachable, slow, or between leaders) is
//! retried while the validity lasts, and one sent before it lapsed extends it again. Once the
//! lease is known to be gone (expired, or the key taken or deleted), or the validity lapsed
//! without a renewal, it stops advancing for good: the holder must step down by `valid_until`
//! and campaign again.

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
            state: Mutex::new(State { valid_until, lost: None, stop: false, paused: false, renewing: false }),
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
        Ok(Some(Leadership { client, key: key.to_owned(), lease, shared, renewer: Some(renewer) }))
    }

    /// The instant until which this holder may act as leader.
    pub fn valid_until(&self) -> Instant {
        self.state().valid_until
    }

    /// Whether this holder may act as leader now.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until()
    }

    /// Why the leadership will not be renewed any more, or `None` while it still is. Once set it
    /// stays set; the holder may still act until [`Leadership::valid_until`].
    pub fn lost(&self) -> Option<String> {
        let mut state = self.state();
        if state.lost.is_none() && Instant::now() >= state.valid_until {
            state.lost = Some("the lease was not renewed in time and the validity lapsed".into());
        }
        state.lost.clone()
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
/// still held with it, until stopped or a renewal fails.
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
            if !state.paused && now >= next {
                break;
            }
            state = if state.paused {
                shared.changed.wait(state).unwrap_or_else(|p| p.into_inner())
            } else {
                shared.changed.wait_timeout(state, next - now).unwrap_or_else(|p| p.into_inner()).0
            };
        }
        state.renewing = true;
        drop(state);

        let sent = Instant::now();
        let outcome = renew_once(client, key, lease);

        let mut state = lock();
        state.renewing = false;
        shared.changed.notify_all();
        if state.lost.is_some() {
            // The holder saw the validity lapse; a late success must not revive it.
            return;
        }
        match outcome {
            Ok(_) if sent >= state.valid_until => {
                state.lost =
                    Some(format!("renewing lease {lease:#x} of {key:?} started after the validity lapsed"));
                return;
            }
            Ok(ttl) => {
                let until = sent + ttl.min(timing.ttl) - timing.margin;
                state.valid_until = state.valid_until.max(until);
                next = sent + timing.renew_every;
            }
            Err(Renewal::Gone(why)) => {
                state.lost = Some(why);
                return;
            }
            Err(Renewal::Unanswered(why)) => {
                // Try again soon, while a success could still count.
                let now = Instant::now();
                if now >= state.valid_until {
                    state.lost = Some(format!("{why}; the validity lapsed before a renewal succeeded"));
                    return;
                }
                next = now + retry_interval(timing);
            }
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

    const TTL: Duration = Duration::from_secs(1);
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
        // 2 s - MARGIN - RENEW = 1.5 s).
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
