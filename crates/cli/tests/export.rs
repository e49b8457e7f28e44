//! `mojim export`: a node's data area as a plain file, whole or not at all.

mod common;

use common::{wait_applied, Cluster};
use mojim::{Primary, Range};
use std::path::Path;
use std::process::{Command, Output};

const MIB: u64 = 1 << 20;

fn export(c: &Cluster, out: &Path) -> Output {
    Command::new(common::exe())
        .args(["export", "--config", c.cfg_path.to_str().expect("utf-8 path"), "--addr", &c.mirror_addr()])
        .arg("--out")
        .arg(out)
        .output()
        .expect("run mojim export")
}

/// Files in `dir` whose name starts with `prefix` (the export's temporary files are hidden
/// names beside the output).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list the folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".export-"))
        .collect()
}

/// An export longer than one reply frame (16 MiB) is the primary's image byte for byte, and
/// replaces a file that was there.
#[test]
fn an_export_is_the_whole_image_and_replaces_the_output() {
    let size = 40 * MIB;
    let mut c = Cluster::new("export-whole", size, |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let mut rng = common::Rng::new(common::seed("export-whole"));
    let mut ranges = Vec::new();
    for i in 0..40 {
        let off = i * MIB + rng.range(0, MIB - 4096);
        p.write(off, &rng.bytes(4096)).expect("write");
        ranges.push(Range::new(off, 4096));
    }
    for r in ranges.chunks(8) {
        p.gmsync(r).expect("gmsync");
    }
    wait_applied(&mut c.admin());
    let out = c.dir.path().join("image.bin");
    std::fs::write(&out, b"an older file").expect("write the old output");
    let run = export(&c, &out);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains(&format!("exported {size} bytes")), "{err}");
    let mut mine = vec![0u8; size as usize];
    p.read(0, &mut mine).expect("read the primary");
    let got = std::fs::read(&out).expect("read the export");
    common::assert_same_image("export", &mine, &got);
    assert_eq!(leftovers(c.dir.path()), Vec::<String>::new());
}

/// An inconsistent data area (a copy into it unfinished, here marked by `mojim resolve`) is not
/// exported: the error says why and what to do, and the output file is left as it was.
#[test]
fn an_inconsistent_data_area_is_not_exported() {
    let mut c = Cluster::new("export-inconsistent", MIB, |_| {});
    c.start_mirror();
    let cfg = c.cfg_path.to_str().expect("utf-8 path").to_string();
    let run = Command::new(common::exe())
        .args(["resolve", "--config", &cfg, "--discard", &c.mirror_addr()])
        .output()
        .expect("run mojim resolve");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out = c.dir.path().join("image.bin");
    std::fs::write(&out, b"an older file").expect("write the old output");
    let run = export(&c, &out);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "an inconsistent copy was exported: {err}");
    assert!(err.contains("inconsistent") && err.contains("mojim status"), "{err}");
    assert_eq!(std::fs::read(&out).expect("read the output"), b"an older file");
    assert_eq!(leftovers(c.dir.path()), Vec::<String>::new());
}

/// An output in a folder that does not exist: the error names the file, and nothing is made.
#[test]
fn an_output_in_a_missing_folder_is_named() {
    let mut c = Cluster::new("export-missing-folder", MIB, |_| {});
    c.start_mirror();
    let out = c.dir.path().join("no-such-folder").join("image.bin");
    let run = export(&c, &out);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{err}");
    assert!(err.contains("no-such-folder"), "{err}");
    assert!(!c.dir.path().join("no-such-folder").exists());
}

fn export_file(c: &Cluster, out: &Path, name: &str) -> Output {
    Command::new(common::exe())
        .args(["export", "--config", c.cfg_path.to_str().expect("utf-8 path"), "--addr", &c.mirror_addr()])
        .arg("--out")
        .arg(out)
        .args(["--file", name])
        .output()
        .expect("run mojim export --file")
}

/// `--file` cuts one file of the interposer's file table out of the data area: its slot's
/// first `size` bytes, as the table in the same snapshot says. A name not in the table, or a
/// data area without a table, is an error that says what is there.
#[test]
fn export_file_is_one_file_of_the_file_table() {
    use mojim_format::files::FileTable;
    let size = 24 * MIB;
    let mut c = Cluster::new("export-file", size, |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let out = c.dir.path().join("data.mdb");

    let run = export_file(&c, &out, "/db/b.mdb");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && err.contains("no file table"), "{err}");

    let mut table = FileTable::layout(&["/db/a.mdb", "/db/b.mdb"], size).expect("a layout");
    let b = table.entries[1].clone();
    let mut rng = common::Rng::new(common::seed("export-file"));
    let contents = rng.bytes(3 * MIB as usize + 123);
    table.entries[1].size = contents.len() as u64;
    p.write(b.slot_offset, &contents).expect("write the file's bytes");
    // Bytes past the file's size in its slot, and the other file's slot, stay out.
    p.write(b.slot_offset + contents.len() as u64, &[0xEE; 4096]).expect("write past the size");
    p.write(table.entries[0].slot_offset, &[0xAA; 4096]).expect("write the other file");
    let t = table.encode();
    p.write(0, &t).expect("write the table");
    let ranges = [
        Range::new(0, t.len() as u64),
        Range::new(table.entries[0].slot_offset, 4096),
        Range::new(b.slot_offset, contents.len() as u64 + 4096),
    ];
    p.gmsync(&ranges).expect("gmsync");
    wait_applied(&mut c.admin());

    let run = export_file(&c, &out, "/db/b.mdb");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains(&format!("/db/b.mdb ({} bytes)", contents.len())), "{err}");
    common::assert_same_image("export --file", &contents, &std::fs::read(&out).expect("read the export"));

    let run = export_file(&c, &out, "/db/c.mdb");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{err}");
    assert!(err.contains("\"/db/c.mdb\" is not in") && err.contains("/db/a.mdb"), "{err}");
    assert_eq!(leftovers(c.dir.path()), Vec::<String>::new());
}
