//! etcd's JSON gateway encoding: the request bodies this client sends and the answers it reads.
//!
//! The gateway uses the proto3 JSON mapping: `bytes` fields (keys, values) are base64, `int64`
//! fields are decimal strings, and fields at their zero value are left out altogether (an
//! absent `kvs` is an empty range, an absent `TTL` is zero, an absent `value` is empty).

use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

/// Encodes bytes as the gateway wants `bytes` fields.
pub(crate) fn b64(bytes: &[u8]) -> String {
    crate::base64::encode(bytes)
}

/// Decodes a `bytes` field.
pub(crate) fn unb64(field: &str, text: &str) -> Result<Vec<u8>, String> {
    crate::base64::decode(text).map_err(|e| format!("field {field} is not base64 ({e}): {text:?}"))
}

/// The `range_end` that makes a range cover every key starting with `prefix`: the prefix with
/// its last byte below 0xff incremented and what follows cut off; `\0` (all keys) if none is.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Reads an `int64` field, which the gateway writes as a string but also accepts as a number.
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Int64 {
        Text(String),
        Number(i64),
    }
    match Int64::deserialize(d)? {
        Int64::Number(n) => Ok(n),
        Int64::Text(s) => s.parse().map_err(|_| serde::de::Error::custom(format!("not an int64: {s:?}"))),
    }
}

/// The body of `/v3/kv/range`.
pub(crate) fn range(key: &[u8], range_end: Option<&[u8]>) -> Value {
    let mut body = json!({ "key": b64(key) });
    if let Some(end) = range_end {
        body["range_end"] = json!(b64(end));
    }
    body
}

/// A `PutRequest`, as the body of `/v3/kv/put` or inside a transaction.
pub(crate) fn put(key: &[u8], value: &[u8], lease: Option<i64>) -> Value {
    let mut body = json!({ "key": b64(key), "value": b64(value) });
    if let Some(lease) = lease {
        body["lease"] = json!(lease.to_string());
    }
    body
}

/// What a transaction compares before it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// The key's create revision equals this (0: the key does not exist).
    Created(i64),
    /// The key's mod revision equals this (0: the key does not exist).
    Modified(i64),
}

/// The body of `/v3/kv/txn`: if every guard holds for its key, put `value` under `key` with
/// `lease`.
pub(crate) fn txn_put_if(guards: &[(Guard, &[u8])], key: &[u8], value: &[u8], lease: Option<i64>) -> Value {
    let compare: Vec<Value> = guards
        .iter()
        .map(|&(guard, on)| {
            let (target, field, revision) = match guard {
                Guard::Created(r) => ("CREATE", "create_revision", r),
                Guard::Modified(r) => ("MOD", "mod_revision", r),
            };
            json!({ "target": target, "result": "EQUAL", "key": b64(on), field: revision.to_string() })
        })
        .collect();
    json!({
        "compare": compare,
        "success": [{ "request_put": put(key, value, lease) }],
    })
}

/// The body of `/v3/kv/deleterange` for one key.
pub(crate) fn delete(key: &[u8]) -> Value {
    json!({ "key": b64(key) })
}

/// The body of `/v3/lease/grant`; the server picks the id.
pub(crate) fn grant(ttl_s: i64) -> Value {
    json!({ "TTL": ttl_s.to_string(), "ID": "0" })
}

/// The body of `/v3/lease/keepalive` and `/v3/lease/revoke`.
pub(crate) fn lease_id(lease: i64) -> Value {
    json!({ "ID": lease.to_string() })
}

/// The header every answer carries.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Header {
    #[serde(deserialize_with = "int64")]
    pub(crate) revision: i64,
}

/// One key-value pair as the gateway writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RawKeyValue {
    pub(crate) key: String,
    pub(crate) value: String,
    #[serde(deserialize_with = "int64")]
    pub(crate) create_revision: i64,
    #[serde(deserialize_with = "int64")]
    pub(crate) mod_revision: i64,
    #[serde(deserialize_with = "int64")]
    pub(crate) version: i64,
    #[serde(deserialize_with = "int64")]
    pub(crate) lease: i64,
}

/// The answer to `/v3/kv/range`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RangeResponse {
    pub(crate) kvs: Vec<RawKeyValue>,
    #[serde(deserialize_with = "int64")]
    pub(crate) count: i64,
    pub(crate) more: bool,
}

/// The answer to `/v3/kv/put` and `/v3/kv/deleterange`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WriteResponse {
    pub(crate) header: Header,
}

/// The answer to `/v3/kv/txn`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TxnResponse {
    pub(crate) succeeded: bool,
}

/// The answer to `/v3/lease/grant`; `error` is set (with a 200 status) when the grant failed.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GrantResponse {
    #[serde(rename = "ID", deserialize_with = "int64")]
    pub(crate) id: i64,
    #[serde(rename = "TTL", deserialize_with = "int64")]
    pub(crate) ttl_s: i64,
    pub(crate) error: String,
}

/// One message of the `/v3/lease/keepalive` stream: `{"result": {...}}`, or `{"error": {...}}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct KeepAliveMessage {
    pub(crate) result: Option<KeepAliveResponse>,
    pub(crate) error: Option<Value>,
}

/// The answer inside a keepalive message; `TTL` is absent (zero) when the lease is gone.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct KeepAliveResponse {
    #[serde(rename = "ID", deserialize_with = "int64")]
    pub(crate) id: i64,
    #[serde(rename = "TTL", deserialize_with = "int64")]
    pub(crate) ttl_s: i64,
}

/// The body of `/v3/watch`: watch `key` (every key from `key` up to `range_end`, if given),
/// from `start_revision` (0: from now on).
pub(crate) fn watch(key: &[u8], range_end: Option<&[u8]>, start_revision: i64) -> Value {
    let mut create = json!({ "key": b64(key) });
    if let Some(end) = range_end {
        create["range_end"] = json!(b64(end));
    }
    if start_revision > 0 {
        create["start_revision"] = json!(start_revision.to_string());
    }
    json!({ "create_request": create })
}

/// One message of the `/v3/watch` stream: `{"result": {...}}`, or `{"error": {...}}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WatchMessage {
    pub(crate) result: Option<WatchResponse>,
    pub(crate) error: Option<Value>,
}

/// A watch answer: the watch was created, or cancelled, or events happened (or, with no
/// events, a progress notification: nothing happened up to the header's revision).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct WatchResponse {
    pub(crate) header: Header,
    pub(crate) created: bool,
    pub(crate) canceled: bool,
    /// Set when the watch asked for a revision etcd has compacted away (and is cancelled).
    #[serde(deserialize_with = "int64")]
    pub(crate) compact_revision: i64,
    pub(crate) cancel_reason: String,
    pub(crate) events: Vec<RawEvent>,
}

/// One change: a put (`type` absent) or a delete (`"DELETE"`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RawEvent {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) kv: RawKeyValue,
}

/// The gateway's error body, sent with a non-2xx status.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorBody {
    pub(crate) error: String,
    pub(crate) message: String,
    pub(crate) code: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"abc"), b"abd");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
        assert_eq!(prefix_end(b""), b"\0");
    }

    #[test]
    fn base64_round_trip_and_bad_input() {
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(unb64("key", "Zm9v").unwrap(), b"foo");
        assert!(unb64("key", "!!").unwrap_err().contains("key"));
    }

    #[test]
    fn int64_fields_read_from_strings_numbers_or_absence() {
        let kv: RawKeyValue =
            serde_json::from_str(r#"{"key":"YQ==","create_revision":"3","mod_revision":4}"#).unwrap();
        assert_eq!((kv.create_revision, kv.mod_revision, kv.lease, kv.value.as_str()), (3, 4, 0, ""));
        assert!(serde_json::from_str::<RawKeyValue>(r#"{"lease":"x"}"#).is_err());
    }

    #[test]
    fn keepalive_message_of_a_missing_lease_has_no_ttl() {
        let m: KeepAliveMessage =
            serde_json::from_str(r#"{"result":{"header":{"revision":"6"},"ID":"123"}}"#).unwrap();
        let r = m.result.unwrap();
        assert_eq!((r.id, r.ttl_s), (123, 0));
    }

    #[test]
    fn watch_messages_read_events_and_cancellations() {
        let raw = r#"{"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"Zm9v","mod_revision":"2","value":"YmFy"}},{"type":"DELETE","kv":{"key":"Zm9v","mod_revision":"3"}}]}}"#;
        let m: WatchMessage = serde_json::from_str(raw).unwrap();
        let r = m.result.unwrap();
        assert_eq!((r.header.revision, r.created, r.canceled, r.events.len()), (3, false, false, 2));
        assert_eq!((r.events[0].kind.as_str(), r.events[0].kv.mod_revision), ("", 2));
        assert_eq!((r.events[1].kind.as_str(), r.events[1].kv.value.as_str()), ("DELETE", ""));
        let raw = r#"{"result":{"header":{},"canceled":true,"compact_revision":"3"}}"#;
        let r = serde_json::from_str::<WatchMessage>(raw).unwrap().result.unwrap();
        assert_eq!((r.canceled, r.compact_revision), (true, 3));
        assert_eq!(watch(b"k", None, 0), json!({"create_request": {"key": "aw=="}}));
        assert_eq!(watch(b"k", Some(b"l"), 7)["create_request"]["start_revision"], "7");
    }

    #[test]
    fn txn_compares_the_named_revision() {
        let t = txn_put_if(&[(Guard::Modified(7), b"k"), (Guard::Created(0), b"l")], b"k", b"v", Some(9));
        assert_eq!(t["compare"][0]["target"], "MOD");
        assert_eq!(t["compare"][0]["mod_revision"], "7");
        assert_eq!(t["compare"][0]["key"], "aw==");
        assert_eq!(t["compare"][1]["target"], "CREATE");
        assert_eq!(t["compare"][1]["create_revision"], "0");
        assert_eq!(t["compare"][1]["key"], "bA==");
        assert_eq!(t["success"][0]["request_put"]["lease"], "9");
    }
}
