//! Byte sizes as people write them: `4096`, `64KiB`, `1GiB`, `40MB` (units are binary:
//! K = KB = KiB = 1024).

/// Parses a size; the error names the value and the accepted forms.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size; write e.g. 4096, 64KiB, 1GiB"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        u => return Err(format!("unknown size unit {u:?} in {s:?}; use B, KiB, MiB, GiB or TiB")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} overflows 64 bits"))
}

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
        assert!(parse_size("12 parsecs").unwrap_err().contains("parsecs"));
        assert!(parse_size("99999999999TiB").unwrap_err().contains("overflows"));
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(4097), "4097");
    }
}
