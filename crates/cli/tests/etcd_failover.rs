//! Automatic fail-over with a real etcd: the primary holds a lease and stops acknowledging
//! when it cannot renew it; when its lease expires, the mirror takes over under a new epoch
//! and its backup becomes the mirror of the application restarted on the new primary.

mod common;

use common::{first_difference, mirror_image, wait_applied, Cluster, Rng, WAIT};
use mojim::config::ConfigFile;
use mojim::coord::Coordinator;
use mojim::{Primary, PrimaryOptions};
use mojim_etcd::testing::{EtcdServer, ServerTls};
use mojim_node::admin_client::AdminClient;
use mojim_tools::child::ChildNode;
use mojim_transport::tls::pki::{Ca, Validity};
use mojim_transport::tls::Role;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn scribble(p: &Primary, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        let len = rng.range(1, 5000);
        let off = rng.range(0, p.size() - len);
        p.write(off, &rng.bytes(len as usize)).expect("write");
        p.msync(off, len).expect("msync");
    }
}

fn image_of(p: &Primary) -> Vec<u8> {
    let mut v = vec![0u8; p.size() as usize];
    p.read(0, &mut v).expect("read");
    v
}

fn start_node(c: &Cluster, name: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let mut args = vec!["serve", "--config", c.cfg_path.to_str().unwrap(), "--listen", "127.0.0.1:0"];
    args.extend(["--dir", dir.to_str().unwrap(), "--node", name]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(common::exe(), &args).expect("start a node")
}

#[test]
fn the_mirror_takes_over_when_the_primary_lease_expires() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    fail_over(etcd, "etcd-failover", |_| {});
}

/// The same over TLS: etcd requires client certificates, and every node and the application
/// present one from etcd's CA (`[cluster] etcd_ca_file`, `etcd_cert_file`, `etcd_key_file`).
#[test]
fn the_mirror_takes_over_when_the_primary_lease_expires_with_tls_to_etcd() {
    let ca = Ca::new("etcd CA").expect("CA");
    let server = ca.issue_for_hosts("etcd", &[], &["127.0.0.1"], Validity::Years(1)).expect("certificate");
    let tls = ServerTls { ca_pem: ca.cert_pem(), cert_pem: &server.cert_pem, key_pem: &server.key_pem };
    let Some(etcd) = EtcdServer::start_tls_for_test(&tls) else { return };
    assert!(etcd.endpoint().starts_with("https://"), "{}", etcd.endpoint());
    let pki = common::TempDir::new("etcd-failover-tls-pki");
    let client = ca.issue("mojim", Role::Node, Validity::Years(1)).expect("certificate");
    let write = |name: &str, pem: &str| {
        let path = pki.path().join(name);
        std::fs::write(&path, pem).expect("write a PEM file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path.to_str().expect("utf-8").to_string()
    };
    let (ca_file, cert_file, key_file) = (
        write("ca.pem", ca.cert_pem()),
        write("client.pem", &client.cert_pem),
        write("client.key", &client.key_pem),
    );
    fail_over(etcd, "etcd-failover-tls", |f| {
        f.cluster.etcd_ca_file = ca_file.clone();
        f.cluster.etcd_cert_file = cert_file.clone();
        f.cluster.etcd_key_file = key_file.clone();
    });
}

fn fail_over(etcd: EtcdServer, test: &str, tls: impl Fn(&mut ConfigFile)) {
    let mut rng = Rng::new(common::seed(test));
    let endpoint = etcd.endpoint();
    let c = Cluster::new(test, 2 << 20, |f| {
        tls(f);
        f.primary.lanes = 2;
        common::use_etcd(f, &endpoint);
    });
    let backup = start_node(&c, "b", &[]);
    let mirror = start_node(&c, "m", &[backup.addr()]);
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = mirror.addr().to_string();
    o.node = "a".into();
    let p = Primary::open(&o).expect("the first primary writes the roles and takes the lease");
    let epoch = p.status().epoch;
    scribble(&p, &mut rng, 40);
    let acked = image_of(&p);

    // The primary's application dies: its lease is not revoked, it expires.
    let t0 = Instant::now();
    drop(p);
    let coord = Coordinator::new(&c.cfg.etcd().unwrap().unwrap()).unwrap();
    let roles = loop {
        let (r, _) = coord.roles().expect("roles").expect("roles exist");
        if r.epoch > epoch {
            break r;
        }
        assert!(t0.elapsed() < WAIT, "the mirror never took over");
        std::thread::sleep(Duration::from_millis(20));
    };
    let took_over = t0.elapsed();
    assert_eq!((roles.primary.as_str(), roles.mirror_addr.as_str()), ("m", backup.addr()), "{roles:?}");
    let mut m = AdminClient::connect(mirror.addr(), &c.secret(), Duration::from_secs(5)).unwrap();
    common::wait_status(&mut m, "the mirror to be promoted", |st| st.role == "primary");

    // The old node may not come back as primary.
    let e = Primary::open(&o).err().expect("node a is no longer the primary");
    assert!(e.to_string().contains("not the primary"), "{e}");

    // The application restarts on the promoted node; the backup is its mirror.
    let mut o2 = o.clone();
    o2.node = "m".into();
    o2.region_path = c.dir.path().join("m").join("data.mojim");
    let p2 = Primary::open(&o2).expect("the application on the new primary");
    assert_eq!(first_difference(&acked, &image_of(&p2)), None, "every acknowledged group survived");
    scribble(&p2, &mut rng, 1);
    println!(
        "lease ttl {} ms: mirror took over after {} ms; first acknowledgement after {} ms",
        1500,
        took_over.as_millis(),
        t0.elapsed().as_millis()
    );
    scribble(&p2, &mut rng, 20);
    let mut b = AdminClient::connect(backup.addr(), &c.secret(), Duration::from_secs(5)).unwrap();
    let st = wait_applied(&mut b);
    assert_eq!(st.epoch, roles.epoch);
    assert_eq!(first_difference(&image_of(&p2), &mirror_image(&mut b, p2.size())), None);

    // Without etcd the lease cannot be renewed: the primary stops acknowledging.
    let mut etcd = etcd;
    etcd.kill();
    let t1 = Instant::now();
    loop {
        match p2.msync(0, 8) {
            Err(e) if e.to_string().contains("lease") => break,
            Err(_) => {}
            Ok(()) => {}
        }
        assert!(t1.elapsed() < WAIT, "the primary kept acknowledging without its lease");
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("without etcd the primary stopped acknowledging after {} ms", t1.elapsed().as_millis());
    for _ in 0..5 {
        assert!(p2.msync(0, 8).is_err(), "and it never acknowledges again");
    }
}
