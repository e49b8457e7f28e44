//! libmojim: Mojim's C API as a shared library (`libmojim.so`) and a static one
//! (`libmojim.a`), declared in `include/mojim.h`. The functions are `mojim-ffi`'s, linked in
//! whole; this crate only names the artifacts (`cargo build -p mojim-capi --release`).
//!
//! It is a crate of its own, without an rlib, because its library is named `mojim` like the
//! Rust library's: two `libmojim.rlib` would collide in the target folder.
#![forbid(unsafe_code)]

pub use mojim_ffi::*;
