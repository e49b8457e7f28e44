//! TLS links over loopback: data both ways through two handles, and each refusal with its
//! message on both sides.

use super::pki::{Ca, Issued, Validity};
use super::{Role, TlsContext, TlsFiles, TlsPaths};
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
        crl: None,
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
        crl: None,
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

/// A node listening on `addr` over TLS and an application connected to it: (application's
/// connection, node's, listener).
fn tls_pair(ca: &Ca, addr: &str) -> (crate::AnyConn, crate::AnyConn, crate::AnyListener) {
    let server = AnyTransport::new(Some(ctx(ca, "node-a", Role::Node)));
    let client = AnyTransport::new(Some(ctx(ca, "app-1", Role::Application)));
    let l = server.listen(addr).unwrap();
    let addr = server.local_addr(&l).unwrap();
    let c = std::thread::spawn(move || {
        let mut c = client.connect(&addr, Duration::from_secs(10)).unwrap();
        c.write_all(b"!").unwrap();
        c
    });
    // The node's side of the handshake runs with its first read.
    let mut a = server.accept(&l).unwrap();
    let mut first = [0u8; 1];
    a.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"!");
    (c.join().unwrap(), a, l)
}

/// Over a shared-memory or UCX stream TLS runs as over TCP: the bytes arrive in order across
/// many laps of the rings, and the peer is known by its certificate. Both ends derive the same
/// key for a lane's placed records from the session, and another for another lane.
fn tls_runs_over(addr: &str) {
    let ca = Ca::new("cluster").unwrap();
    let (c, a, l) = tls_pair(&ca, addr);
    assert!(matches!(
        (&c, &a),
        (crate::AnyConn::TlsShm(_), crate::AnyConn::TlsShm(_))
            | (crate::AnyConn::TlsUcx(_), crate::AnyConn::TlsUcx(_))
    ));
    let (primary, mirror) = (c.record_mac(7, 1).unwrap().unwrap(), a.record_mac(7, 1).unwrap().unwrap());
    let tag = primary.tag(3, 0, b"body");
    assert!(mirror.verify(3, 0, b"body", &tag), "both ends derive one key");
    assert!(!a.record_mac(7, 2).unwrap().unwrap().verify(3, 0, b"body", &tag), "a key per lane");
    assert!(!a.record_mac(8, 1).unwrap().unwrap().verify(3, 0, b"body", &tag), "a key per session");
    crate::stream_tests::bytes_arrive_in_order(c, a, 3 * crate::shm::RING_BYTES as u64 + 12_345);
    drop(l);
    let (mut c, mut a, _l) = tls_pair(&ca, addr);
    c.write_all(b"12345678").unwrap();
    let mut b = [0u8; 8];
    a.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"12345678");
    assert!(a.peer_identity().unwrap().to_string().contains("app-1"));
    assert!(c.peer_identity().unwrap().to_string().contains("node-a"));
}

#[test]
fn tls_runs_over_shared_memory() {
    let path = format!("/dev/shm/mojim-tls-shm-{}.sock", std::process::id());
    tls_runs_over(&path);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tls_runs_over_ucx() {
    if let Err(e) = mojim_ucx::version() {
        assert!(std::env::var_os("MOJIM_TEST_STRICT").is_none(), "{e}");
        eprintln!("skipped: {e}");
        return;
    }
    tls_runs_over("ucx:127.0.0.1:0");
}

#[test]
fn a_plaintext_peer_over_shared_memory_is_refused_naming_the_setting() {
    let ca = Ca::new("cluster").unwrap();
    let path = format!("/dev/shm/mojim-tls-shm-plain-{}.sock", std::process::id());
    let server = AnyTransport::new(Some(ctx(&ca, "node-a", Role::Node)));
    let l = server.listen(&path).unwrap();
    let p = path.clone();
    let h = std::thread::spawn(move || {
        let mut c = AnyTransport::plain().connect(&p, Duration::from_secs(5)).unwrap();
        c.write_all(&[0u8; 64]).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        got
    });
    let mut a = server.accept(&l).unwrap();
    let e = a.read(&mut [0u8; 8]).unwrap_err().to_string();
    a.shutdown();
    let got = h.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(e.contains("[security] tls = true"), "{e}");
    assert!(String::from_utf8_lossy(&got).contains("[security] tls = true"), "the peer reads why");
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
    let paths =
        |ca: &Path, key: &Path| TlsPaths { ca: ca.into(), cert: cert.clone(), key: key.into(), crl: None };
    let e = TlsContext::load(&paths(&caf, &open_key)).unwrap_err().to_string();
    assert!(e.contains("[security] key_file") && e.contains("mode 644") && e.contains("chmod 600"), "{e}");
    let e = TlsContext::load(&paths(&caf, &other_key)).unwrap_err().to_string();
    assert!(e.contains("[security] key_file") && e.contains("is not the key of"), "{e}");
    let e = TlsContext::load(&paths(&dir.join("missing.pem"), &other_key)).unwrap_err().to_string();
    assert!(e.contains("[security] ca_file") && e.contains("missing.pem"), "{e}");
    let good_key = write("a.key", &a.key_pem, 0o600);
    assert!(TlsContext::load(&paths(&caf, &good_key)).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `issued`'s context trusting `ca`, with the revocation lists `crl` (PEM).
fn context_with_crl(ca: &Ca, issued: &Issued, crl: &str) -> Result<Arc<TlsContext>, String> {
    let p = Path::new("x.pem");
    let files = TlsFiles {
        ca: (p, ca.cert_pem().as_bytes()),
        cert: (p, issued.cert_pem.as_bytes()),
        key: (p, issued.key_pem.as_bytes()),
        crl: Some((Path::new("crl.pem"), crl.as_bytes())),
    };
    TlsContext::from_pem(&files).map(Arc::new).map_err(|e| e.to_string())
}

#[test]
fn a_node_refuses_a_revoked_peer_naming_it_and_takes_the_others() {
    let ca = Ca::new("cluster").unwrap();
    let node = ca.issue("node-a", Role::Node, Validity::Years(1)).unwrap();
    let revoked = ca.issue("op-revoked", Role::Operator, Validity::Years(1)).unwrap();
    let crl = ca.revocation_list(1, &[&revoked]).unwrap();
    let server = || AnyTransport::new(Some(context_with_crl(&ca, &node, &crl).unwrap()));
    let (s, c) = exchange(server(), AnyTransport::new(Some(context(&ca, &revoked))));
    let s = s.unwrap_err();
    assert!(s.contains("\"op-revoked\"") && s.contains("revoked"), "{s}");
    let c = c.unwrap_err();
    assert!(c.contains("refused this side's certificate") && c.contains("revoked"), "{c}");
    // Another operator of the same CA is let in.
    let (s, c) = exchange(server(), AnyTransport::new(Some(ctx(&ca, "op-good", Role::Operator))));
    assert_eq!(s.unwrap(), "\"op-good\" (role operator)");
    assert_eq!(c.unwrap(), b"12345678");
}

#[test]
fn a_connecting_side_refuses_a_revoked_node_naming_it() {
    let ca = Ca::new("cluster").unwrap();
    let app = ca.issue("app-1", Role::Application, Validity::Years(1)).unwrap();
    let revoked = ca.issue("node-revoked", Role::Node, Validity::Years(1)).unwrap();
    let crl = ca.revocation_list(1, &[&revoked]).unwrap();
    let client = || AnyTransport::new(Some(context_with_crl(&ca, &app, &crl).unwrap()));
    let (s, c) = exchange(AnyTransport::new(Some(context(&ca, &revoked))), client());
    let c = c.unwrap_err();
    assert!(c.contains("subject \"node-revoked\"") && c.contains("it has been revoked"), "{c}");
    let s = s.unwrap_err();
    assert!(s.contains("refused this side's certificate"), "{s}");
    let (s, c) = exchange(AnyTransport::new(Some(ctx(&ca, "node-b", Role::Node))), client());
    assert_eq!(s.unwrap(), "\"app-1\" (role application)");
    assert_eq!(c.unwrap(), b"12345678");
}

#[test]
fn the_verifiers_refuse_an_expired_certificate_naming_it() {
    use super::verify::{NodeVerifier, PeerVerifier, Trust};
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::server::danger::ClientCertVerifier;
    let ca = Ca::new("cluster").unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap()).unwrap();
    let algs = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let trust = Arc::new(Trust { roots: Arc::new(roots), crls: Vec::new(), algs });
    let node_verifier = NodeVerifier { trust: trust.clone() };
    let peer_verifier = PeerVerifier { trust, hints: Vec::new() };
    for (subject, role) in [("old-node", Role::Node), ("old-app", Role::Application)] {
        let old = ca.issue(subject, role, Validity::Expired).unwrap();
        let der = CertificateDer::from(old.cert_der.clone());
        let name = ServerName::try_from("node").unwrap();
        let e = node_verifier.verify_server_cert(&der, &[], &name, &[], UnixTime::now()).unwrap_err();
        let e = super::conn::describe(&e, false);
        assert!(e.contains(&format!("subject {subject:?}")) && e.contains("it has expired"), "{e}");
        let e = peer_verifier.verify_client_cert(&der, &[], UnixTime::now()).unwrap_err();
        let e = super::conn::describe(&e, true);
        assert!(e.contains(&format!("subject {subject:?}")) && e.contains("it has expired"), "{e}");
    }
}

#[test]
fn a_revoked_own_certificate_and_unusable_lists_are_refused_at_load() {
    let ca = Ca::new("cluster").unwrap();
    let other = Ca::new("elsewhere").unwrap();
    let me = ca.issue("node-a", Role::Node, Validity::Years(1)).unwrap();
    let e = context_with_crl(&ca, &me, &ca.revocation_list(1, &[&me]).unwrap()).unwrap_err();
    assert!(e.contains("[security] cert_file") && e.contains("\"node-a\"") && e.contains("revoked"), "{e}");
    let e = context_with_crl(&ca, &me, &other.revocation_list(1, &[]).unwrap()).unwrap_err();
    assert!(e.contains("[security] crl_file crl.pem") && e.contains("not issued by a CA"), "{e}");
    let e = context_with_crl(&ca, &me, "-----BEGIN X509 CRL-----\nMAMCAQA=\n-----END X509 CRL-----\n")
        .unwrap_err();
    assert!(
        e.contains("[security] crl_file crl.pem") && e.contains("is not a certificate revocation"),
        "{e}"
    );
    let e = context_with_crl(&ca, &me, "").unwrap_err();
    assert!(e.contains("[security] crl_file crl.pem") && e.contains("holds no revocation list"), "{e}");
    // A list from the CA that revokes someone else loads.
    let gone = ca.issue("gone", Role::Operator, Validity::Years(1)).unwrap();
    let ctx = context_with_crl(&ca, &me, &ca.revocation_list(2, &[&gone]).unwrap()).unwrap();
    assert_eq!(ctx.loaded().revocation_lists, 1);
}

/// A folder for one test's files, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("mojim-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// Writes `text` to `name` with mode 0600 (replacing it whole, as a deployment would).
    fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.0.join(name);
        let tmp = self.0.join(format!("{name}.new"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_reload_changes_what_new_handshakes_present_and_keeps_established_sessions() {
    let ca = Ca::new("cluster").unwrap();
    let dir = TempDir::new("reload");
    let first = ca.issue("node-first", Role::Node, Validity::Years(1)).unwrap();
    let paths = TlsPaths {
        ca: dir.write("ca.pem", ca.cert_pem()),
        cert: dir.write("node.pem", &first.cert_pem),
        key: dir.write("node.key", &first.key_pem),
        crl: None,
    };
    let node = Arc::new(TlsContext::load(&paths).unwrap());
    assert_eq!(node.identity().subject, "node-first");
    let server = AnyTransport::new(Some(node.clone()));
    let client = AnyTransport::new(Some(ctx(&ca, "app-1", Role::Application)));
    let l = server.listen("127.0.0.1:0").unwrap();
    let addr = server.local_addr(&l).unwrap();
    // The node echoes each byte on every connection it accepts.
    std::thread::spawn(move || {
        while let Ok(mut c) = server.accept(&l) {
            std::thread::spawn(move || {
                let mut b = [0u8; 1];
                while c.read_exact(&mut b).is_ok() && c.write_all(&b).is_ok() {}
            });
        }
    });
    let echo = |c: &mut crate::AnyConn, byte: u8| {
        c.write_all(&[byte]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b, [byte]);
    };
    let mut old = client.connect(&addr, Duration::from_secs(5)).unwrap();
    echo(&mut old, 1);
    assert_eq!(old.peer_identity().unwrap().subject, "node-first");

    let second = ca.issue("node-second", Role::Node, Validity::Years(1)).unwrap();
    dir.write("node.pem", &second.cert_pem);
    dir.write("node.key", &second.key_pem);
    let loaded = node.reload().unwrap();
    assert_eq!(loaded.identity.subject, "node-second");
    assert!(loaded.to_string().contains("\"node-second\" (role node), valid until 20"), "{loaded}");
    let mut new = client.connect(&addr, Duration::from_secs(5)).unwrap();
    echo(&mut new, 2);
    assert_eq!(new.peer_identity().unwrap().subject, "node-second");
    echo(&mut old, 3);

    // A broken key, and a certificate of another role: refused, naming the file; the last
    // good files stay in use.
    let broken = dir.write("node.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
    let e = node.reload().unwrap_err().to_string();
    assert!(e.contains("[security] key_file") && e.contains(&broken.display().to_string()), "{e}");
    let op = ca.issue("op-1", Role::Operator, Validity::Years(1)).unwrap();
    dir.write("node.pem", &op.cert_pem);
    dir.write("node.key", &op.key_pem);
    let e = node.reload().unwrap_err().to_string();
    assert!(e.contains("[security] cert_file") && e.contains("a change of role needs a restart"), "{e}");
    let mut after = client.connect(&addr, Duration::from_secs(5)).unwrap();
    echo(&mut after, 4);
    assert_eq!(after.peer_identity().unwrap().subject, "node-second");
    assert_eq!(node.identity().subject, "node-second");
    echo(&mut old, 5);
}

#[test]
fn a_reload_reads_the_revocation_list_again() {
    let ca = Ca::new("cluster").unwrap();
    let dir = TempDir::new("reload-crl");
    let node = ca.issue("node-a", Role::Node, Validity::Years(1)).unwrap();
    let app = ca.issue("app-late", Role::Application, Validity::Years(1)).unwrap();
    let paths = TlsPaths {
        ca: dir.write("ca.pem", ca.cert_pem()),
        cert: dir.write("node.pem", &node.cert_pem),
        key: dir.write("node.key", &node.key_pem),
        crl: Some(dir.write("crl.pem", &ca.revocation_list(1, &[]).unwrap())),
    };
    let node = Arc::new(TlsContext::load(&paths).unwrap());
    let (s, _) = exchange(AnyTransport::new(Some(node.clone())), AnyTransport::new(Some(context(&ca, &app))));
    assert_eq!(s.unwrap(), "\"app-late\" (role application)");
    dir.write("crl.pem", &ca.revocation_list(2, &[&app]).unwrap());
    node.reload().unwrap();
    let (s, _) = exchange(AnyTransport::new(Some(node)), AnyTransport::new(Some(context(&ca, &app))));
    let s = s.unwrap_err();
    assert!(s.contains("\"app-late\"") && s.contains("revoked"), "{s}");
}
