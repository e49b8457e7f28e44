//! The Prometheus text exposition format, version 0.0.4: for each metric family a `# HELP` and
//! a `# TYPE` line, then its samples, `name{label="value",...} value`, one a line.
//!
//! Names follow Prometheus's conventions, which [`Exposition::family`] asserts: `[a-z_:]`
//! and digits; counters end in `_total`; units are base units and go last (`_bytes`,
//! `_seconds`).

use std::fmt::Write;

/// The `Content-Type` of a page this module writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as its `# TYPE` line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only ever rises (until the process restarts); the name ends in `_total`.
    Counter,
    /// A value that goes up and down, or a state (1 for the state it is in, labelled).
    Gauge,
    /// Observations counted in buckets: samples `name_bucket{le="..."}` (cumulative, the last
    /// `le="+Inf"`), `name_sum` and `name_count`, written with [`Exposition::histogram_sample`].
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A page of metric families being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
    /// The family whose samples are being written, and its kind.
    family: String,
    kind: Option<Kind>,
}

impl Exposition {
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines. Samples named `name` follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        assert!(valid_name(name), "metric name {name:?} is not [a-zA-Z_:][a-zA-Z0-9_:]*");
        assert_eq!(
            kind == Kind::Counter,
            name.ends_with("_total"),
            "{name}: counters, and only they, end in _total"
        );
        // Writing to a String cannot fail.
        let _ = writeln!(self.out, "# HELP {name} {}", escape(help, false));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.name());
        self.family = name.to_string();
        self.kind = Some(kind);
    }

    /// A family of one unlabelled sample, listed also when there is no value yet (`None`):
    /// then only its HELP and TYPE lines, so that queries naming it always find it served.
    pub fn single_or_none<V: Into<Value>>(&mut self, name: &str, kind: Kind, help: &str, value: Option<V>) {
        self.family(name, kind, help);
        if let Some(v) = value {
            self.sample(&[], v);
        }
    }

    /// A sample of the current family.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        assert!(!self.family.is_empty(), "a sample comes after its family");
        assert!(self.kind != Some(Kind::Histogram), "a histogram's samples have suffixes");
        self.write_sample("", labels, value.into());
    }

    /// A sample of the current family, a histogram: `suffix` is `_bucket` (with an `le` label
    /// among `labels`), `_sum` or `_count`.
    pub fn histogram_sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        assert_eq!(self.kind, Some(Kind::Histogram), "histogram samples come after a histogram family");
        assert!(["_bucket", "_sum", "_count"].contains(&suffix), "histogram sample suffix {suffix:?}");
        assert_eq!(
            suffix == "_bucket",
            labels.iter().any(|(k, _)| *k == "le"),
            "{suffix}: le goes on buckets only"
        );
        self.write_sample(suffix, labels, value.into());
    }

    /// A histogram's samples, after its family: `_bucket` for each `(le, count)` of `buckets`
    /// (bounds rising, counts cumulative), then `_bucket{le="+Inf"}`, `_sum` and `_count`, each
    /// with `labels` (`le` after them).
    pub fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        buckets: impl IntoIterator<Item = (f64, u64)>,
        sum: impl Into<Value>,
        count: u64,
    ) {
        for (le, n) in buckets {
            let le = le.to_string();
            let mut all = labels.to_vec();
            all.push(("le", &le));
            self.histogram_sample("_bucket", &all, n);
        }
        let mut all = labels.to_vec();
        all.push(("le", "+Inf"));
        self.histogram_sample("_bucket", &all, count);
        self.histogram_sample("_sum", labels, sum);
        self.histogram_sample("_count", labels, count);
    }

    fn write_sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: Value) {
        self.out.push_str(&self.family);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                assert!(valid_name(k) && !k.contains(':'), "label name {k:?}");
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v, true));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&value.to_string());
        self.out.push('\n');
    }

    /// A family of one sample without labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Into<Value>) {
        self.family(name, kind, help);
        self.sample(&[], value);
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Escapes a HELP text (backslash, newline) or a label value (and the double quote).
fn escape(s: &str, quote: bool) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '"' if quote => o.push_str("\\\""),
            c => o.push(c),
        }
    }
    o
}

/// A sample's value: a count, exact to the last unit, or a measure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::Int(v as u64)
    }
}

impl From<u16> for Value {
    fn from(v: u16) -> Value {
        Value::Int(v.into())
    }
}

/// A state: 1 when true, else 0.
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Int(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

/// As the format writes it: `NaN`, `+Inf`, `-Inf`, or a decimal number.
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) if v.is_nan() => f.write_str("NaN"),
            Value::Float(v) if v.is_infinite() => f.write_str(if v > 0.0 { "+Inf" } else { "-Inf" }),
            Value::Float(v) => write!(f, "{v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escapes() {
        let mut e = Exposition::new();
        e.family("mojim_received_groups_total", Kind::Counter, "Groups received.\nWhole.");
        e.sample(&[], 12u64);
        e.family("mojim_backup_lag_bytes", Kind::Gauge, "Lag of a \\ backup.");
        e.sample(&[("backup", "a\"b\\c\nd")], 0.5);
        e.sample(&[("backup", "x"), ("lane", "2")], f64::INFINITY);
        e.single("mojim_value", Kind::Gauge, "A value.", f64::NAN);
        assert_eq!(
            e.finish(),
            "# HELP mojim_received_groups_total Groups received.\\nWhole.\n\
             # TYPE mojim_received_groups_total counter\n\
             mojim_received_groups_total 12\n\
             # HELP mojim_backup_lag_bytes Lag of a \\\\ backup.\n\
             # TYPE mojim_backup_lag_bytes gauge\n\
             mojim_backup_lag_bytes{backup=\"a\\\"b\\\\c\\nd\"} 0.5\n\
             mojim_backup_lag_bytes{backup=\"x\",lane=\"2\"} +Inf\n\
             # HELP mojim_value A value.\n\
             # TYPE mojim_value gauge\n\
             mojim_value NaN\n"
        );
    }

    #[test]
    fn values_are_plain_decimals_and_counts_exact() {
        assert_eq!(Value::from(1e20).to_string(), "100000000000000000000");
        assert_eq!(Value::from(u64::MAX).to_string(), "18446744073709551615", "counts are exact");
        assert_eq!(Value::from(-3.25).to_string(), "-3.25");
        assert_eq!(Value::from(true).to_string(), "1");
    }

    #[test]
    fn histogram_samples_carry_suffixes() {
        let mut e = Exposition::new();
        e.family("mojim_sync_seconds", Kind::Histogram, "Sync points.");
        e.histogram_sample("_bucket", &[("mode", "sync"), ("le", "0.001")], 2u64);
        e.histogram_sample("_bucket", &[("mode", "sync"), ("le", "+Inf")], 3u64);
        e.histogram_sample("_sum", &[("mode", "sync")], 0.5);
        e.histogram_sample("_count", &[("mode", "sync")], 3u64);
        assert_eq!(
            e.finish(),
            "# HELP mojim_sync_seconds Sync points.\n\
             # TYPE mojim_sync_seconds histogram\n\
             mojim_sync_seconds_bucket{mode=\"sync\",le=\"0.001\"} 2\n\
             mojim_sync_seconds_bucket{mode=\"sync\",le=\"+Inf\"} 3\n\
             mojim_sync_seconds_sum{mode=\"sync\"} 0.5\n\
             mojim_sync_seconds_count{mode=\"sync\"} 3\n"
        );
    }

    #[test]
    #[should_panic(expected = "have suffixes")]
    fn a_plain_sample_of_a_histogram_is_a_bug() {
        let mut e = Exposition::new();
        e.family("mojim_sync_seconds", Kind::Histogram, "x");
        e.sample(&[], 1u64);
    }

    #[test]
    #[should_panic(expected = "end in _total")]
    fn a_counter_without_total_is_a_bug() {
        Exposition::new().family("mojim_groups", Kind::Counter, "x");
    }

    #[test]
    #[should_panic(expected = "metric name")]
    fn a_bad_name_is_a_bug() {
        Exposition::new().family("mojim-groups", Kind::Gauge, "x");
    }
}
