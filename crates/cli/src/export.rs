//! `mojim export`: a node's data area as a plain file, from one consistent snapshot.
//!
//! The image streams from the node in pieces (one long read, which the node serves from one
//! state of its data area) into a temporary file beside the output, which is synced and then
//! renamed over it: the output is either the whole image or left as it was.

use clap::Args;
use mojim::Error;
use mojim_format::files::{FileEntry, FileTable, FILE_TABLE_PAGE};
use mojim_node::admin_client::AdminClient;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub target: crate::AddrArgs,
    /// File to write (replaced when the export is whole; left alone when it fails).
    #[arg(long)]
    pub out: PathBuf,
    /// Export only this file of the interposer's file table (the path as listed in
    /// MOJIM_FILES), its replicated size's worth of bytes, instead of the whole data area.
    #[arg(long)]
    pub file: Option<String>,
}

pub fn export(a: ExportArgs) -> mojim::Result<()> {
    let mut node = crate::admin(&a.target)?;
    let st = node.status()?;
    if !st.consistent {
        return Err(Error::Io {
            op: format!("export the data area of {}", st.listen),
            source: std::io::Error::other(
                "its data area is inconsistent (a copy into it is under way): wait for the copy to \
                 end (`mojim status --progress`) and export again",
            ),
        });
    }
    let tmp = Temporary::beside(&a.out)?;
    let what = match &a.file {
        None => {
            let len = st.region_size;
            stream(&mut node, 0, len, tmp.file(), None)?;
            format!("{len} bytes of {}'s data area", st.listen)
        }
        Some(name) => {
            let entry = file_entry(&mut node, name)?;
            let len = stream(&mut node, 0, entry.slot_offset + entry.capacity, tmp.file(), Some(name))?;
            format!("{name} ({len} bytes) from {}'s data area", st.listen)
        }
    };
    tmp.finish(&a.out)?;
    eprintln!("exported {what} to {}", a.out.display());
    Ok(())
}

/// The entry of `name` in the file table on page 0 of the node's data area (its slot never
/// moves; its size is read again from the export's own snapshot).
fn file_entry(node: &mut AdminClient, name: &str) -> mojim::Result<FileEntry> {
    let page = node.read(0, FILE_TABLE_PAGE)?;
    let table = table_of(&page)?;
    table.file(name).cloned().ok_or_else(|| {
        Error::Config(format!(
            "--file {name:?} is not in the data area's file table, which lists {:?}; give one of those",
            table.names()
        ))
    })
}

fn table_of(page: &[u8]) -> mojim::Result<FileTable> {
    if FileTable::is_blank(page) {
        return Err(Error::Config(
            "--file: the data area holds no file table (no program has run under the interposer \
             with this region); export the whole data area without --file"
                .into(),
        ));
    }
    FileTable::decode(page).map_err(|e| Error::Io {
        op: "read the data area's file table".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Streams `len` bytes at `offset` of the node's data area into `out`, with a progress bar on
/// a terminal, and returns the bytes written. With `file`, the read starts at 0 and only that
/// file's bytes are written: its slot's first `size` bytes, the size being the one in the file
/// table at the start of this same read.
fn stream(
    node: &mut AdminClient,
    offset: u64,
    len: u64,
    out: &File,
    file: Option<&str>,
) -> mojim::Result<u64> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "export [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        b
    });
    let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
    // The data-area bytes to keep: all of them, or the file's.
    let mut keep = if file.is_some() { None } else { Some((offset, offset + len)) };
    let (mut at, mut written) = (offset, 0u64);
    node.read_with(offset, len, |chunk| {
        if let (None, Some(name)) = (keep, file) {
            // The first piece holds page 0 (a piece is at least a page, the read starts at 0).
            let table = table_of(&chunk[..chunk.len().min(FILE_TABLE_PAGE as usize)])?;
            let e = table.file(name).ok_or_else(|| Error::Io {
                op: "export".into(),
                source: std::io::Error::other(format!("{name:?} left the file table during the export")),
            })?;
            keep = Some((e.slot_offset, e.slot_offset + e.size));
        }
        let (from, to) = keep.expect("set above");
        let lo = from.clamp(at, at + chunk.len() as u64);
        let hi = to.clamp(at, at + chunk.len() as u64);
        w.write_all(&chunk[(lo - at) as usize..(hi - at) as usize]).map_err(Error::io("write the export"))?;
        written += hi - lo;
        at += chunk.len() as u64;
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
        Ok(())
    })?;
    w.flush().map_err(Error::io("write the export"))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(written)
}

/// A file being written beside its final name; removed unless [`Temporary::finish`]ed.
struct Temporary {
    path: PathBuf,
    file: Option<File>,
}

impl Temporary {
    fn beside(out: &Path) -> mojim::Result<Temporary> {
        let name = out.file_name().ok_or_else(|| {
            Error::Config(format!("--out {} names no file: give a file's path", out.display()))
        })?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".export-{}", std::process::id()));
        let path = out.with_file_name(tmp_name);
        let file = File::create(&path).map_err(Error::io(format!("create {}", path.display())))?;
        Ok(Temporary { path, file: Some(file) })
    }

    fn file(&self) -> &File {
        self.file.as_ref().expect("an unfinished temporary file")
    }

    /// Syncs the file, renames it to `out` and syncs the folder.
    fn finish(mut self, out: &Path) -> mojim::Result<()> {
        let f = self.file.take().expect("an unfinished temporary file");
        f.sync_all().map_err(Error::io(format!("sync {}", self.path.display())))?;
        drop(f);
        std::fs::rename(&self.path, out).map_err(Error::io(format!(
            "rename {} to {}",
            self.path.display(),
            out.display()
        )))?;
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io(format!("sync folder {}", dir.display())))?;
        Ok(())
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
