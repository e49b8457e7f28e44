//! `mojim export`: a node's data area as a plain file, from one consistent snapshot.
//!
//! The image streams from the node in pieces (one long read, which the node serves from one
//! state of its data area) into a temporary file beside the output, which is synced and then
//! renamed over it: the output is either the whole image or left as it was.

use clap::Args;
use mojim::Error;
use mojim_node::admin::AdminClient;
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
    let len = st.region_size;
    let tmp = Temporary::beside(&a.out)?;
    stream(&mut node, 0, len, tmp.file())?;
    tmp.finish(&a.out)?;
    eprintln!("exported {len} bytes of {}'s data area to {}", st.listen, a.out.display());
    Ok(())
}

/// Streams `len` bytes at `offset` of the node's data area into `out`, with a progress bar on
/// a terminal.
fn stream(node: &mut AdminClient, offset: u64, len: u64, out: &File) -> mojim::Result<()> {
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
    node.read_with(offset, len, |chunk| {
        w.write_all(chunk).map_err(Error::io("write the export"))?;
        if let Some(b) = &bar {
            b.inc(chunk.len() as u64);
        }
        Ok(())
    })?;
    w.flush().map_err(Error::io("write the export"))?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(())
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
