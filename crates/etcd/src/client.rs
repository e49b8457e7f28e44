//! The blocking etcd v3 client: keys, transactions and leases over the JSON gateway.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::EtcdError;
use crate::http::{self, Failure};
use crate::tls::EtcdTls;
use crate::wire::{self, Guard};

/// gRPC's `NOT_FOUND`, which etcd returns for a lease that does not exist.
const GRPC_NOT_FOUND: i64 = 5;
/// How much of an unparsable body an error message quotes.
const QUOTED_BODY_CHARS: usize = 300;

/// One key and its value as etcd stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value; empty if it was stored empty.
    pub value: Vec<u8>,
    /// The cluster revision at which the key was last created.
    pub create_revision: i64,
    /// The cluster revision of the key's last write.
    pub mod_revision: i64,
    /// How many times the key was written since it was created (1 after the create).
    pub version: i64,
    /// The lease the key is attached to, or 0.
    pub lease: i64,
}

/// Whether a request may be sent again to another endpoint after a failure that happened once
/// it had been sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    /// Reads, puts, deletes and lease calls: repeating them has the same effect as doing them once
    /// (a repeated grant leaves an unused lease that expires on its own).
    Safe,
    /// Transactions: a repeat could see the first attempt's write and answer the wrong way.
    OnlyIfUnsent,
}

/// A blocking etcd v3 client.
///
/// Each request opens one HTTP/1.1 connection to one endpoint and must finish within the
/// client's timeout. A request that cannot reach an endpoint goes to the next one, starting
/// from the endpoint that answered last. Cloning is cheap and clones share that preference.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoints: Vec<String>,
    timeout: Duration,
    /// The index of the endpoint that answered last, tried first.
    preferred: AtomicUsize,
    /// For `https://` endpoints.
    tls: Option<EtcdTls>,
}

impl Client {
    /// A client of the etcd members at `endpoints` (`"host:port"`, or `"http://host:port"`),
    /// giving each request `timeout` per endpoint. Nothing is contacted yet.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Client, EtcdError> {
        Client::with_tls(endpoints, timeout, None)
    }

    /// As [`Client::new`], with TLS for `https://host:port` endpoints. Either every endpoint is
    /// `https://` and `tls` is given, or none is and `tls` is `None`: a client that was given
    /// TLS files never falls back to plain HTTP.
    pub fn with_tls(
        endpoints: &[String],
        timeout: Duration,
        tls: Option<EtcdTls>,
    ) -> Result<Client, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::InvalidArgument { what: "the endpoint list is empty".into() });
        }
        if timeout.is_zero() {
            return Err(EtcdError::InvalidArgument { what: "the request timeout is zero".into() });
        }
        let endpoints: Vec<String> =
            endpoints.iter().map(|e| normalize_endpoint(e)).collect::<Result<_, _>>()?;
        for e in &endpoints {
            match (e.starts_with(HTTPS), tls.is_some()) {
                (true, false) => {
                    return Err(EtcdError::InvalidArgument {
                        what: format!(
                            "endpoint {e:?} speaks TLS but no CA to check it was given (etcd_ca_file, \
                             etcdctl --cacert)"
                        ),
                    })
                }
                (false, true) => {
                    return Err(EtcdError::InvalidArgument {
                        what: format!(
                            "endpoint {e:?} is plain HTTP but TLS files were given: write it https://{e}, \
                             or drop the TLS files"
                        ),
                    })
                }
                _ => {}
            }
        }
        Ok(Client { inner: Arc::new(Inner { endpoints, timeout, preferred: AtomicUsize::new(0), tls }) })
    }

    /// The endpoints, as `"host:port"` (`"https://host:port"` for TLS).
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    /// The time each request may take on one endpoint.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The TLS settings for `https://` endpoints.
    pub(crate) fn tls(&self) -> Option<&EtcdTls> {
        self.inner.tls.as_ref()
    }

    /// The index of the endpoint that answered last.
    pub(crate) fn preferred(&self) -> usize {
        self.inner.preferred.load(Ordering::Relaxed)
    }

    /// The value of `key`, or `None` if it does not exist.
    pub fn get(&self, key: &str) -> Result<Option<KeyValue>, EtcdError> {
        let (endpoint, r): (_, wire::RangeResponse) =
            self.call("/v3/kv/range", &wire::range(key.as_bytes(), None), Repeat::Safe)?;
        let mut kvs = r.kvs.into_iter();
        let kv = kvs.next().map(|kv| decode_kv(&endpoint, kv)).transpose()?;
        if kvs.next().is_some() {
            return Err(protocol(&endpoint, format!("a single-key range for {key:?} returned several keys")));
        }
        Ok(kv)
    }

    /// Every key starting with `prefix`, in key order (every key if `prefix` is empty).
    pub fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, EtcdError> {
        // etcd refuses an empty key; "\0" with the end "\0" is its spelling of "every key".
        let start = if prefix.is_empty() { &b"\0"[..] } else { prefix.as_bytes() };
        let end = wire::prefix_end(prefix.as_bytes());
        let (endpoint, r): (_, wire::RangeResponse) =
            self.call("/v3/kv/range", &wire::range(start, Some(&end)), Repeat::Safe)?;
        if r.more || r.count > r.kvs.len() as i64 {
            return Err(protocol(
                &endpoint,
                format!("an unlimited range returned {} of {} keys", r.kvs.len(), r.count),
            ));
        }
        r.kvs.into_iter().map(|kv| decode_kv(&endpoint, kv)).collect()
    }

    /// Writes `value` under `key`, attached to `lease` if given, and returns the revision of the
    /// write.
    pub fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let body = wire::put(key.as_bytes(), value, lease);
        let (_, r): (_, wire::WriteResponse) =
            self.call("/v3/kv/put", &body, Repeat::Safe).map_err(|e| lease_gone(e, lease))?;
        Ok(r.header.revision)
    }

    /// Writes `value` under `key` only if `key` does not exist; says whether it wrote.
    pub fn create_if_absent(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<bool, EtcdError> {
        self.put_if(Guard::Created(0), key, value, lease)
    }

    /// Writes `value` under `key` only if the key's last write was at `expected_mod_revision`
    /// (0: only if the key does not exist); says whether it wrote.
    pub fn compare_and_swap(
        &self,
        key: &str,
        expected_mod_revision: i64,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, EtcdError> {
        self.put_if(modified(key, expected_mod_revision)?, key, value, lease)
    }

    /// As [`Client::compare_and_swap`], and only if `absent` does not exist either, in one
    /// transaction; says whether it wrote.
    pub fn compare_and_swap_unless(
        &self,
        key: &str,
        expected_mod_revision: i64,
        absent: &str,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, EtcdError> {
        let guards =
            [(modified(key, expected_mod_revision)?, key.as_bytes()), (Guard::Created(0), absent.as_bytes())];
        self.put_if_all(&guards, key, value, lease)
    }

    /// As [`Client::compare_and_swap`], and only while `held` is the key it was at
    /// `held_created` (its create revision: not deleted, nor deleted and made again, as a key
    /// held with a lease is once the lease expires), in one transaction; says whether it wrote.
    pub fn compare_and_swap_while(
        &self,
        key: &str,
        expected_mod_revision: i64,
        held: &str,
        held_created: i64,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, EtcdError> {
        if held_created <= 0 {
            return Err(EtcdError::InvalidArgument {
                what: format!("create revision {held_created} of {held:?} is not that of an existing key"),
            });
        }
        let guards = [
            (modified(key, expected_mod_revision)?, key.as_bytes()),
            (Guard::Created(held_created), held.as_bytes()),
        ];
        self.put_if_all(&guards, key, value, lease)
    }

    fn put_if(&self, guard: Guard, key: &str, value: &[u8], lease: Option<i64>) -> Result<bool, EtcdError> {
        self.put_if_all(&[(guard, key.as_bytes())], key, value, lease)
    }

    fn put_if_all(
        &self,
        guards: &[(Guard, &[u8])],
        key: &str,
        value: &[u8],
        lease: Option<i64>,
    ) -> Result<bool, EtcdError> {
        let body = wire::txn_put_if(guards, key.as_bytes(), value, lease);
        let (_, r): (_, wire::TxnResponse) =
            self.call("/v3/kv/txn", &body, Repeat::OnlyIfUnsent).map_err(|e| lease_gone(e, lease))?;
        Ok(r.succeeded)
    }

    /// Deletes `key`; deleting a missing key is not an error.
    pub fn delete(&self, key: &str) -> Result<(), EtcdError> {
        let (_, _): (_, wire::WriteResponse) =
            self.call("/v3/kv/deleterange", &wire::delete(key.as_bytes()), Repeat::Safe)?;
        Ok(())
    }

    /// Grants a lease of `ttl` (rounded up to whole seconds, as etcd counts them) and returns its id.
    ///
    /// etcd may grant a longer TTL than asked: it raises every TTL to at least 1.5 election
    /// timeouts (2 s with its default settings).
    pub fn grant(&self, ttl: Duration) -> Result<i64, EtcdError> {
        self.grant_with_ttl(ttl).map(|(lease, _)| lease)
    }

    /// [`Client::grant`], also returning the TTL etcd granted.
    pub(crate) fn grant_with_ttl(&self, ttl: Duration) -> Result<(i64, Duration), EtcdError> {
        if ttl.is_zero() {
            return Err(EtcdError::InvalidArgument { what: "a lease TTL of zero".into() });
        }
        let ttl_s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let ttl_s = i64::try_from(ttl_s)
            .map_err(|_| EtcdError::InvalidArgument { what: format!("lease TTL {ttl:?} is too long") })?;
        let (endpoint, r): (_, wire::GrantResponse) =
            self.call("/v3/lease/grant", &wire::grant(ttl_s), Repeat::Safe)?;
        if !r.error.is_empty() {
            return Err(EtcdError::Http { endpoint, status: 200, code: None, message: r.error });
        }
        if r.id == 0 || r.ttl_s <= 0 {
            return Err(protocol(
                &endpoint,
                format!("lease grant returned id {} with TTL {}", r.id, r.ttl_s),
            ));
        }
        Ok((r.id, Duration::from_secs(r.ttl_s as u64)))
    }

    /// Renews `lease` once and returns its TTL, counted from now; [`EtcdError::LeaseExpired`]
    /// if the lease is gone.
    pub fn keep_alive(&self, lease: i64) -> Result<Duration, EtcdError> {
        let (endpoint, raw): (_, Vec<u8>) = self.call_raw("/v3/lease/keepalive", &wire::lease_id(lease))?;
        // The gateway answers the streaming call with one JSON message per line.
        let first = raw.split(|&b| b == b'\n').find(|l| !l.trim_ascii().is_empty()).unwrap_or(&[]);
        let message: wire::KeepAliveMessage = parse(&endpoint, first)?;
        if let Some(error) = message.error {
            let code = error.get("grpc_code").or(error.get("code")).and_then(Value::as_i64);
            let text = error.get("message").and_then(Value::as_str).map(str::to_owned);
            return Err(EtcdError::Http {
                endpoint,
                status: 200,
                code,
                message: text.unwrap_or_else(|| error.to_string()),
            });
        }
        let Some(r) = message.result else {
            return Err(protocol(&endpoint, "keepalive answer has neither result nor error"));
        };
        if r.ttl_s <= 0 {
            return Err(EtcdError::LeaseExpired { lease });
        }
        if r.id != lease {
            return Err(protocol(
                &endpoint,
                format!("keepalive of lease {lease} answered for lease {}", r.id),
            ));
        }
        Ok(Duration::from_secs(r.ttl_s as u64))
    }

    /// Revokes `lease`, deleting every key attached to it; [`EtcdError::LeaseExpired`] if it was
    /// already gone.
    pub fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        let (_, _): (_, wire::WriteResponse) = self
            .call("/v3/lease/revoke", &wire::lease_id(lease), Repeat::Safe)
            .map_err(|e| lease_gone(e, Some(lease)))?;
        Ok(())
    }

    /// Sends `body` to `path` and parses a successful answer as `T`.
    fn call<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        repeat: Repeat,
    ) -> Result<(String, T), EtcdError> {
        let (endpoint, raw) = self.send(path, body, repeat)?;
        let parsed = parse(&endpoint, &raw)?;
        Ok((endpoint, parsed))
    }

    /// [`Client::call`] for tests of calls the client has no method for (compaction).
    #[cfg(test)]
    pub(crate) fn call_for_test<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<(String, T), EtcdError> {
        self.call(path, body, Repeat::Safe)
    }

    /// Sends `body` to `path` (a request safe to repeat) and returns the raw successful answer.
    fn call_raw(&self, path: &str, body: &Value) -> Result<(String, Vec<u8>), EtcdError> {
        self.send(path, body, Repeat::Safe)
    }

    /// Sends `body` to `path`, trying each endpoint in turn from the preferred one, and returns
    /// the endpoint that answered with the 2xx body it answered.
    fn send(&self, path: &str, body: &Value, repeat: Repeat) -> Result<(String, Vec<u8>), EtcdError> {
        let body = body.to_string().into_bytes();
        let endpoints = &self.inner.endpoints;
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let mut tried = Vec::with_capacity(endpoints.len());
        let mut last_error = String::new();
        for i in 0..endpoints.len() {
            let index = (first + i) % endpoints.len();
            let endpoint = &endpoints[index];
            tried.push(endpoint.clone());
            let addr = endpoint.strip_prefix(HTTPS).unwrap_or(endpoint);
            let tls = self.inner.tls.as_ref();
            let response = match http::post(addr, tls, path, &body, self.inner.timeout) {
                Ok(r) => r,
                Err(Failure::NotSent(e)) => {
                    last_error = format!("{endpoint}: {e}");
                    continue;
                }
                Err(Failure::Sent(e)) if repeat == Repeat::Safe => {
                    last_error = format!("{endpoint}: {e}");
                    continue;
                }
                Err(Failure::Sent(error)) => {
                    return Err(EtcdError::OutcomeUnknown { endpoint: endpoint.clone(), error })
                }
                Err(Failure::Malformed(detail)) => return Err(protocol(endpoint, detail)),
            };
            if (200..300).contains(&response.status) {
                self.inner.preferred.store(index, Ordering::Relaxed);
                return Ok((endpoint.clone(), response.body));
            }
            let error = http_error(endpoint, response.status, &response.body);
            // 503 is a member without a leader; another member may have one.
            let unavailable = response.status == 503 && repeat == Repeat::Safe;
            if !unavailable || i + 1 == endpoints.len() {
                return Err(error);
            }
            last_error = error.to_string();
        }
        Err(EtcdError::Unreachable { endpoints: tried, last_error })
    }
}

/// The scheme of a TLS endpoint.
const HTTPS: &str = "https://";

/// Checks one endpoint and reduces it to `"host:port"`, or `"https://host:port"` for TLS.
fn normalize_endpoint(endpoint: &str) -> Result<String, EtcdError> {
    let bad = |why: &str| EtcdError::InvalidArgument { what: format!("endpoint {endpoint:?} {why}") };
    let e = endpoint.trim();
    let (scheme, e) = match e.strip_prefix(HTTPS) {
        Some(rest) => (HTTPS, rest),
        None => ("", e.strip_prefix("http://").unwrap_or(e)),
    };
    let e = e.trim_end_matches('/');
    if e.contains('/') {
        return Err(bad("has a path; give host:port"));
    }
    match e.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0) => {
            Ok(format!("{scheme}{e}"))
        }
        _ => Err(bad("is not host:port with a non-zero port")),
    }
}

pub(crate) fn protocol(endpoint: &str, detail: impl Into<String>) -> EtcdError {
    EtcdError::Protocol { endpoint: endpoint.to_owned(), detail: detail.into() }
}

/// Parses a successful answer, quoting it if it does not fit `T`.
fn parse<T: DeserializeOwned>(endpoint: &str, body: &[u8]) -> Result<T, EtcdError> {
    serde_json::from_slice(body).map_err(|e| protocol(endpoint, format!("{e} in {}", quote(body))))
}

/// The error for a non-2xx answer, with etcd's message if the body is its JSON error.
pub(crate) fn http_error(endpoint: &str, status: u16, body: &[u8]) -> EtcdError {
    let (code, message) = match serde_json::from_slice::<wire::ErrorBody>(body) {
        Ok(b) if !b.message.is_empty() => (b.code, b.message),
        Ok(b) if !b.error.is_empty() => (b.code, b.error),
        _ => (None, quote(body)),
    };
    EtcdError::Http { endpoint: endpoint.to_owned(), status, code, message }
}

/// Turns etcd's "requested lease not found" into [`EtcdError::LeaseExpired`].
fn lease_gone(error: EtcdError, lease: Option<i64>) -> EtcdError {
    match (&error, lease) {
        (EtcdError::Http { code: Some(GRPC_NOT_FOUND), message, .. }, Some(lease))
            if message.contains("lease not found") =>
        {
            EtcdError::LeaseExpired { lease }
        }
        _ => error,
    }
}

pub(crate) fn decode_kv(endpoint: &str, kv: wire::RawKeyValue) -> Result<KeyValue, EtcdError> {
    let key = wire::unb64("key", &kv.key).map_err(|e| protocol(endpoint, e))?;
    let key = String::from_utf8(key).map_err(|e| {
        protocol(endpoint, format!("key {:?} is not UTF-8", String::from_utf8_lossy(e.as_bytes())))
    })?;
    let value = wire::unb64("value", &kv.value).map_err(|e| protocol(endpoint, e))?;
    Ok(KeyValue {
        key,
        value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        lease: kv.lease,
    })
}

/// The start of `body` as text, for error messages.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(QUOTED_BODY_CHARS) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// The guard "`key` was last written at `revision`" (0: absent); a negative one is refused.
fn modified(key: &str, revision: i64) -> Result<Guard, EtcdError> {
    if revision < 0 {
        return Err(EtcdError::InvalidArgument {
            what: format!("expected mod revision {revision} of {key:?} is negative"),
        });
    }
    Ok(Guard::Modified(revision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::EtcdServer;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Instant;

    fn client(server: &EtcdServer) -> Client {
        Client::new(&[server.endpoint()], Duration::from_secs(2)).unwrap()
    }

    /// An address nothing listens on (a port just released by the kernel).
    fn dead_endpoint() -> String {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
    }

    #[test]
    fn endpoints_are_checked_and_normalized() {
        let c =
            Client::new(&["http://127.0.0.1:2379/".into(), "h:1".into()], Duration::from_secs(1)).unwrap();
        assert_eq!(c.endpoints(), ["127.0.0.1:2379", "h:1"]);
        for bad in ["https://h:2379", "h", "h:0", "h:x", ":1", "h:1/v3"] {
            let e = Client::new(&[bad.into()], Duration::from_secs(1)).unwrap_err();
            assert!(matches!(&e, EtcdError::InvalidArgument { what } if what.contains(bad)), "{bad}: {e}");
        }
        assert!(Client::new(&[], Duration::from_secs(1)).is_err());
        assert!(Client::new(&["h:1".into()], Duration::ZERO).is_err());
    }

    #[test]
    fn unreachable_endpoints_are_named() {
        let endpoints = vec![dead_endpoint(), dead_endpoint()];
        let c = Client::new(&endpoints, Duration::from_millis(500)).unwrap();
        let started = Instant::now();
        match c.get("k") {
            Err(EtcdError::Unreachable { endpoints: tried, last_error }) => {
                assert_eq!(tried, endpoints);
                assert!(last_error.contains(&endpoints[1]), "{last_error}");
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn put_get_delete_round_trip() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        assert_eq!(c.get("a").unwrap(), None);
        let r1 = c.put("a", b"one", None).unwrap();
        let kv = c.get("a").unwrap().unwrap();
        assert_eq!(
            (kv.key.as_str(), &kv.value[..], kv.mod_revision, kv.create_revision),
            ("a", &b"one"[..], r1, r1)
        );
        assert_eq!((kv.version, kv.lease), (1, 0));
        let binary: Vec<u8> = (0..=255).collect();
        let r2 = c.put("a", &binary, None).unwrap();
        assert!(r2 > r1);
        let kv = c.get("a").unwrap().unwrap();
        assert_eq!((kv.value, kv.mod_revision, kv.create_revision, kv.version), (binary, r2, r1, 2));
        c.put("a", b"", None).unwrap();
        assert_eq!(c.get("a").unwrap().unwrap().value, b"");
        c.delete("a").unwrap();
        assert_eq!(c.get("a").unwrap(), None);
        c.delete("a").unwrap();
    }

    #[test]
    fn get_prefix_returns_only_the_prefix_in_key_order() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        for key in ["p/b", "p/a", "p", "q", "p/c/d", "o"] {
            c.put(key, key.as_bytes(), None).unwrap();
        }
        let keys: Vec<String> = c.get_prefix("p/").unwrap().into_iter().map(|kv| kv.key).collect();
        assert_eq!(keys, ["p/a", "p/b", "p/c/d"]);
        assert_eq!(c.get_prefix("").unwrap().len(), 6);
        assert!(c.get_prefix("z").unwrap().is_empty());
    }

    #[test]
    fn create_if_absent_succeeds_once() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        assert!(c.create_if_absent("lock", b"first", None).unwrap());
        assert!(!c.create_if_absent("lock", b"second", None).unwrap());
        assert_eq!(c.get("lock").unwrap().unwrap().value, b"first");
        c.delete("lock").unwrap();
        assert!(c.create_if_absent("lock", b"third", None).unwrap());
    }

    #[test]
    fn compare_and_swap_needs_the_current_revision() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        assert!(!c.compare_and_swap("k", 1, b"x", None).unwrap(), "a missing key has revision 0");
        assert!(c.compare_and_swap("k", 0, b"v1", None).unwrap());
        assert!(!c.compare_and_swap("k", 0, b"v1 again", None).unwrap());
        let rev = c.get("k").unwrap().unwrap().mod_revision;
        assert!(c.compare_and_swap("k", rev, b"v2", None).unwrap());
        assert!(!c.compare_and_swap("k", rev, b"stale", None).unwrap());
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v2");
        assert!(c.compare_and_swap("k", -1, b"x", None).is_err());
    }

    #[test]
    fn compare_and_swap_unless_also_needs_the_other_key_absent() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        assert!(c.compare_and_swap_unless("k", 0, "leader", b"v1", None).unwrap());
        let rev = c.get("k").unwrap().unwrap().mod_revision;
        c.put("leader", b"someone", None).unwrap();
        assert!(!c.compare_and_swap_unless("k", rev, "leader", b"v2", None).unwrap(), "the other key exists");
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v1");
        c.delete("leader").unwrap();
        assert!(
            !c.compare_and_swap_unless("k", rev + 100, "leader", b"v2", None).unwrap(),
            "a stale revision"
        );
        assert!(c.compare_and_swap_unless("k", rev, "leader", b"v2", None).unwrap());
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v2");
        assert!(c.compare_and_swap_unless("k", -1, "leader", b"x", None).is_err());
    }

    #[test]
    fn compare_and_swap_while_also_needs_the_held_key_unchanged_since_its_creation() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        c.put("leader", b"me", None).unwrap();
        let created = c.get("leader").unwrap().unwrap().create_revision;
        assert!(c.compare_and_swap_while("k", 0, "leader", created, b"v1", None).unwrap());
        let rev = c.get("k").unwrap().unwrap().mod_revision;
        // Written again, the key keeps its create revision: still held.
        c.put("leader", b"me, renewed", None).unwrap();
        assert!(c.compare_and_swap_while("k", rev, "leader", created, b"v2", None).unwrap());
        let rev = c.get("k").unwrap().unwrap().mod_revision;
        // Deleted, then made again by someone else: not the key that was held.
        c.delete("leader").unwrap();
        assert!(!c.compare_and_swap_while("k", rev, "leader", created, b"v3", None).unwrap(), "gone");
        c.put("leader", b"someone else", None).unwrap();
        assert!(!c.compare_and_swap_while("k", rev, "leader", created, b"v3", None).unwrap(), "made again");
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v2");
        assert!(c.compare_and_swap_while("k", rev, "leader", 0, b"x", None).is_err());
    }

    #[test]
    fn lease_keys_vanish_when_the_lease_is_not_renewed() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        // 2 s: the put and the get below, on a loaded machine, come well within the lease.
        let ttl = Duration::from_secs(2);
        let lease = c.grant(ttl).unwrap();
        // Taken before the keepalive is sent: etcd counts the TTL from when it gets it, later.
        // (Taken after the put and the get, a slow put made a lease on time look early.)
        let renewed = Instant::now();
        assert_eq!(c.keep_alive(lease).unwrap(), ttl);
        c.put("leased", b"v", Some(lease)).unwrap();
        assert_eq!(c.get("leased").unwrap().unwrap().lease, lease);
        while c.get("leased").unwrap().is_some() {
            assert!(renewed.elapsed() < ttl + Duration::from_secs(3), "the leased key outlived its lease");
            thread::sleep(Duration::from_millis(20));
        }
        let took = renewed.elapsed();
        assert!(took >= ttl - Duration::from_millis(100), "expired early: {took:?}");
        assert_eq!(c.keep_alive(lease), Err(EtcdError::LeaseExpired { lease }));
        assert_eq!(c.put("leased", b"v", Some(lease)), Err(EtcdError::LeaseExpired { lease }));
        assert_eq!(c.create_if_absent("leased", b"v", Some(lease)), Err(EtcdError::LeaseExpired { lease }));
        assert_eq!(c.revoke(lease), Err(EtcdError::LeaseExpired { lease }));
    }

    #[test]
    fn revoke_deletes_the_lease_keys_at_once() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        let lease = c.grant(Duration::from_secs(30)).unwrap();
        c.put("leased", b"v", Some(lease)).unwrap();
        c.revoke(lease).unwrap();
        assert_eq!(c.get("leased").unwrap(), None);
    }

    #[test]
    fn a_dead_endpoint_is_skipped() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = Client::new(&[dead_endpoint(), server.endpoint()], Duration::from_secs(2)).unwrap();
        c.put("k", b"v", None).unwrap();
        assert!(c.create_if_absent("k2", b"v", None).unwrap());
        assert_eq!(c.get("k").unwrap().unwrap().value, b"v");
    }

    #[test]
    fn refusals_carry_etcd_message() {
        let Some(server) = EtcdServer::start_for_test() else { return };
        let c = client(&server);
        match c.get("") {
            Err(EtcdError::Http { status: 400, code: Some(3), message, .. }) => {
                assert!(message.contains("key is not provided"), "{message}")
            }
            other => panic!("expected a 400 refusal, got {other:?}"),
        }
    }
}
