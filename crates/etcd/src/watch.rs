//! A watch on one key or a prefix: a thread that holds one `/v3/watch` stream open, calls back
//! with every change, and opens the stream again (with backoff, from the revision after the last
//! one it delivered) when etcd goes away. Dropping the [`Watch`] ends it.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::Value;

use crate::client::{decode_kv, http_error, protocol, Client, KeyValue};
use crate::error::EtcdError;
use crate::http::{self, StreamFailure, MAX_BODY_BYTES};
use crate::wire;

/// The first wait before opening a failed stream again; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two attempts to open the stream.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A stream that brought nothing for this long is opened again (from where it was), so that an
/// etcd that went silent without closing the connection is noticed. A quiet stream is the
/// usual case (nothing changed), so this reopening is not reported as an interruption; an etcd
/// that does not answer the new stream is.
pub const WATCH_IDLE: Duration = Duration::from_secs(10);

/// What a watch sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written; its `mod_revision` is the write's revision.
    Put(KeyValue),
    /// A key was deleted at `revision`.
    Delete {
        /// The key.
        key: String,
        /// The revision of the delete.
        revision: i64,
    },
    /// etcd has compacted its history past the revision the watch was to resume from: changes
    /// before `revision` may have been missed, so read the keys again. The watch goes on from
    /// `revision`.
    Compacted {
        /// The oldest revision etcd still holds.
        revision: i64,
    },
    /// The stream failed and is being opened again; no change is lost (the watch resumes from
    /// the revision after the last one delivered). For logging.
    Interrupted {
        /// Why.
        error: EtcdError,
    },
}

/// What is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The one key.
    Key,
    /// Every key that starts with it.
    Prefix,
}

/// A running watch; dropping it stops its thread (and waits for it, unless dropped by its own
/// callback).
#[derive(Debug)]
pub struct Watch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    stopped: bool,
    /// The socket of the open stream, shut down to end a blocked read.
    socket: Option<TcpStream>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stopped(&self) -> bool {
        self.lock().stopped
    }

    /// Waits `d` or until stopped; says whether it was stopped.
    fn sleep(&self, d: Duration) -> bool {
        let state = self.lock();
        let (state, _) =
            self.wake.wait_timeout_while(state, d, |s| !s.stopped).unwrap_or_else(|p| p.into_inner());
        state.stopped
    }
}

impl Client {
    /// Watches `key` (or, with [`Scope::Prefix`], every key starting with it) from
    /// `start_revision` (0: from now on; else every change at that revision or later), calling
    /// `on_event` on a thread of its own with each change in revision order, until the returned
    /// [`Watch`] is dropped.
    pub fn watch<F>(
        &self,
        key: &str,
        scope: Scope,
        start_revision: i64,
        on_event: F,
    ) -> Result<Watch, EtcdError>
    where
        F: FnMut(WatchEvent) + Send + 'static,
    {
        if start_revision < 0 {
            return Err(EtcdError::InvalidArgument {
                what: format!("watch start revision {start_revision} of {key:?} is negative"),
            });
        }
        if key.is_empty() && scope == Scope::Key {
            return Err(EtcdError::InvalidArgument { what: "a watch on the empty key".into() });
        }
        let shared = Arc::new(Shared::default());
        let watcher = Watcher {
            client: self.clone(),
            key: key.to_owned(),
            scope,
            next: start_revision,
            shared: Arc::clone(&shared),
        };
        let thread = thread::Builder::new()
            .name("etcd-watch".into())
            .spawn(move || watcher.run(on_event))
            .map_err(|e| EtcdError::Local { what: format!("cannot start the etcd watch thread: {e}") })?;
        Ok(Watch { shared, thread: Some(thread) })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.stopped = true;
            if let Some(s) = state.socket.take() {
                // Ends a read blocked on the stream; a socket already closed is fine.
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != thread::current().id() {
                // A panic in the callback has been reported on its thread already.
                let _ = t.join();
            }
        }
    }
}

struct Watcher {
    client: Client,
    key: String,
    scope: Scope,
    /// The revision to watch from (0: from now on).
    next: i64,
    shared: Arc<Shared>,
}

/// How one stream ended.
enum Ended {
    Stopped,
    /// Nothing came for [`WATCH_IDLE`]: opened again at once, unreported.
    Idle,
    /// It failed; `progressed`: it had been created (the backoff starts again).
    Failed {
        error: EtcdError,
        progressed: bool,
    },
}

impl Watcher {
    fn run(mut self, mut on_event: impl FnMut(WatchEvent)) {
        let mut backoff = MIN_BACKOFF;
        loop {
            match self.stream(&mut on_event) {
                Ended::Stopped => return,
                Ended::Idle => backoff = MIN_BACKOFF,
                Ended::Failed { error, progressed } => {
                    if self.shared.stopped() {
                        return;
                    }
                    if progressed {
                        backoff = MIN_BACKOFF;
                    }
                    on_event(WatchEvent::Interrupted { error });
                    if self.shared.sleep(backoff) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Opens a stream on the first endpoint that takes it and delivers its events until it ends.
    fn stream(&mut self, on_event: &mut impl FnMut(WatchEvent)) -> Ended {
        let end = match self.scope {
            Scope::Key => None,
            Scope::Prefix => Some(wire::prefix_end(self.key.as_bytes())),
        };
        // etcd refuses an empty key; "\0" with the end "\0" is its spelling of "every key".
        let start = if self.key.is_empty() { &b"\0"[..] } else { self.key.as_bytes() };
        let body = wire::watch(start, end.as_deref(), self.next).to_string().into_bytes();
        let endpoints = self.client.endpoints().to_vec();
        let first = self.client.preferred();
        let mut last_error = String::new();
        let mut tried = Vec::new();
        for i in 0..endpoints.len() {
            let endpoint = &endpoints[(first + i) % endpoints.len()];
            tried.push(endpoint.clone());
            let addr = endpoint.strip_prefix("https://").unwrap_or(endpoint);
            let opened = http::open_stream(
                addr,
                self.client.tls(),
                "/v3/watch",
                &body,
                self.client.timeout(),
                WATCH_IDLE,
            );
            match opened {
                Ok((stream, socket)) => return self.deliver(endpoint, stream, socket, on_event),
                Err(StreamFailure::Exchange(http::Failure::Malformed(m))) => {
                    return Ended::Failed { error: protocol(endpoint, m), progressed: false }
                }
                Err(StreamFailure::Exchange(http::Failure::NotSent(e) | http::Failure::Sent(e))) => {
                    last_error = format!("{endpoint}: {e}");
                }
                Err(StreamFailure::Answered(r)) => {
                    last_error = http_error(endpoint, r.status, &r.body).to_string();
                }
            }
        }
        Ended::Failed { error: EtcdError::Unreachable { endpoints: tried, last_error }, progressed: false }
    }

    fn deliver(
        &mut self,
        endpoint: &str,
        mut stream: http::Stream,
        socket: TcpStream,
        on_event: &mut impl FnMut(WatchEvent),
    ) -> Ended {
        {
            let mut state = self.shared.lock();
            if state.stopped {
                return Ended::Stopped;
            }
            state.socket = Some(socket);
        }
        let mut progressed = false;
        let ended = loop {
            let line = match stream.next_line(MAX_BODY_BYTES) {
                Ok(Some(l)) if l.trim_ascii().is_empty() => continue,
                Ok(Some(l)) => l,
                Ok(None) => {
                    let error = protocol(endpoint, "the watch stream ended");
                    break Ended::Failed { error, progressed };
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => {
                    break Ended::Idle;
                }
                Err(e) => {
                    let error = EtcdError::Unreachable {
                        endpoints: vec![endpoint.to_owned()],
                        last_error: format!("the watch stream broke: {e}"),
                    };
                    break Ended::Failed { error, progressed };
                }
            };
            if self.shared.stopped() {
                break Ended::Stopped;
            }
            match self.message(endpoint, &line, on_event) {
                Ok(()) => progressed = true,
                Err(error) => break Ended::Failed { error, progressed },
            }
        };
        self.shared.lock().socket = None;
        if self.shared.stopped() {
            return Ended::Stopped;
        }
        ended
    }

    /// Handles one message of the stream.
    fn message(
        &mut self,
        endpoint: &str,
        line: &[u8],
        on_event: &mut impl FnMut(WatchEvent),
    ) -> Result<(), EtcdError> {
        let message: wire::WatchMessage = serde_json::from_slice(line)
            .map_err(|e| protocol(endpoint, format!("{e} in a watch message")))?;
        if let Some(error) = message.error {
            let code = error.get("grpc_code").or(error.get("code")).and_then(Value::as_i64);
            let status = error.get("http_code").and_then(Value::as_u64).unwrap_or(200);
            let text = error.get("message").and_then(Value::as_str).map(str::to_owned);
            return Err(EtcdError::Http {
                endpoint: endpoint.to_owned(),
                status: u16::try_from(status).unwrap_or(200),
                code,
                message: text.unwrap_or_else(|| error.to_string()),
            });
        }
        let Some(r) = message.result else {
            return Err(protocol(endpoint, "a watch message with neither result nor error"));
        };
        if r.canceled {
            if r.compact_revision > 0 {
                on_event(WatchEvent::Compacted { revision: r.compact_revision });
                self.next = r.compact_revision;
            }
            let reason = if r.cancel_reason.is_empty() { "no reason given".into() } else { r.cancel_reason };
            return Err(protocol(endpoint, format!("etcd cancelled the watch: {reason}")));
        }
        if r.created {
            if self.next == 0 {
                // Watching from now on: the stream holds every change after this revision.
                self.next = r.header.revision + 1;
            }
            return Ok(());
        }
        if r.events.is_empty() {
            // A progress notification: nothing changed up to the header's revision.
            self.next = self.next.max(r.header.revision + 1);
            return Ok(());
        }
        // The events of one transaction share its revision.
        let floor = self.next;
        for e in r.events {
            let revision = e.kv.mod_revision;
            let event = match e.kind.as_str() {
                "" | "PUT" => WatchEvent::Put(decode_kv(endpoint, e.kv)?),
                "DELETE" => WatchEvent::Delete { key: decode_kv(endpoint, e.kv)?.key, revision },
                other => return Err(protocol(endpoint, format!("a watch event of unknown type {other:?}"))),
            };
            if revision < floor {
                return Err(protocol(
                    endpoint,
                    format!("a watch event at revision {revision}, before the {floor} asked for"),
                ));
            }
            on_event(event);
            self.next = self.next.max(revision + 1);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::EtcdServer;
    use std::sync::mpsc::{channel, Receiver};
    use std::time::Instant;

    /// A watch whose events (less interruptions) arrive on a channel.
    fn watch(c: &Client, key: &str, scope: Scope, from: i64) -> (Watch, Receiver<WatchEvent>) {
        let (tx, rx) = channel();
        let w = c
            .watch(key, scope, from, move |e| {
                if !matches!(e, WatchEvent::Interrupted { .. }) {
                    let _ = tx.send(e);
                }
            })
            .unwrap();
        (w, rx)
    }

    fn next(rx: &Receiver<WatchEvent>) -> WatchEvent {
        rx.recv_timeout(Duration::from_secs(10)).expect("a watch event within 10 s")
    }

    fn put_value(e: WatchEvent) -> (String, Vec<u8>, i64) {
        match e {
            WatchEvent::Put(kv) => (kv.key, kv.value, kv.mod_revision),
            other => panic!("expected a put, got {other:?}"),
        }
    }

    #[test]
    fn a_key_watch_sees_puts_and_a_delete_of_that_key_only() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        let r0 = c.put("other", b"x", None).unwrap();
        // From a revision: the watch is created before the puts, whatever the thread's timing.
        let (_w, rx) = watch(&c, "k", Scope::Key, r0 + 1);
        let r1 = c.put("k", b"one", None).unwrap();
        c.put("k2", b"not watched", None).unwrap();
        let r2 = c.put("k", b"two", None).unwrap();
        c.delete("k").unwrap();
        assert_eq!(put_value(next(&rx)), ("k".into(), b"one".to_vec(), r1));
        assert_eq!(put_value(next(&rx)), ("k".into(), b"two".to_vec(), r2));
        match next(&rx) {
            WatchEvent::Delete { key, revision } => assert_eq!((key.as_str(), revision), ("k", r2 + 1)),
            other => panic!("expected the delete, got {other:?}"),
        }
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "nothing else happened to k");
    }

    #[test]
    fn a_quiet_stream_is_opened_again_unreported_and_still_delivers() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        let (tx, rx) = channel();
        let _w = c.watch("quiet", Scope::Key, 0, move |e| drop(tx.send(e))).unwrap();
        // Past the idle limit with nothing to say: reopened, and nothing reported (each quiet
        // stream was logged as an interruption before, every 10 s).
        std::thread::sleep(WATCH_IDLE + Duration::from_secs(2));
        c.put("quiet", b"now", None).unwrap();
        assert_eq!(put_value(next(&rx)).0, "quiet");
        assert!(rx.try_recv().is_err(), "only the put was reported");
    }

    #[test]
    fn a_prefix_watch_replays_from_its_start_revision() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        let r1 = c.put("p/a", b"1", None).unwrap();
        c.put("q", b"outside", None).unwrap();
        c.put("p/b", b"2", None).unwrap();
        let (_w, rx) = watch(&c, "p/", Scope::Prefix, r1);
        assert_eq!(put_value(next(&rx)).0, "p/a");
        assert_eq!(put_value(next(&rx)).0, "p/b");
        c.put("p/c", b"3", None).unwrap();
        assert_eq!(put_value(next(&rx)).0, "p/c");
    }

    #[test]
    fn a_watch_resumes_across_an_etcd_restart_without_losing_a_change() {
        let Some(mut server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        let r0 = c.put("k", b"0", None).unwrap();
        let (_w, rx) = watch(&c, "k", Scope::Key, r0 + 1);
        c.put("k", b"1", None).unwrap();
        assert_eq!(put_value(next(&rx)).1, b"1");
        server.kill();
        // Written while the watch is cut off: the other writer is etcd itself after its restart.
        server.restart().unwrap();
        let r2 = c.put("k", b"2", None).unwrap();
        let r3 = c.put("k", b"3", None).unwrap();
        assert_eq!(put_value(next(&rx)), ("k".into(), b"2".to_vec(), r2));
        assert_eq!(put_value(next(&rx)), ("k".into(), b"3".to_vec(), r3));
    }

    #[test]
    fn a_watch_from_a_compacted_revision_says_so_and_goes_on() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        c.put("k", b"1", None).unwrap();
        let r2 = c.put("k", b"2", None).unwrap();
        let _: (String, wire::WriteResponse) =
            c.call_for_test("/v3/kv/compaction", &serde_json::json!({ "revision": r2.to_string() })).unwrap();
        let (_w, rx) = watch(&c, "k", Scope::Key, 1);
        assert_eq!(next(&rx), WatchEvent::Compacted { revision: r2 });
        assert_eq!(put_value(next(&rx)).2, r2, "the watch goes on from the oldest revision held");
    }

    #[test]
    fn dropping_a_watch_stops_its_thread_at_once() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = server.client(Duration::from_secs(2));
        let (tx, rx) = channel::<()>();
        let w = c
            .watch("k", Scope::Key, 0, move |_| {
                let _ = tx.send(());
            })
            .unwrap();
        thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        drop(w);
        assert!(started.elapsed() < Duration::from_secs(1), "drop took {:?}", started.elapsed());
        // The callback (and the sender it owns) went with the thread.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        assert!(matches!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Disconnected)));
        // And a watch on an unreachable etcd, sleeping between attempts, stops as quickly.
        drop(server);
        let w = c.watch("k", Scope::Key, 0, |_| {}).unwrap();
        thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        drop(w);
        assert!(started.elapsed() < Duration::from_secs(1), "drop took {:?}", started.elapsed());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let c = Client::new(&["127.0.0.1:1".into()], Duration::from_secs(1)).unwrap();
        assert!(matches!(c.watch("k", Scope::Key, -1, |_| {}), Err(EtcdError::InvalidArgument { .. })));
        assert!(matches!(c.watch("", Scope::Key, 0, |_| {}), Err(EtcdError::InvalidArgument { .. })));
    }
}
