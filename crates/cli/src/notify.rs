//! systemd's service notification protocol (sd_notify(3)), for units of `Type=notify`: one Unix
//! datagram of `KEY=value` lines to the socket named by `$NOTIFY_SOCKET` (a path, or an abstract
//! name written with a leading `@`). `mojim serve` sends `READY=1` once it listens and its data
//! area is open, `mojim kv` once it serves clients; both send `STOPPING=1` when asked to stop,
//! and `STATUS=` lines that `systemctl status` shows. Without `$NOTIFY_SOCKET` nothing is sent.
//! A message that cannot be sent is logged and the daemon goes on: systemd then counts the
//! start as failed by its own timeout, which says more than a daemon that refuses to run.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// A connection to the service manager's notification socket.
pub struct Notifier {
    socket: UnixDatagram,
    to: SocketAddr,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` names, or `None` when it is unset or empty (not run by a
    /// service manager that listens).
    pub fn from_env() -> io::Result<Option<Notifier>> {
        match std::env::var_os(NOTIFY_SOCKET) {
            Some(v) if !v.is_empty() => Notifier::new(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// A notifier for the socket `name`: a file system path (absolute), or `@name` for a name in
    /// the abstract namespace.
    pub fn new(name: &OsStr) -> io::Result<Notifier> {
        let bytes = name.as_bytes();
        let to = match bytes.split_first() {
            Some((b'@', rest)) => SocketAddr::from_abstract_name(rest)?,
            Some((b'/', _)) => SocketAddr::from_pathname(name)?,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{NOTIFY_SOCKET}={name:?} is neither an absolute path nor an abstract name (@...); \
                         other kinds (vsock:) are not supported"
                    ),
                ))
            }
        };
        Ok(Notifier { socket: UnixDatagram::unbound()?, to })
    }

    /// Sends `state`: newline-separated `KEY=value` assignments, in one datagram.
    pub fn send(&self, state: &str) -> io::Result<()> {
        let n = self.socket.send_to_addr(state.as_bytes(), &self.to)?;
        if n != state.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("sent {n} of the {} bytes of a notification", state.len()),
            ));
        }
        Ok(())
    }
}

/// Sends `state` to `$NOTIFY_SOCKET` when it is set, logging (not returning) a failure.
pub fn notify(state: &str) {
    match Notifier::from_env().and_then(|n| n.map_or(Ok(()), |n| n.send(state))) {
        Ok(()) => {}
        Err(e) => tracing::warn!(
            "could not tell the service manager {:?} through ${NOTIFY_SOCKET}: {e}",
            state.replace('\n', " ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn receive(r: &UnixDatagram) -> String {
        r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 512];
        let n = r.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn sends_one_datagram_to_a_path() {
        let dir = std::env::temp_dir().join(format!("mojim-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let r = UnixDatagram::bind(&path).unwrap();
        let n = Notifier::new(path.as_os_str()).unwrap();
        n.send("READY=1\nSTATUS=serving on 127.0.0.1:7420").unwrap();
        n.send("STOPPING=1").unwrap();
        assert_eq!(receive(&r), "READY=1\nSTATUS=serving on 127.0.0.1:7420");
        assert_eq!(receive(&r), "STOPPING=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sends_to_an_abstract_name() {
        let name = format!("mojim-notify-test-{}", std::process::id());
        let r = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        let n = Notifier::new(OsStr::new(&format!("@{name}"))).unwrap();
        n.send("READY=1").unwrap();
        assert_eq!(receive(&r), "READY=1");
    }

    #[test]
    fn refuses_a_relative_or_unknown_address() {
        for bad in ["notify.sock", "vsock:2:1234"] {
            let e = Notifier::new(OsStr::new(bad)).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn a_socket_nobody_listens_on_is_an_error() {
        let dir = std::env::temp_dir().join(format!("mojim-notify-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = Notifier::new(dir.join("absent.sock").as_os_str()).unwrap();
        assert!(n.send("READY=1").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
