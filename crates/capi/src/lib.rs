//! skeleton
pub use mojim_ffi::*;
