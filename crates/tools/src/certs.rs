//! A quick-start certificate authority in a folder: `mojim init --tls` and the benchmark's TLS
//! runs (`mojim bench --tls on`) make a CA and a certificate for a node, an operator and an
//! application, and turn on `[security] tls` in the configuration that uses them.

use mojim::error::{Error, Result};
use mojim_transport::tls::pki::{Ca, Validity};
use mojim_transport::Role;
use std::path::Path;

/// Makes `dir`/tls: a CA (its key too, to issue more) and a certificate and key for a node, an
/// operator and an application, every file mode 0600 (an existing file is never overwritten);
/// returns `config` (`mojim init`'s template) with the `[security]` TLS settings on, naming the
/// node's certificate, and `[primary]` naming the application's.
pub fn make_cluster_certs(dir: &Path, config: &str) -> Result<String> {
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).map_err(Error::io(format!("create {}", tls.display())))?;
    let write = |name: &str, text: &str| {
        let p = tls.join(name);
        if p.exists() {
            return Err(Error::Config(format!("{} exists; certificates are never overwritten", p.display())));
        }
        mojim::config::write_private(&p, text).map_err(Error::io(format!("write {}", p.display())))
    };
    let ca = Ca::new("mojim cluster CA").map_err(Error::Config)?;
    write("ca.pem", ca.cert_pem())?;
    write("ca.key", ca.key_pem())?;
    for role in [Role::Node, Role::Operator, Role::Application] {
        let issued = ca.issue(role.name(), role, Validity::Years(1)).map_err(Error::Config)?;
        write(&format!("{}.pem", role.name()), &issued.cert_pem)?;
        write(&format!("{}.key", role.name()), &issued.key_pem)?;
    }
    Ok(config
        .replacen(
            "tls = false\n",
            "tls = true\nca_file = \"tls/ca.pem\"\ncert_file = \"tls/node.pem\"\nkey_file = \"tls/node.key\"\n",
            1,
        )
        .replacen(
            "[primary]\n",
            "[primary]\n# The application's own certificate (role application; see [security] tls).\n\
             cert_file = \"tls/application.pem\"\nkey_file = \"tls/application.key\"\n",
            1,
        ))
}
