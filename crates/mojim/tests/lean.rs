//! The library an application links stays lean: its normal dependency tree holds at most
//! `MAX_PACKAGES` distinct packages besides Mojim's own crates (`mojim-*`, which are counted by
//! what they pull in), and none of the tools' (command line, plots, progress
//! bars, histograms, log formatting), which belong to `mojim-tools` and `mojim-cli`. The C
//! library (`mojim-capi` over `mojim-ffi`) adds recoverable memory (`mojim-rvm`) to it, and
//! nothing else.

use std::collections::BTreeSet;
use std::process::Command;

const MAX_PACKAGES: usize = 45;
const TOOL_PACKAGES: &[&str] =
    &["clap", "plotters", "indicatif", "hdrhistogram", "tracing-subscriber", "mojim-tools", "mojim-cli"];

/// The distinct packages (name, version) of the library's normal dependency tree, built with
/// `features` (cargo tree's arguments).
fn packages(features: &[&str]) -> BTreeSet<(String, String)> {
    tree("mojim", features)
}

/// The distinct packages (name, version) of `package`'s normal dependency tree.
fn tree(package: &str, features: &[&str]) -> BTreeSet<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path", manifest, "-p", package, "-e", "normal"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(features)
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    // "name vX.Y.Z (path) (*)": the name and version make a package.
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

#[test]
fn without_its_default_features_the_library_has_no_etcd_client() {
    let packages = packages(&["--no-default-features"]);
    let names: Vec<&str> = packages.iter().map(|p| p.0.as_str()).collect();
    assert!(!names.contains(&"mojim-etcd"), "{names:?}");
    assert!(names.contains(&"mojim-core"), "{names:?}");
}

#[test]
fn the_library_dependency_tree_is_small_and_has_no_tools() {
    let packages = packages(&[]);
    let names: Vec<&str> = packages.iter().map(|p| p.0.as_str()).collect();
    println!("{} packages: {}", packages.len(), names.join(" "));
    for tool in TOOL_PACKAGES {
        assert!(!names.contains(tool), "the library depends on {tool}, a tool's package: {names:?}");
    }
    let others = names.iter().filter(|n| !n.starts_with("mojim")).count();
    assert!(
        others <= MAX_PACKAGES,
        "the library's dependency tree grew to {others} packages besides Mojim's own (at most {MAX_PACKAGES}): \
         {names:?}"
    );
}

/// The packages libmojim links beyond the library's own: recoverable memory (`rvm_*`), whose
/// backends (a Mojim region; Redis over its own std-only client) need nothing more.
const C_LIBRARY_EXTRAS: &[&str] = &["mojim-rvm"];

#[test]
fn the_c_library_links_the_library_and_recoverable_memory_and_nothing_else() {
    let mut c = tree("mojim-capi", &[]);
    let names: Vec<&str> = c.iter().map(|p| p.0.as_str()).collect();
    println!("{} packages: {}", c.len(), names.join(" "));
    for extra in C_LIBRARY_EXTRAS {
        assert!(names.contains(extra), "libmojim no longer links {extra}: take it off C_LIBRARY_EXTRAS");
    }
    c.retain(|p| {
        !["mojim-capi", "mojim-ffi"].contains(&p.0.as_str()) && !C_LIBRARY_EXTRAS.contains(&p.0.as_str())
    });
    assert_eq!(
        c,
        packages(&[]),
        "libmojim (mojim-capi, mojim-ffi, mojim-rvm) depends on more than the library"
    );
}

#[test]
fn recoverable_memory_adds_no_package_to_the_library() {
    // Its Redis backend speaks RESP over std's TcpStream: no Redis client crate.
    let mut rvm = tree("mojim-rvm", &[]);
    rvm.retain(|p| p.0 != "mojim-rvm");
    let library = packages(&[]);
    let extra: Vec<_> = rvm.difference(&library).collect();
    assert!(extra.is_empty(), "mojim-rvm depends on packages the library does not: {extra:?}");
}
