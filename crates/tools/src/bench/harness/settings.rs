//! The shared options of `mojim bench`, read and checked: the executable, lanes, transports, and
//! the on/off settings `--tls` and `--metrics`.

use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use std::path::PathBuf;

pub(crate) fn exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(Error::io("find the mojim executable"))
}

pub(crate) fn lanes(a: &BenchArgs) -> u16 {
    a.lanes.unwrap_or(a.threads.min(64) as u16).max(1)
}

/// `--tls`, checked: each of off, on and encrypt at most once; none is off.
pub(crate) fn tls_settings(a: &BenchArgs) -> Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for t in &a.tls {
        let t = match t.trim() {
            "off" => "off",
            "on" => "on",
            "encrypt" => "encrypt",
            other => {
                return Err(Error::Config(format!(
                    "--tls {other}: choose off, on or encrypt, or several comma-separated (off,on,encrypt)"
                )))
            }
        };
        if out.contains(&t) {
            return Err(Error::Config(format!("--tls names {t} twice")));
        }
        out.push(t);
    }
    if out.is_empty() {
        out.push("off");
    }
    Ok(out)
}

/// A flag of on and off (`--metrics`), checked: each at most once; none is off.
pub(crate) fn on_off_settings(flag: &str, given: &[String]) -> Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for t in given {
        let t = match t.trim() {
            "on" => "on",
            "off" => "off",
            other => return Err(Error::Config(format!("{flag} {other}: choose on, off, or on,off"))),
        };
        if out.contains(&t) {
            return Err(Error::Config(format!("{flag} names {t} twice")));
        }
        out.push(t);
    }
    if out.is_empty() {
        out.push("off");
    }
    Ok(out)
}

/// Whether this run's primaries serve their metrics (the first of `--metrics`).
pub(crate) fn metrics_on(a: &BenchArgs) -> Result<bool> {
    Ok(on_off_settings("--metrics", &a.metrics)?[0] == "on")
}

/// Whether this run's links use TLS (the first of `--tls`: on, or encrypt).
pub(crate) fn tls_on(a: &BenchArgs) -> Result<bool> {
    Ok(tls_settings(a)?[0] != "off")
}

/// `--transport`, checked: tcp, shm, shm-rings, ucx and ucx-rings.
pub fn transports(a: &BenchArgs) -> Result<Vec<&'static str>> {
    a.transport
        .iter()
        .map(|t| match t.trim() {
            "tcp" => Ok("tcp"),
            "shm" => Ok("shm"),
            "shm-rings" => Ok("shm-rings"),
            "ucx" => Ok("ucx"),
            "ucx-rings" => Ok("ucx-rings"),
            other => Err(Error::Config(format!(
                "--transport {other}: choose tcp, shm, shm-rings, ucx or ucx-rings (comma-separated)"
            ))),
        })
        .collect()
}

/// The benchmark's transport as `--transport` names it (the first): tcp, shm, shm-rings, ucx or
/// ucx-rings.
pub(crate) fn transport_name(a: &BenchArgs) -> &'static str {
    match a.transport.first().map(|t| t.trim()) {
        Some("shm") => "shm",
        Some("shm-rings") => "shm-rings",
        Some("ucx") => "ucx",
        Some("ucx-rings") => "ucx-rings",
        _ => "tcp",
    }
}

/// How the benchmark's replicas are reached: tcp, shm or ucx.
pub(crate) fn transport(a: &BenchArgs) -> &'static str {
    match transport_name(a) {
        "shm-rings" => "shm",
        "ucx-rings" => "ucx",
        t => t,
    }
}
