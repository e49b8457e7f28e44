//! `mojim bench --metrics on`: a thread that scrapes a primary's `/metrics` once a second, as
//! a Prometheus server would, while the benchmark runs; stopped and joined when dropped.

use mojim::error::{Error, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Between scrapes.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// Scrapes `/metrics` until dropped.
pub struct Scraper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Result<u64>>>,
}

impl Scraper {
    /// Starts scraping the listener at `addr`: at once, then every [`SCRAPE_INTERVAL`].
    pub fn start(addr: SocketAddr) -> Result<Scraper> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-scrape".into())
            .spawn(move || {
                let mut scrapes = 0u64;
                loop {
                    scrape(addr)?;
                    scrapes += 1;
                    match stopped.recv_timeout(SCRAPE_INTERVAL) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return Ok(scrapes),
                    }
                }
            })
            .map_err(Error::io("start the metrics scraper"))?;
        Ok(Scraper { stop: Some(stop), thread: Some(thread) })
    }

    /// Stops scraping and returns how many scrapes were made.
    pub fn finish(mut self) -> Result<u64> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<u64> {
        drop(self.stop.take());
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Config("the metrics scraper panicked".into())),
            None => Ok(0),
        }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// One `GET /metrics`, read whole; an answer other than 200 is an error.
fn scrape(addr: SocketAddr) -> Result<usize> {
    let fail = |e: std::io::Error| Error::io(format!("scrape the primary's metrics at {addr}"))(e);
    let mut s = TcpStream::connect(addr).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(fail)?;
    s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(fail)?;
    let mut page = Vec::new();
    s.read_to_end(&mut page).map_err(fail)?;
    if !page.starts_with(b"HTTP/1.1 200 ") {
        let head = String::from_utf8_lossy(&page[..page.len().min(200)]).into_owned();
        return Err(Error::Config(format!("the primary's metrics listener at {addr} answered {head:?}")));
    }
    Ok(page.len())
}
