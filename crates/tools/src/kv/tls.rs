//! Client TLS for `mojim bench --kv --tls on`: a CA made for the run, a server certificate that
//! every target presents on its TLS port (mojim kv's `[kv] tls_listen`, Redis's `tls-port`) and
//! a client certificate that redis-benchmark presents (both servers ask for one, as
//! `tls-auth-clients yes`, Redis's default). The folder is removed when the run ends, by the
//! janitor if the benchmark dies.

use super::janitor::Janitor;
use mojim::config::write_private;
use mojim::error::{Error, Result};
use mojim_transport::tls::pki::{Ca, Validity};
use mojim_transport::Role;
use std::path::{Path, PathBuf};

/// The run's certificates, in a folder of their own.
pub struct KvTls {
    dir: PathBuf,
}

impl KvTls {
    /// Makes the CA and the two certificates in `dir` (created, and handed to the janitor).
    pub fn make(dir: &Path, janitor: &mut Janitor) -> Result<KvTls> {
        janitor.folder(dir);
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        let tls = KvTls { dir: dir.to_path_buf() };
        let write = |name: &str, text: &str| {
            let p = tls.dir.join(name);
            write_private(&p, text).map_err(Error::io(format!("write {}", p.display())))
        };
        let ca = Ca::new("mojim bench kv CA").map_err(Error::Config)?;
        write("ca.pem", ca.cert_pem())?;
        for (name, role) in [("server", Role::Node), ("client", Role::Application)] {
            let issued = ca.issue(name, role, Validity::Years(1)).map_err(Error::Config)?;
            write(&format!("{name}.pem"), &issued.cert_pem)?;
            write(&format!("{name}.key"), &issued.key_pem)?;
        }
        Ok(tls)
    }

    /// A file of the folder, as a string (the servers' and redis-benchmark's arguments).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    /// redis-benchmark's arguments for a TLS connection with the client certificate.
    pub fn client_args(&self) -> [String; 7] {
        [
            "--tls".into(),
            "--cacert".into(),
            self.path("ca.pem"),
            "--cert".into(),
            self.path("client.pem"),
            "--key".into(),
            self.path("client.key"),
        ]
    }

    /// redis-server's arguments for a TLS port beside its plaintext one.
    pub fn redis_args(&self, port: &str) -> [String; 8] {
        [
            "--tls-port".into(),
            port.into(),
            "--tls-cert-file".into(),
            self.path("server.pem"),
            "--tls-key-file".into(),
            self.path("server.key"),
            "--tls-ca-cert-file".into(),
            self.path("ca.pem"),
        ]
    }

    /// Sets mojim kv's `[kv] tls_*` settings: a TLS listener at `addr` beside the plaintext one.
    pub fn configure(&self, kv: &mut mojim_kv::KvSection, addr: &str) {
        kv.tls_listen = addr.into();
        kv.tls_cert_file = self.path("server.pem");
        kv.tls_key_file = self.path("server.key");
        kv.tls_ca_cert_file = self.path("ca.pem");
        kv.tls_auth_clients = "yes".into();
    }
}

impl Drop for KvTls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
