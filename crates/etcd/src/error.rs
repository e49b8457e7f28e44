//! What can go wrong talking to etcd, typed by whose fault it is.

use std::fmt;

/// An etcd operation failed.
///
/// The variants say whose fault the failure is: the caller's ([`EtcdError::InvalidArgument`]),
/// the network's or the cluster's ([`EtcdError::Unreachable`], [`EtcdError::OutcomeUnknown`]),
/// the server's judgement of the request ([`EtcdError::Http`], [`EtcdError::LeaseExpired`]) or
/// the server's misbehaviour ([`EtcdError::Protocol`]) or this process's own trouble
/// ([`EtcdError::Local`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// The caller passed something unusable: an empty endpoint list, an `https://` endpoint, a
    /// zero timeout, a TTL the election cannot work with.
    InvalidArgument {
        /// What was wrong, naming the offending value.
        what: String,
    },
    /// No endpoint answered. A read, put, delete or lease call may have reached one before its
    /// connection failed (they are safe to repeat); a transaction that may have been applied is
    /// reported as [`EtcdError::OutcomeUnknown`] instead.
    Unreachable {
        /// Every endpoint that was tried, in the order tried.
        endpoints: Vec<String>,
        /// The error of the last attempt.
        last_error: String,
    },
    /// A request that is not safe to repeat (a transaction) was sent, and then the connection
    /// failed before the answer came: etcd may or may not have applied it.
    OutcomeUnknown {
        /// The endpoint the request was sent to.
        endpoint: String,
        /// The transport error after sending.
        error: String,
    },
    /// etcd refused the request. The gateway maps gRPC codes onto HTTP statuses: 400 for a
    /// malformed request, 404 for a missing lease, 503 when the member has no leader, ...
    Http {
        /// The endpoint that answered.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// The gRPC status code from the body, when the body had one.
        code: Option<i64>,
        /// etcd's message, or the raw body when it was not etcd's JSON error.
        message: String,
    },
    /// etcd's answer could not be understood: broken HTTP framing, JSON that does not match
    /// the API, a non-base64 key.
    Protocol {
        /// The endpoint that answered.
        endpoint: String,
        /// What was wrong with the answer.
        detail: String,
    },
    /// This process could not do its own part, such as starting the lease renewal thread.
    Local {
        /// What failed.
        what: String,
    },
    /// The lease does not exist any more: it expired or was revoked, and every key attached to
    /// it is gone.
    LeaseExpired {
        /// The lease's id.
        lease: i64,
    },
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::InvalidArgument { what } => {
                write!(f, "invalid etcd client argument: {what}; fix the caller's configuration")
            }
            EtcdError::Unreachable { endpoints, last_error } => write!(
                f,
                "no etcd endpoint reachable (tried {}; last error: {last_error}); check that etcd \
                 runs and listens on these addresses",
                endpoints.join(", ")
            ),
            EtcdError::OutcomeUnknown { endpoint, error } => write!(
                f,
                "etcd at {endpoint} failed after a transaction was sent ({error}); it may or may not \
                 have been applied: read the key to find out before retrying"
            ),
            EtcdError::Http { endpoint, status, code, message } => {
                write!(f, "etcd at {endpoint} refused the request: HTTP {status}")?;
                if let Some(code) = code {
                    write!(f, ", gRPC code {code}")?;
                }
                write!(f, ": {message}")
            }
            EtcdError::Protocol { endpoint, detail } => write!(
                f,
                "etcd at {endpoint} sent an answer this client cannot understand: {detail}; check \
                 that the endpoint is an etcd v3.4+ client URL"
            ),
            EtcdError::Local { what } => {
                write!(f, "{what}; the process is short of a resource (threads, memory)")
            }
            EtcdError::LeaseExpired { lease } => write!(
                f,
                "etcd lease {lease:#x} expired or was revoked; its keys are gone: grant a new lease"
            ),
        }
    }
}

impl std::error::Error for EtcdError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_names_every_endpoint() {
        let e = EtcdError::Unreachable {
            endpoints: vec!["a:1".into(), "b:2".into()],
            last_error: "connection refused".into(),
        };
        let s = e.to_string();
        assert!(s.contains("a:1, b:2") && s.contains("connection refused"), "{s}");
    }

    #[test]
    fn http_shows_code_when_known() {
        let e = EtcdError::Http { endpoint: "e:1".into(), status: 503, code: Some(14), message: "m".into() };
        assert_eq!(e.to_string(), "etcd at e:1 refused the request: HTTP 503, gRPC code 14: m");
    }
}
