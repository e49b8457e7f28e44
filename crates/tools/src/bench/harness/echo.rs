//! `mojim echo`: the other end of `tcp-rtt`.

use mojim::config::Config;
use mojim::error::{Error, Result};
use mojim_transport::{AnyTransport, Conn, Transport};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// The other end of `tcp-rtt`: per connection, reads a size, then for each message of that
/// size answers with 64 bytes (the size of an acknowledgement). Over TCP, UCX (`ucx:` address) or shared memory
/// when `listen` is a path; over mutual TLS when `config` has `[security] tls = true`.
pub fn echo_server(listen: &str, busy_poll_us: u64, config: Option<&Path>) -> Result<()> {
    let tls = match config {
        Some(c) => Config::load(c)?.tls()?,
        None => None,
    };
    let t = AnyTransport::new(tls);
    let l = t.listen(listen).map_err(Error::io(format!("listen on {listen}")))?;
    println!("serving on {}", t.local_addr(&l).map_err(Error::io("local address"))?);
    let _ = std::io::stdout().flush();
    loop {
        let Ok(mut c) = t.accept(&l) else { continue };
        std::thread::spawn(move || -> std::io::Result<()> {
            c.set_busy_poll(Duration::from_micros(busy_poll_us));
            let mut sz = [0u8; 8];
            c.read_exact(&mut sz)?;
            let size = u64::from_le_bytes(sz).min(64 << 20) as usize;
            let mut buf = vec![0u8; size];
            let reply = [0u8; 64];
            loop {
                c.read_exact(&mut buf)?;
                c.write_all(&reply)?;
            }
        });
    }
}
