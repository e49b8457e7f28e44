//! Byte sizes as people write them: `4096`, `64KiB`, `1GiB`, `40MB` (units are binary:
//! K = KB = KiB = 1024).

use std::fmt;

/// Parses a size; the error names the value and the accepted forms.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| SizeError::NotASize(s.to_string()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(SizeError::UnknownUnit { unit: u.to_string(), text: s.to_string() }),
    };
    n.checked_mul(mult).ok_or_else(|| SizeError::Overflow(s.to_string()))
}

/// Why a size, or a rate (`crate::config::parse_rate`), could not be read: a mistake in what
/// someone wrote (a flag, a configuration value), with the text as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not a number followed by a unit.
    NotASize(String),
    /// A unit that is none of B, KiB, MiB, GiB, TiB (or their short forms).
    UnknownUnit {
        /// The unit, lower-cased.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// More bytes than 64 bits hold.
    Overflow(String),
    /// A rate without its `/s`.
    NotARate(String),
    /// A rate of 0 bytes per second.
    ZeroRate(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::NotASize(s) => write!(f, "{s:?} is not a size; write e.g. 4096, 64KiB, 1GiB"),
            SizeError::UnknownUnit { unit, text } => {
                write!(f, "unknown size unit {unit:?} in {text:?}; use B, KiB, MiB, GiB or TiB")
            }
            SizeError::Overflow(s) => write!(f, "size {s:?} overflows 64 bits"),
            SizeError::NotARate(s) => write!(f, "{s:?} is not a rate; write e.g. 100MiB/s"),
            SizeError::ZeroRate(s) => write!(f, "rate {s:?} must be more than 0"),
        }
    }
}

impl std::error::Error for SizeError {}

/// Formats a size with the largest exact binary unit.
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("4KB"), Ok(4096));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert!(parse_size("1.5GiB").is_err());
        assert_eq!(
            parse_size("12 parsecs"),
            Err(SizeError::UnknownUnit { unit: "parsecs".into(), text: "12 parsecs".into() })
        );
        assert!(parse_size("12 parsecs").unwrap_err().to_string().contains("parsecs"));
        assert_eq!(parse_size("99999999999TiB"), Err(SizeError::Overflow("99999999999TiB".into())));
        assert!(parse_size("99999999999TiB").unwrap_err().to_string().contains("overflows"));
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(4097), "4097");
    }
}
