//! The interposer's hold on a listed file, with C programs run under libmojim_preload.so
//! (built with `cc` from tests/c): its descriptor table against descriptors closed and reused
//! behind its back, fsync of a file written through a mapping, and renaming or removing a
//! listed file.
//!
//! Needs gcc (cc); ./scripts/test installs it.

mod common;

use common::preload::{cc, cluster, mirror_copy, text, under_preload};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

const MIB: u64 = 1 << 20;

/// A listed file's descriptor closed without close() (a raw system call) and its number reused
/// by open() of another file, a pipe, a socket pair, fopen() and dup2(): the new descriptor's
/// calls reach the new file, and the listed file's slot (and its copy on the mirror) keeps its
/// own bytes. A reuse the interposer cannot see either (a raw openat) is caught by the identity
/// check of fstat, ftruncate and fsync. fdopen() of a listed descriptor is refused.
#[test]
fn a_descriptor_closed_behind_the_interposers_back_is_not_taken_for_the_listed_file() {
    if !common::c::have("cc", "gcc") {
        return;
    }
    let (c, db) = cluster("preload-stale-fd", 8 * MIB);
    let prog = cc(c.dir.path(), "preload_descriptors.c");
    let (listed, other, third) = (db.join("data"), db.join("other"), db.join("third"));
    let name = listed.to_str().expect("utf-8");
    let o = under_preload(&prog, &c.cfg_path, name).arg(&listed).arg(&other).arg(&third).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok", "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    for s in [
        "fdopen(fd ",
        &format!(", {name}): stdio streams on a replicated file are not supported (EOPNOTSUPP)"),
        "fstat(fd ",
        &format!("): the descriptor was {name} but now refers to another file"),
    ] {
        assert!(err.contains(s), "the messages should say {s:?}: {}", text(&o));
    }
    assert_eq!(std::fs::read(&other).unwrap(), b"other file+dup2");
    assert_eq!(std::fs::read(&third).unwrap(), b"raw\0\0");
    assert_eq!(std::fs::metadata(&listed).unwrap().len(), 0, "the placeholder stays empty");
    assert_eq!(mirror_copy(&c, name), b"the replicated file's header");
}

/// Bytes stored through a mapping of a listed file, then fsync (or fdatasync) returns and the
/// program is killed with SIGKILL: the mirror has the bytes, as a local file would after
/// fsync. What was stored after the last sync point is not sent.
#[test]
fn fsync_sends_what_was_stored_through_a_mapping() {
    if !common::c::have("cc", "gcc") {
        return;
    }
    let (c, db) = cluster("preload-mapped-fsync", 8 * MIB);
    let prog = cc(c.dir.path(), "preload_mapped_fsync.c");
    let listed = db.join("data");
    let name = listed.to_str().expect("utf-8");
    let mut child = under_preload(&prog, &c.cfg_path, name)
        .arg(&listed)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the program");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read its output");
    child.kill().expect("SIGKILL the program");
    let o = child.wait_with_output().expect("reap the program");
    assert_eq!(line.trim(), "synced", "{}", text(&o));
    assert_eq!(o.status.signal(), Some(9), "killed by SIGKILL: {}", text(&o));

    let copy = mirror_copy(&c, name);
    assert_eq!(copy.len(), 65536);
    assert_eq!(&copy[5000..5018], b"stored, then fsync");
    assert_eq!(&copy[40000..40022], b"stored, then fdatasync");
    assert!(copy[60000..60020].iter().all(|&b| b == 0), "bytes stored after the last sync point were sent");
}

/// Renaming a temporary file onto a listed file (the atomic-replace pattern), renaming it away,
/// renaming its folder and removing it are refused with EBUSY and a message naming the path,
/// and leave it, and its copy on the mirror, as they were. A listed file created anew with
/// O_EXCL (its placeholder removed by another program) is empty.
#[test]
fn renaming_or_removing_a_listed_file_is_refused() {
    if !common::c::have("cc", "gcc") {
        return;
    }
    let (c, db) = cluster("preload-rename", 8 * MIB);
    let prog = cc(c.dir.path(), "preload_rename.c");
    let listed = db.join("data");
    let name = listed.to_str().expect("utf-8");
    let d = db.to_str().expect("utf-8");
    let o = under_preload(&prog, &c.cfg_path, name).arg(&db).output().unwrap();
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "ok", "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let file = format!("{name} is a replicated file, kept in the region");
    for s in [
        format!("rename({d}/data.tmp -> {name}): {file}: renaming it, or another file onto it"),
        format!("renameat2(data.tmp -> data): {file}"),
        format!("rename({name} -> {d}/data.old): {file}"),
        format!("rename({d} -> {d}.moved): the folder holds the replicated file {name}"),
        format!("unlink({name}): {file}: removing it (truncate it to empty it) is not supported (EBUSY)"),
        format!("unlinkat(data): {file}"),
        format!("remove({name}): {file}"),
    ] {
        assert!(err.contains(&s), "the messages should say {s:?}: {}", text(&o));
    }
    assert_eq!(err.matches("(EBUSY)").count(), 9, "{}", text(&o));
    assert!(!db.join("data.tmp").exists() && !db.join("other.tmp").exists());
    assert_eq!(mirror_copy(&c, name), b"fresh");
}
