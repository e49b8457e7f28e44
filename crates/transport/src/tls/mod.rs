//! Mutual TLS 1.3 on TCP links (`[security] tls = true`): every connection authenticated by
//! a certificate from the cluster's CA and encrypted, with the holder's role (node, operator,
//! application) in its certificate. rustls, with ring as its crypto provider.
//!
//! - [`context`]: the CA, certificate, key and revocation list files, loaded and checked, the
//!   rustls configurations made from them, and their reload in place;
//! - [`identity`]: a certificate's subject and role; [`der`]: just enough DER to read them;
//! - [`verify`]: the checks of the peer's certificate during the handshake;
//! - [`client`]: a client to a server outside the cluster (etcd, Redis), as their own tools;
//! - [`conn`]: a connection with a receiving and a sending handle over one TLS session;
//! - [`pki`] (feature `pki`): making a CA and certificates (`mojim init --tls`, tests).

pub mod client;
mod conn;
mod context;
mod der;
mod identity;
#[cfg(any(test, feature = "pki"))]
pub mod pki;
#[cfg(test)]
mod tests;
mod verify;

pub use conn::TlsConn;
pub use context::{TlsContext, TlsFileError, TlsFiles, TlsLoaded, TlsPaths};
pub use identity::{not_after, PeerIdentity, Role, ROLE_URI_PREFIX};
pub use verify::CertificateRefused;
