//! The raw baselines `tcp`, `tcp-region` and `tcp-checked`: a region's bytes over loopback TCP
//! with no protocol, or with the per-byte work of a copy and none of its protocol.

use super::cpu::CpuSpent;
use super::result::ResyncResult;
use super::round::{fill, Round};
use super::{failed, STREAM_PIECE};
use crate::bench::harness::Scratch;
use mojim::error::{Error, Result};
use mojim::primary::{COPY_FRAME, COPY_GROUP_BYTES};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::MappedFile;
use mojim_transport::{Conn, TcpTransport, Transport};
use std::io::{IoSlice, Read, Write};
use std::time::{Duration, Instant};

/// Where a raw TCP stream's bytes come from and go.
#[derive(Clone, Copy)]
pub(super) enum Ends<'b> {
    /// One cache-resident buffer sent again and again, into a buffer that is read into again and
    /// again: the stream touches no memory beyond the caches.
    Buffer(&'b [u8]),
    /// A region-sized mapping into another; `checked`: as Copy frames, checked before they land.
    Region { from: &'b MappedFile, into: &'b MappedFile, checked: bool },
}

/// The header of `tcp-checked`'s Copy frame of `body` for region offset `at`.
pub(super) fn checked_header(at: u64, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(FrameKind::Copy);
    h.offset = at;
    h.body_len = body.len() as u32;
    h.body_checksum = mojim_format::checksum::crc32c(body);
    h.to_bytes()
}

/// Receives one Copy frame of `tcp-checked` for `at` into `buf` and checks it, as a mirror does.
pub(super) fn receive_checked(c: &mut impl Read, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    c.read_exact(&mut hb)?;
    let h = FrameHeader::decode(&hb).map_err(|e| std::io::Error::other(format!("frame for {at}: {e}")))?;
    if h.kind != FrameKind::Copy || h.offset != at || h.body_len as usize != buf.len() {
        return Err(std::io::Error::other(format!(
            "expected a Copy frame of {} bytes for {at}, got {:?} of {} for {}",
            buf.len(),
            h.kind,
            h.body_len,
            h.offset
        )));
    }
    c.read_exact(buf)?;
    h.check_body(buf).map_err(|e| std::io::Error::other(format!("frame for {at}: {e}")))
}

impl<'a> Round<'a> {
    /// `tcp`: the region's size over one loopback connection per lane into a reading sink.
    pub(super) fn tcp(&mut self) -> Result<ResyncResult> {
        self.say("tcp: streaming the region's size over loopback TCP");
        let mut buf = vec![0u8; STREAM_PIECE as usize];
        fill(&mut buf, &mut self.rng);
        self.stream("tcp", Ends::Buffer(&buf))
    }

    /// `tcp-region` (and with `checked`, `tcp-checked`): the region's bytes over the same
    /// connections, from a mapping of a file like the primary's region into a mapping of a file
    /// like the mirror's data area (both in `--dir`, allocated and mapped before the clock
    /// starts), so the bytes cross memory as a copy's do.
    pub(super) fn tcp_region(&mut self, checked: bool) -> Result<ResyncResult> {
        let kind = if checked { "tcp-checked" } else { "tcp-region" };
        self.say(&format!(
            "{kind}: streaming a region's bytes from memory into memory over loopback TCP{}",
            if checked { ", as checked Copy frames" } else { "" }
        ));
        let scratch = Scratch::create(self.dir.0.join(kind))?;
        let open = |name: &str| {
            let p = scratch.0.join(name);
            MappedFile::create(&p, self.id.size).map_err(|e| failed(kind, format!("{}: {e}", p.display())))
        };
        let (from, into) = (open("from")?, open("into")?);
        self.fill_region(|off, bytes| {
            from.write(off as usize, bytes);
            Ok(())
        })?;
        // Mapped anew and timed, as a primary opens its region before a copy.
        drop(from);
        let from_path = scratch.0.join("from");
        let mapping = Instant::now();
        let from = MappedFile::open(&from_path)
            .map_err(|e| failed(kind, format!("{}: {e}", from_path.display())))?;
        let map_s = mapping.elapsed().as_secs_f64();
        let mut r = self.stream(kind, Ends::Region { from: &from, into: &into, checked })?;
        r.map_s = Some(map_s);
        if from.view(0, from.len()).to_vec() != into.view(0, into.len()).to_vec() {
            return Err(failed(kind, "the bytes received differ from those sent".into()));
        }
        Ok(r)
    }

    /// Streams the region's size over one loopback connection per lane, each lane its own share.
    pub(super) fn stream(&self, kind: &str, ends: Ends<'_>) -> Result<ResyncResult> {
        let total = self.id.size;
        let lanes = self.lanes as u64;
        let share = |i: u64| {
            (i * (total / lanes) + i.min(total % lanes), total / lanes + u64::from(i < total % lanes))
        };
        let listener = TcpTransport.listen("127.0.0.1:0").map_err(Error::io("listen for tcp"))?;
        let addr = TcpTransport.local_addr(&listener).map_err(Error::io("local address"))?;
        let poll = Duration::from_micros(self.a.busy_poll_us);
        let gate = std::sync::Barrier::new(self.lanes as usize + 1);
        let (received, secs, cpu_s) = std::thread::scope(|s| -> Result<(u64, f64, f64)> {
            let sink = s.spawn(|| -> std::io::Result<u64> {
                let mut conns = Vec::new();
                for i in 0..lanes {
                    let mut c = TcpTransport.accept(&listener)?;
                    c.set_busy_poll(poll);
                    // The first 8 bytes name the connection's lane.
                    let mut lane = [0u8; 8];
                    c.read_exact(&mut lane)?;
                    let lane = u64::from_le_bytes(lane);
                    if lane >= lanes {
                        return Err(std::io::Error::other(format!("connection {i} names lane {lane}")));
                    }
                    conns.push((lane, c));
                }
                std::thread::scope(|s2| {
                    let readers: Vec<_> = conns
                        .into_iter()
                        .map(|(lane, mut c)| {
                            s2.spawn(move || -> std::io::Result<u64> {
                                let (mut at, len) = share(lane);
                                let end = at + len;
                                if let Ends::Region { into, checked: true, .. } = ends {
                                    let mut buf = vec![0u8; COPY_FRAME as usize];
                                    while at < end {
                                        let n = (end - at).min(COPY_FRAME as u64) as usize;
                                        receive_checked(&mut c, at, &mut buf[..n])?;
                                        into.write_persistent(at as usize, &buf[..n])?;
                                        at += n as u64;
                                    }
                                    return Ok(len);
                                }
                                if let Ends::Region { into, .. } = ends {
                                    while at < end {
                                        let n = (end - at).min(STREAM_PIECE) as usize;
                                        into.recv_at(at as usize, n, &mut c)?;
                                        at += n as u64;
                                    }
                                    return Ok(len);
                                }
                                let mut b = vec![0u8; STREAM_PIECE as usize];
                                let mut n = 0u64;
                                loop {
                                    match c.read(&mut b)? {
                                        0 => return Ok(n),
                                        k => n += k as u64,
                                    }
                                }
                            })
                        })
                        .collect();
                    readers.into_iter().try_fold(0u64, |sum, r| {
                        Ok(sum + r.join().unwrap_or_else(|_| Err(std::io::Error::other("sink panicked")))?)
                    })
                })
            });
            let senders: Vec<_> = (0..lanes)
                .map(|i| {
                    let (addr, gate, share) = (&addr, &gate, &share);
                    s.spawn(move || -> std::io::Result<()> {
                        let mut c = TcpTransport.connect(addr, Duration::from_secs(5))?;
                        c.write_all(&i.to_le_bytes())?;
                        gate.wait();
                        let (mut at, len) = share(i);
                        let end = at + len;
                        if let Ends::Region { from, checked: true, .. } = ends {
                            // As a copy sends a group: its frames read and checksummed one by
                            // one into a snapshot, then written together.
                            let mut snapshot = vec![0u8; COPY_GROUP_BYTES as usize];
                            let frame = COPY_FRAME as usize;
                            let mut headers = Vec::new();
                            while at < end {
                                let n = (end - at).min(COPY_GROUP_BYTES) as usize;
                                headers.clear();
                                for (k, bytes) in snapshot[..n].chunks_mut(frame).enumerate() {
                                    let off = at + (k * frame) as u64;
                                    from.read(off as usize, bytes);
                                    headers.push(checked_header(off, bytes));
                                }
                                let mut iov: Vec<IoSlice<'_>> = headers
                                    .iter()
                                    .zip(snapshot[..n].chunks(frame))
                                    .flat_map(|(h, b)| [IoSlice::new(h), IoSlice::new(b)])
                                    .collect();
                                c.send_all_vectored(&mut iov)?;
                                at += n as u64;
                            }
                            c.shutdown();
                            return Ok(());
                        }
                        while at < end {
                            let n = (end - at).min(STREAM_PIECE) as usize;
                            match ends {
                                Ends::Buffer(buf) => c.write_all(&buf[..n])?,
                                Ends::Region { from, .. } => {
                                    c.send_all_vectored(&mut [from.view(at as usize, n).io_slice()])?
                                }
                            }
                            at += n as u64;
                        }
                        c.shutdown();
                        Ok(())
                    })
                })
                .collect();
            gate.wait();
            let cpu = CpuSpent::since_now(vec![std::process::id()])?;
            let t0 = Instant::now();
            for h in senders {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("sender panicked")))
                    .map_err(Error::io(format!("send over {kind}")))?;
            }
            let received = sink
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("sink panicked")))
                .map_err(Error::io(format!("receive over {kind}")))?;
            let secs = t0.elapsed().as_secs_f64();
            Ok((received, secs, cpu.seconds()?))
        })?;
        if received != total {
            return Err(failed(kind, format!("the sink received {received} bytes of {total}")));
        }
        let verified = match ends {
            Ends::Buffer(_) => "bytes counted",
            Ends::Region { checked: false, .. } => "whole region",
            Ends::Region { checked: true, .. } => "every frame's CRC32C + whole region",
        };
        let mut r = ResyncResult::new(kind, total, secs, self, verified.into());
        r.cpu_s = Some(cpu_s);
        Ok(r)
    }
}
