//! How to open recoverable memory: from the `[rvm]` section of a configuration file.

use crate::error::{Result, RvmError};
use mojim::{Config, PrimaryOptions};
use mojim_region::WriteTracking;

/// Where recoverable memory's bytes are kept.
#[derive(Clone, Debug)]
pub enum Backend {
    /// A Mojim region, replicated to its mirror (`[rvm] backend = "mojim"`).
    Mojim(PrimaryOptions),
}

/// How to open recoverable memory.
#[derive(Clone, Debug)]
pub struct RvmOptions {
    /// The backend.
    pub backend: Backend,
    /// Where to create the memory if the backend holds none (`[rvm] base`); recovery maps it
    /// where it was created.
    pub base: usize,
    /// How to find written pages: `None` for userfaultfd if the kernel offers it, else page
    /// protection (`[rvm] tracking`).
    pub tracking: Option<WriteTracking>,
}

/// The default `[rvm] base`: far from where Linux puts programs, heaps, libraries and stacks.
pub const DEFAULT_BASE: usize = 0x6000_0000_0000;

impl RvmOptions {
    /// Options from a configuration file's `[rvm]` section (and `[region]`, `[primary]` for
    /// the Mojim backend).
    pub fn from_config(cfg: &Config, insecure: bool) -> Result<RvmOptions> {
        let r = &cfg.file.rvm;
        let backend = match r.backend.as_str() {
            "mojim" => Backend::Mojim(PrimaryOptions::from_config(cfg, insecure)?),
            other => {
                return Err(RvmError::Config(format!(
                    "[rvm] backend = \"{other}\" is not a backend: use \"mojim\" or \"redis\""
                )))
            }
        };
        Ok(RvmOptions { backend, base: parse_base(&r.base)?, tracking: parse_tracking(&r.tracking)? })
    }
}

/// `[rvm] base`: a page-aligned address, in hex (`0x…`) or decimal.
pub fn parse_base(s: &str) -> Result<usize> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => usize::from_str_radix(&h.replace('_', ""), 16),
        None => t.replace('_', "").parse(),
    };
    match v {
        Ok(v) if v != 0 && v.is_multiple_of(4096) && v < (1 << 47) => Ok(v),
        _ => Err(RvmError::Config(format!(
            "[rvm] base = \"{s}\" is not a page-aligned user-space address: use e.g. \"0x600000000000\""
        ))),
    }
}

/// `[rvm] tracking`: `auto`, `uffd` or `mprotect`.
pub fn parse_tracking(s: &str) -> Result<Option<WriteTracking>> {
    match s {
        "auto" | "" => Ok(None),
        "uffd" => Ok(Some(WriteTracking::UffdAsync)),
        "mprotect" => Ok(Some(WriteTracking::Mprotect)),
        other => Err(RvmError::Config(format!(
            "[rvm] tracking = \"{other}\" is not a method: use \"auto\", \"uffd\" or \"mprotect\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_named() {
        assert_eq!(parse_base("0x600000000000").unwrap(), DEFAULT_BASE);
        assert!(parse_base("0x6000000001").unwrap_err().to_string().contains("[rvm] base"));
        assert!(parse_base("0").is_err());
        assert_eq!(parse_tracking("mprotect").unwrap(), Some(WriteTracking::Mprotect));
        assert!(parse_tracking("soft-dirty").unwrap_err().to_string().contains("soft-dirty"));
    }
}
