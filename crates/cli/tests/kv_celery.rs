//! A real job queue on `mojim kv`: Celery (Debian python3-celery, its Redis broker through
//! kombu) enqueues tasks and its worker runs them, while `mojim kv` is killed with SIGKILL
//! mid-run and its mirror promoted; `mojim kv` then serves the promoted copy at the same
//! address (as a virtual address moves to the new primary), and the producer and the worker
//! reconnect to it by themselves.
//!
//! Celery acknowledges a task when its worker takes it (the default, early acknowledgement):
//! it promises that a task runs at most once. Checked: every task whose enqueue returned runs,
//! and runs once; the one enqueue cut by the kill (its outcome unknown) runs at most once; no
//! task runs twice.
//!
//! The kill comes while the worker runs a slow task, so that no pop of the worker is on the
//! wire: a pop answered by a server that dies before the reply leaves loses its task with any
//! Redis server (the pop is durable, the worker never hears of it), which is kombu's window,
//! not the server's.

mod common;

use common::kv::{node, promote, python_with_redis, start_kv_on_promoted, wait_for};
use common::{exe, Cluster};
use mojim_tools::child::ChildNode;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Tasks enqueued in all.
const TASKS: u64 = 400;
/// The slow task: the server is killed while the worker runs it.
const SLOW: u64 = 150;

const TASKS_PY: &str = r#"
import os, time
from celery import Celery
app = Celery("tasks", broker=os.environ["BROKER"])
app.conf.update(
    # An enqueue that fails is not sent again behind the producer's back: its outcome is the
    # producer's to report (sent again, it could run twice).
    task_publish_retry=False,
    broker_connection_retry=True,
    broker_connection_max_retries=None,
    worker_prefetch_multiplier=1,
    broker_transport_options={"socket_timeout": 5, "socket_connect_timeout": 2},
)

@app.task(name="record")
def record(i):
    if i == int(os.environ["SLOW"]):
        open(os.environ["RAN"] + ".slow", "w").close()
        time.sleep(3)
    with open(os.environ["RAN"], "a") as f:
        f.write(f"{i}\n")
        f.flush()
        os.fsync(f.fileno())
"#;

/// Enqueues tasks `argv[1] .. argv[2]`, each acknowledged one's number on a line of ACKED; at
/// the first failure it notes that task's number in ACKED.unknown and exits with 3.
const PRODUCER_PY: &str = r#"
import os, sys
from tasks import record
a, b = int(sys.argv[1]), int(sys.argv[2])
with open(os.environ["ACKED"], "a") as out:
    for i in range(a, b):
        try:
            record.apply_async((i,), task_id=f"t{i}")
        except Exception as e:
            print(f"enqueue {i}: {type(e).__name__}: {e}", file=sys.stderr)
            with open(os.environ["ACKED"] + ".unknown", "a") as u:
                u.write(f"{i}\n")
            sys.exit(3)
        out.write(f"{i}\n")
        out.flush()
"#;

fn python() -> Option<Command> {
    let py = python_with_redis()?;
    let program = py.get_program().to_owned();
    let ok = Command::new(&program).args(["-c", "import celery"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        common::skip("no python3 with Celery (Debian python3-celery)");
        return None;
    }
    Some(Command::new(program))
}

/// The numbers, one per line, of a file (none if it is not there).
fn numbers(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| l.trim().parse().expect("a task number")).collect()
}

struct Job {
    dir: std::path::PathBuf,
    broker: String,
}

impl Job {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = python().expect("checked by the caller");
        c.args(args).current_dir(&self.dir);
        c.env("BROKER", &self.broker)
            .env("RAN", self.dir.join("ran"))
            .env("ACKED", self.dir.join("acked"))
            .env("SLOW", SLOW.to_string())
            .env("PYTHONPATH", &self.dir);
        c
    }

    fn producer(&self, from: u64, to: u64) -> Child {
        let log = std::fs::File::create(self.dir.join(format!("producer-{from}.log"))).expect("log");
        self.command(&["producer.py", &from.to_string(), &to.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the producer")
    }

    fn worker(&self) -> Child {
        let log = std::fs::File::create(self.dir.join("worker.log")).expect("log");
        let args = [
            "-m",
            "celery",
            "-A",
            "tasks",
            "worker",
            "--pool=solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=WARNING",
        ];
        self.command(&args).stdout(Stdio::null()).stderr(log).spawn().expect("start the worker")
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

#[test]
fn celery_loses_no_acknowledged_task_and_runs_none_twice_through_a_kill_and_a_promotion() {
    if python().is_none() {
        return;
    }
    let c = Cluster::new("kv-celery", 64 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let args = ["kv", "--config", cfg, "--listen", &listen, "--mirror", mirror.addr()];
    let mut kv = wait_for("mojim kv to start", || ChildNode::spawn(exe(), &args).ok());

    let dir = c.dir.path().join("celery");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("tasks.py"), TASKS_PY).expect("write tasks.py");
    std::fs::write(dir.join("producer.py"), PRODUCER_PY).expect("write producer.py");
    let job = Job { dir: dir.clone(), broker: format!("redis://{listen}/0") };

    let mut worker = job.worker();
    let mut producer = job.producer(0, TASKS);
    // The worker runs the slow task: no pop of its is in flight. The server dies.
    wait_for("the worker to start the slow task", || dir.join("ran.slow").exists().then_some(()));
    kv.kill();
    let status = producer.wait().expect("the producer ends");
    let acked_before = numbers(&dir.join("acked"));
    assert!(
        status.code() == Some(3) || acked_before.len() as u64 == TASKS,
        "the producer ended with {status} after {} tasks: {}",
        acked_before.len(),
        job.log("producer-0.log")
    );

    // The operator promotes the mirror and starts mojim kv on it, at the same address.
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &listen]);
    assert_eq!(promoted.addr(), listen);

    // The rest of the tasks; the worker, reconnected by itself, runs them all.
    let next = acked_before.last().map_or(0, |&i| i + 1) + numbers(&dir.join("acked.unknown")).len() as u64;
    if next < TASKS {
        let mut rest = job.producer(next, TASKS);
        let status = rest.wait().expect("the producer ends");
        assert!(status.success(), "the second producer failed: {}", job.log(&format!("producer-{next}.log")));
    }
    let acked = numbers(&dir.join("acked"));
    let unknown = numbers(&dir.join("acked.unknown"));
    wait_for("the worker to run every acknowledged task", || {
        let ran = numbers(&dir.join("ran"));
        acked.iter().all(|i| ran.contains(i)).then_some(())
    });
    // A moment for a task run twice to show, then the worker is stopped.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = worker.kill();
    let _ = worker.wait();

    let mut runs: BTreeMap<u64, usize> = BTreeMap::new();
    for i in numbers(&dir.join("ran")) {
        *runs.entry(i).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "tasks run more than once: {twice:?}\n{}", job.log("worker.log"));
    for i in &acked {
        assert_eq!(runs.get(i), Some(&1), "acknowledged task {i} did not run once");
    }
    let strays: Vec<_> = runs.keys().filter(|i| !acked.contains(i) && !unknown.contains(i)).collect();
    assert!(strays.is_empty(), "tasks run that were never enqueued: {strays:?}");
    println!(
        "{} tasks acknowledged ({} before the kill), {} cut by it ({} of them ran); every acknowledged task ran once",
        acked.len(),
        acked_before.len(),
        unknown.len(),
        unknown.iter().filter(|i| runs.contains_key(i)).count()
    );
    drop(mirror);
}
