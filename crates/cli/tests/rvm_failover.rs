//! Recoverable memory after the primary's machine is lost: the operator promotes the mirror,
//! and the program, started on the promoted node, finds its memory at the same addresses with
//! the last commit's contents.

mod common;

use common::edit_rvm;
use common::{Cluster, WAIT};
use mojim::PrimaryOptions;
use mojim_rvm::{Backend, Rvm, RvmOptions};
use mojim_tools::child::ChildNode;
use std::time::{Duration, Instant};

#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

/// The values of the list that the root pointer heads.
fn list(rvm: &Rvm) -> Vec<u64> {
    let mut out = Vec::new();
    // SAFETY: the root and every `next` were written by `push` into recoverable memory, which
    // is mapped while `rvm` lives.
    unsafe {
        let mut n = *(rvm.usr_data() as *mut *mut Node);
        while !n.is_null() {
            out.push((*n).value);
            n = (*n).next;
        }
    }
    out
}

fn push(rvm: &Rvm, value: u64) {
    let head = rvm.usr_data() as *mut *mut Node;
    let n = rvm.alloc(std::mem::size_of::<Node>()).expect("alloc") as *mut Node;
    // SAFETY: both are recoverable memory just allocated (or the root, allocated at start).
    unsafe {
        n.write(Node { value, next: *head });
        *head = n;
    }
}

fn node(c: &Cluster, name: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let mut args = vec!["serve", "--config", c.cfg_path.to_str().unwrap(), "--listen", "127.0.0.1:0"];
    args.extend(["--dir", dir.to_str().unwrap()]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(common::exe(), &args).expect("start a node")
}

#[test]
fn the_promoted_mirror_recovers_the_last_commit_at_the_same_addresses() {
    let c = Cluster::new("rvm-promote", 2 << 20, |f| {
        edit_rvm(f, |r| r.base = "0x620000000000".into());
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut opts = RvmOptions::from_config(&c.cfg, false).expect("options");
    let Backend::Mojim(p) = &mut opts.backend else { unreachable!("[rvm] backend = \"mojim\"") };
    p.mirror = mirror.addr().to_string();
    let primary: PrimaryOptions = p.clone();

    let rvm = Rvm::open(&opts).expect("create recoverable memory");
    let root = rvm.alloc(8).expect("alloc the root");
    rvm.set_usr_data(root).unwrap();
    for v in 0..500 {
        push(&rvm, v);
        if v % 50 == 49 {
            rvm.txn_commit().expect("commit");
        }
    }
    let committed = list(&rvm);
    // Not committed: lost with the machine.
    push(&rvm, 9999);

    // The primary's machine is lost; the operator promotes the mirror (its backup drains).
    let out = std::process::Command::new(common::exe())
        .args(["promote", "--config", c.cfg_path.to_str().unwrap(), "--addr", mirror.addr()])
        .args(["--peer", backup.addr()])
        .output()
        .expect("run mojim promote");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // This process plays the lost machine too: its memory goes (the old primary is fenced).
    let _ = rvm.close();

    // The program starts on the promoted node: its region is the mirror's data area, its
    // mirror the backup.
    let mut on_m = opts.clone();
    let Backend::Mojim(p) = &mut on_m.backend else { unreachable!("[rvm] backend = \"mojim\"") };
    *p = PrimaryOptions {
        region_path: c.dir.path().join("m").join("data.mojim"),
        mirror: backup.addr().to_string(),
        ..primary
    };
    let t0 = Instant::now();
    let rvm = loop {
        match Rvm::open(&on_m) {
            Ok(r) => break r,
            Err(e) if t0.elapsed() < WAIT => {
                eprintln!("waiting to open the promoted copy: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("open the promoted copy: {e}"),
        }
    };
    assert_eq!(rvm.usr_data(), root, "the root pointer at the same address");
    assert_eq!(list(&rvm), committed, "the last commit, and nothing after it");
    assert!(rvm.status().recovery.is_some());
    // The new primary goes on committing.
    push(&rvm, 500);
    rvm.txn_commit().expect("commit on the promoted node");
    rvm.close().expect("close");
}
