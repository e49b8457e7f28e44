//! TLS links over loopback: data both ways through two handles, and each refusal with its
//! message on both sides.

use super::pki::{Ca, Issued, Validity};
use super::{Role, TlsContext, TlsFiles};
use crate::{AnyTransport, Conn, TcpTransport, Transport};
use std::io::{IoSlice, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn context(ca: &Ca, issued: &Issued) -> Arc<TlsContext> {
    let p = Path::new("x.pem");
    let files = TlsFiles {
        ca: (p, ca.cert_pem().as_bytes()),
        cert: (p, issued.cert_pem.as_bytes()),
        key: (p, issued.key_pem.as_bytes()),
    };
    Arc::new(TlsContext::from_pem(&files).expect("a valid context"))
}

fn ctx(ca: &Ca, subject: &str, role: Role) -> Arc<TlsContext> {
    context(ca, &ca.issue(subject, role, Validity::Years(1)).expect("certificate"))
}

/// A server on `server` that reads 8 bytes, answers them, and returns its error or the peer's
/// identity; the client on `client` sends, and returns what it got or its error.
fn exchange(server: AnyTransport, client: AnyTransport) -> (Result<String, String>, Result<Vec<u8>, String>) {
    let l = server.listen("127.0.0.1:0").expect("listen");
    let addr = server.local_addr(&l).expect("addr");
    let h = std::thread::spawn(move || {
        let mut c = server.accept(&l).map_err(|e| e.to_string())?;
        c.set_recv_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 8];
        c.read_exact(&mut b).map_err(|e| e.to_string())?;
        c.write_all(&b).map_err(|e| e.to_string())?;
        Ok(c.peer_identity().map(|i| i.to_string()).unwrap_or_default())
    });
    let got = (|| {
        let mut c = client.connect(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        c.set_recv_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"12345678").map_err(|e| e.to_string())?;
        let mut b = vec![0u8; 8];
        c.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(b)
    })();
    (h.join().unwrap(), got)
}

/// A node and an application of `ca` over TLS, the node listening on loopback: its transport,
/// the application's, the listener and its address.
fn node_and_app(ca: &Ca) -> (AnyTransport, AnyTransport, crate::AnyListener, String) {
    let server = AnyTransport::new(Some(ctx(ca, "node-a", Role::Node)));
    let client = AnyTransport::new(Some(ctx(ca, "app-1", Role::Application)));
    let l = server.listen("127.0.0.1:0").unwrap();
    let addr = server.local_addr(&l).unwrap();
    (server, client, l, addr)
}

#[test]
fn both_ends_know_each_other_and_data_crosses() {
    let ca = Ca::new("cluster").unwrap();
    let (s, c) = exchange(
        AnyTransport::new(Some(ctx(&ca, "node-a", Role::Node))),
        AnyTransport::new(Some(ctx(&ca, "app-1", Role::Application))),
    );
    assert_eq!(s.unwrap(), "\"app-1\" (role application)");
    assert_eq!(c.unwrap(), b"12345678");
}

#[test]
fn a_receiving_and_a_sending_handle_share_the_session() {
    let ca = Ca::new("cluster").unwrap();
    let (server, client, l, addr) = node_and_app(&ca);
    const N: usize = 4 << 20;
    // Each side sends N bytes from one handle while its other handle receives N: both
    // directions full at once, as a lane's Data and Acks are.
    let both = |c: crate::AnyConn, fill: u8| {
        let mut tx = c.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let a = vec![fill; N / 2];
            let b = vec![fill; N / 2];
            tx.send_all_vectored(&mut [IoSlice::new(&a), IoSlice::new(&b)]).unwrap();
        });
        let mut rx = c;
        let mut got = vec![0u8; N];
        rx.read_exact(&mut got).unwrap();
        sender.join().unwrap();
        got
    };
    let h = std::thread::spawn(move || both(server.accept(&l).unwrap(), 1));
    let got = both(client.connect(&addr, Duration::from_secs(5)).unwrap(), 2);
    assert!(got.iter().all(|&b| b == 1));
    assert!(h.join().unwrap().iter().all(|&b| b == 2));
}

#[test]
fn vectored_sends_arrive_whole_and_in_order() {
    let ca = Ca::new("cluster").unwrap();
    let (server, client, l, addr) = node_and_app(&ca);
    // Pieces small and large (past what is sealed at a time), and empty ones among them.
    let sizes = [3usize, 0, 100_000, 1, 0, 70_000, 64 << 10, 17];
    let pieces: Vec<Vec<u8>> =
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|j| (j * 31 + i * 7) as u8).collect()).collect();
    let want: Vec<u8> = pieces.concat();
    let total = want.len();
    let h = std::thread::spawn(move || {
        let mut c = server.accept(&l).unwrap();
        let mut got = vec![0u8; 2 * total];
        c.read_exact(&mut got).unwrap();
        got
    });
    let mut c = client.connect(&addr, Duration::from_secs(5)).unwrap();
    for _ in 0..2 {
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        c.send_all_vectored(&mut slices).unwrap();
    }
    let got = h.join().unwrap();
    assert!(got[..total] == want[..] && got[total..] == want[..]);
}

#[test]
fn more_pieces_than_one_seal_takes_arrive_in_order() {
    let ca = Ca::new("cluster").unwrap();
    let (server, client, l, addr) = node_and_app(&ca);
    // Three times the pieces one seal takes (a lane's 32 headers and bodies), some empty.
    let pieces: Vec<Vec<u8>> =
        (0..3 * 64).map(|i: usize| (0..(i * 37) % 300).map(|j| (j * 13 + i) as u8).collect()).collect();
    let want: Vec<u8> = pieces.concat();
    let total = want.len();
    let h = std::thread::spawn(move || {
        let mut c = server.accept(&l).unwrap();
        let mut got = vec![0u8; 2 * total];
        c.read_exact(&mut got).unwrap();
        got
    });
    let mut c = client.connect(&addr, Duration::from_secs(5)).unwrap();
    let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
    c.send_all_vectored(&mut slices).unwrap();
    let n = c.write_vectored(&slices).unwrap();
    assert_eq!(n, total);
    let got = h.join().unwrap();
    assert!(got[..total] == want[..] && got[total..] == want[..]);
}

#[test]
fn the_suite_is_aes_128_gcm_where_the_cpu_has_aes_instructions() {
    let ca = Ca::new("cluster").unwrap();
    let (server, client, l, addr) = node_and_app(&ca);
    let suite = |c: &crate::AnyConn| match c {
        crate::AnyConn::Tls(t) => t.with_session(|s| s.negotiated_cipher_suite().map(|s| s.suite())),
        _ => panic!("not a TLS connection"),
    };
    let h = std::thread::spawn(move || {
        let mut c = server.accept(&l).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        suite(&c)
    });
    let mut c = client.connect(&addr, Duration::from_secs(5)).unwrap();
    c.write_all(b"x").unwrap();
    let want = if super::context::hardware_aes() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256
    } else {
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    };
    assert_eq!(suite(&c), Some(want));
    assert_eq!(h.join().unwrap(), Some(want));
}

#[test]
fn another_cas_certificate_is_refused_on_both_sides() {
    let (ours, theirs) = (Ca::new("cluster").unwrap(), Ca::new("elsewhere").unwrap());
    let (s, c) = exchange(
        AnyTransport::new(Some(ctx(&ours, "node-a", Role::Node))),
        AnyTransport::new(Some(ctx(&theirs, "intruder", Role::Operator))),
    );
    // The client checks first: it names the node's certificate, the node hears its alert.
    let s = s.unwrap_err();
    assert!(s.contains("refused this side's certificate"), "{s}");
    let c = c.unwrap_err();
    assert!(c.contains("\"node-a\"") && c.contains("not signed by this side's cluster CA"), "{c}");
}

#[test]
fn an_expired_certificate_is_refused_naming_its_subject() {
    let ca = Ca::new("cluster").unwrap();
    let expired = ca.issue("old-operator", Role::Operator, Validity::Expired).unwrap();
    // Loading it is refused too: build the client by hand from a valid one, then swap.
    let p = Path::new("op.pem");
    let files = TlsFiles {
        ca: (p, ca.cert_pem().as_bytes()),
        cert: (p, expired.cert_pem.as_bytes()),
        key: (p, expired.key_pem.as_bytes()),
    };
    let e = TlsContext::from_pem(&files).unwrap_err().to_string();
    assert!(e.contains("[security] cert_file op.pem") && e.contains("old-operator"), "{e}");
}

#[test]
fn a_client_that_is_no_node_cannot_answer_as_one() {
    let ca = Ca::new("cluster").unwrap();
    let (s, c) = exchange(
        AnyTransport::new(Some(ctx(&ca, "app-as-node", Role::Application))),
        AnyTransport::new(Some(ctx(&ca, "op", Role::Operator))),
    );
    let c = c.unwrap_err();
    assert!(
        c.contains("\"app-as-node\"") && c.contains("its role is application, and only node may answer"),
        "{c}"
    );
    let s = s.unwrap_err();
    assert!(s.contains("refused this side's certificate"), "{s}");
}

#[test]
fn plaintext_against_tls_is_refused_naming_the_setting_both_ways() {
    let ca = Ca::new("cluster").unwrap();
    let tls = || AnyTransport::new(Some(ctx(&ca, "node-a", Role::Node)));
    let (s, c) = exchange(tls(), AnyTransport::plain());
    let s = s.unwrap_err();
    assert!(s.contains("plaintext") && s.contains("[security] tls = true"), "{s}");
    // The plain client is sent a Refuse frame naming the setting (a node reads it as such).
    let refusal = c.expect("eight bytes of the Refuse frame");
    assert_eq!(refusal.len(), 8);
    // A plain server answers in plaintext: the client names the setting.
    let l = TcpTransport.listen("127.0.0.1:0").unwrap();
    let addr = TcpTransport.local_addr(&l).unwrap();
    let h = std::thread::spawn(move || {
        let mut c = TcpTransport.accept(&l).unwrap();
        c.write_all(b"not TLS").unwrap();
        let _ = std::io::copy(&mut c, &mut std::io::sink());
    });
    // The handshake is finished in connect: the answer is read there.
    let c = tls().connect(&addr, Duration::from_secs(5)).err().expect("refused").to_string();
    h.join().unwrap();
    assert!(c.contains("[security] tls"), "{c}");
}

#[test]
fn tls_refuses_shared_memory_and_ucx_addresses() {
    let ca = Ca::new("cluster").unwrap();
    let t = AnyTransport::new(Some(ctx(&ca, "node-a", Role::Node)));
    for addr in ["/tmp/mojim-none.sock", "ucx:127.0.0.1:1"] {
        let e = t.connect(addr, Duration::from_secs(1)).err().expect("refused").to_string();
        assert!(e.contains("tls = true covers TCP only"), "{e}");
    }
    let _ = TcpTransport;
}

#[test]
fn key_files_must_be_private_and_match_the_certificate() {
    let ca = Ca::new("cluster").unwrap();
    let a = ca.issue("a", Role::Node, Validity::Years(1)).unwrap();
    let b = ca.issue("b", Role::Node, Validity::Years(1)).unwrap();
    let dir = std::env::temp_dir().join(format!("mojim-tls-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    let caf = write("ca.pem", ca.cert_pem(), 0o644);
    let cert = write("a.pem", &a.cert_pem, 0o644);
    let open_key = write("a-open.key", &a.key_pem, 0o644);
    let other_key = write("b.key", &b.key_pem, 0o600);
    let e = TlsContext::load(&caf, &cert, &open_key).unwrap_err().to_string();
    assert!(e.contains("[security] key_file") && e.contains("mode 644") && e.contains("chmod 600"), "{e}");
    let e = TlsContext::load(&caf, &cert, &other_key).unwrap_err().to_string();
    assert!(e.contains("[security] key_file") && e.contains("is not the key of"), "{e}");
    let e = TlsContext::load(&dir.join("missing.pem"), &cert, &other_key).unwrap_err().to_string();
    assert!(e.contains("[security] ca_file") && e.contains("missing.pem"), "{e}");
    let good_key = write("a.key", &a.key_pem, 0o600);
    assert!(TlsContext::load(&caf, &cert, &good_key).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}
