//! `key_slot` against a real `redis-server` in cluster mode: `CLUSTER KEYSLOT` of a few
//! thousand random keys (binary, short, with braces often, so that hash tags of every shape
//! occur) must equal ours. The test needs redis-server (the Debian package redis-server, which
//! ./scripts/test installs) and fails without it.

use mojim_kv::cluster::slot::key_slot;
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server in cluster mode, in a folder of its own; killed and its folder removed when
/// dropped.
struct ClusterRedis {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl ClusterRedis {
    fn start() -> ClusterRedis {
        let dir = std::env::temp_dir().join(format!("mojim-cluster-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("make the server's folder");
        // Cluster mode refuses port 0, and its bus port (port + 10000 by default) must be valid
        // too: both are named.
        let [port, bus] = mojim_transport::ports::free_loopback_ports().expect("free ports");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--cluster-port", &bus.to_string()])
            .args(["--bind", "127.0.0.1", "--cluster-enabled", "yes", "--save", "", "--appendonly", "no"])
            .args(["--cluster-config-file", "nodes.conf"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                panic!(
                    "cannot start redis-server ({e}): this test compares slots with a real one; install the \
                     Debian package redis-server (./scripts/test does)"
                )
            });
        ClusterRedis { child, dir, port }
    }

    fn connect(&mut self) -> TcpStream {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) {
                return s;
            }
            assert!(
                self.child.try_wait().expect("poll redis-server").is_none(),
                "redis-server exited at start"
            );
            assert!(Instant::now() < deadline, "redis-server did not listen on {} within 10 s", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ClusterRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// xorshift64*, seeded: the keys are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn random_key(rng: &mut Rng) -> Vec<u8> {
    let len = (rng.next() % 20) as usize;
    (0..len)
        .map(|_| match rng.next() % 8 {
            0 => b'{',
            1 => b'}',
            2 => (rng.next() % 256) as u8,
            _ => b'a' + (rng.next() % 4) as u8,
        })
        .collect()
}

#[test]
fn key_slot_is_redis_cluster_keyslot() {
    let mut redis = ClusterRedis::start();
    let mut conn = redis.connect();
    conn.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let mut rng = Rng(0x6d6f_6a69_6d00_0035);
    let mut keys: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"foo".to_vec(),
        b"{user1000}.following".to_vec(),
        b"foo{}{bar}".to_vec(),
        b"foo{{bar}}zap".to_vec(),
        b"{}".to_vec(),
        b"}{".to_vec(),
        b"{a}{b}".to_vec(),
    ];
    keys.extend((0..4000).map(|_| random_key(&mut rng)));
    let mut req = Vec::new();
    for k in &keys {
        encode_request(&[b"CLUSTER".as_slice(), b"KEYSLOT", k], &mut req);
    }
    conn.write_all(&req).expect("send the requests");
    let mut buf = Vec::new();
    let mut at = 0;
    let mut chunk = [0u8; 65536];
    for k in &keys {
        let v = loop {
            if let Some((v, n)) = decode(&buf[at..], &Limits::default()).expect("a RESP reply") {
                at += n;
                break v;
            }
            let n = conn.read(&mut chunk).expect("read a reply");
            assert!(n > 0, "redis-server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert_eq!(v, Value::Int(i64::from(key_slot(k))), "the slot of key {k:?}");
    }
}
