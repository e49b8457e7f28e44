//! The sections of the file whose settings another crate defines: `[kv]` (`mojim kv`, the
//! `mojim-kv` crate) and `[rvm]` (recoverable memory, the `mojim-rvm` crate).
//!
//! The library keeps them as the tables written ([`ConfigFile::kv`], [`ConfigFile::rvm`]) and
//! knows nothing of their keys: the owning crate's type ([`SectionSchema`]) reads one, refusing
//! a key it does not know or a value of the wrong type with a [`SectionError`] that names the
//! file, the section and the key.

use super::{Config, ConfigFile};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

/// A section of the file whose schema another crate owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnedSection {
    /// `[kv]`: `mojim kv` (the `mojim-kv` crate).
    Kv,
    /// `[rvm]`: recoverable memory (the `mojim-rvm` crate, `rvm_*` in C).
    Rvm,
}

impl OwnedSection {
    /// The section's name as the file writes it, e.g. `kv`.
    pub fn name(self) -> &'static str {
        match self {
            OwnedSection::Kv => "kv",
            OwnedSection::Rvm => "rvm",
        }
    }

    /// Whose settings the section holds, and where they are described.
    pub fn owner(self) -> &'static str {
        match self {
            OwnedSection::Kv => "mojim kv's settings, docs/KV.md",
            OwnedSection::Rvm => "recoverable memory's settings, docs/RVM.md",
        }
    }
}

impl fmt::Display for OwnedSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.name())
    }
}

/// The typed form of an [`OwnedSection`], defined by the crate that owns it: every key with
/// its default (a key the file leaves out takes it), and unknown keys refused.
pub trait SectionSchema: Serialize + DeserializeOwned {
    /// The section it reads.
    const SECTION: OwnedSection;
}

/// A section that does not fit its owner's schema: a key it does not know, or a value of the
/// wrong type. The fault is the file's; the message names it, the section and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionError {
    /// The file the configuration was read from, if it was read from one.
    pub file: Option<PathBuf>,
    /// The section.
    pub section: OwnedSection,
    /// The key at fault, when one is (a value of the wrong type, a key not in the schema).
    pub key: Option<String>,
    /// What is wrong, e.g. ``unknown field `max_keys`, expected one of …``.
    pub reason: String,
}

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        write!(f, "{}", self.section)?;
        if let Some(key) = &self.key {
            write!(f, " {key}")?;
        }
        write!(f, ": {}; correct or remove it (see {})", self.reason, self.section.owner())
    }
}

impl std::error::Error for SectionError {}

impl From<SectionError> for crate::Error {
    fn from(e: SectionError) -> crate::Error {
        crate::Error::Config(e.to_string())
    }
}

impl ConfigFile {
    /// The table of `section`, as written (empty when the file has none).
    pub fn table(&self, section: OwnedSection) -> &toml::Table {
        match section {
            OwnedSection::Kv => &self.kv,
            OwnedSection::Rvm => &self.rvm,
        }
    }

    fn table_mut(&mut self, section: OwnedSection) -> &mut toml::Table {
        match section {
            OwnedSection::Kv => &mut self.kv,
            OwnedSection::Rvm => &mut self.rvm,
        }
    }

    /// The section `S` reads, in its typed form; errors name the section and the key, not the
    /// file ([`Config::section`] does).
    pub fn section<S: SectionSchema>(&self) -> Result<S, SectionError> {
        read(self.table(S::SECTION), S::SECTION)
    }

    /// Writes `value` as its section, every key of it (a tool or a test writing a file).
    pub fn set_section<S: SectionSchema>(&mut self, value: &S) {
        // A section's schema is a struct of strings, numbers, booleans and lists of them: it
        // always has a table's form.
        let table = toml::Table::try_from(value).expect("an owned section serialises as a table");
        *self.table_mut(S::SECTION) = table;
    }

    /// Reads section `S`, lets `change` change it, and writes it back ([`ConfigFile::set_section`]).
    pub fn edit_section<S: SectionSchema>(
        &mut self,
        change: impl FnOnce(&mut S),
    ) -> Result<(), SectionError> {
        let mut value = self.section::<S>()?;
        change(&mut value);
        self.set_section(&value);
        Ok(())
    }
}

impl Config {
    /// The section `S` reads, in its typed form, checked against its schema: a key it does not
    /// know or a value of the wrong type is refused, naming this file, the section and the key.
    pub fn section<S: SectionSchema>(&self) -> Result<S, SectionError> {
        self.file.section().map_err(|e| SectionError { file: self.path.clone(), ..e })
    }
}

/// `table` as `S`. On an error, the first key that fails alone is the one named: the
/// deserializer of a table names no key for a value of the wrong type.
fn read<S: SectionSchema>(table: &toml::Table, section: OwnedSection) -> Result<S, SectionError> {
    let whole = match table.clone().try_into::<S>() {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let at_fault = table.iter().find_map(|(key, value)| {
        let alone: toml::Table = [(key.clone(), value.clone())].into_iter().collect();
        alone.try_into::<S>().err().map(|e| (key.clone(), e))
    });
    let (key, e) = match at_fault {
        Some((key, e)) => (Some(key), e),
        None => (None, whole),
    };
    Err(SectionError { file: None, section, key, reason: e.message().trim_end().to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::template_with;
    use serde::Deserialize;

    /// A schema as an owning crate writes one.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Probe {
        port: u16,
        names: Vec<String>,
    }

    impl SectionSchema for Probe {
        const SECTION: OwnedSection = OwnedSection::Kv;
    }

    fn file(kv: &str) -> ConfigFile {
        let text = template_with(&[0; 16], 4096, "", "a:1", &[&format!("[kv]\n{kv}\n\n")]);
        toml::from_str(&text).expect("the file parses: the library does not read [kv]")
    }

    #[test]
    fn an_owned_section_reads_with_its_defaults_and_round_trips() {
        assert_eq!(file("").section::<Probe>().unwrap(), Probe::default());
        let mut f = file("port = 7\n");
        assert_eq!(f.section::<Probe>().unwrap(), Probe { port: 7, names: vec![] });
        f.edit_section(|p: &mut Probe| p.names = vec!["a".into()]).unwrap();
        let again: ConfigFile = toml::from_str(&toml::to_string(&f).unwrap()).unwrap();
        assert_eq!(again.section::<Probe>().unwrap(), Probe { port: 7, names: vec!["a".into()] });
        assert!(again.rvm.is_empty(), "[rvm] untouched");
        // A file without the section at all reads its defaults too.
        let none: ConfigFile = toml::from_str(&template_with(&[0; 16], 4096, "", "a:1", &[])).unwrap();
        assert_eq!(none.section::<Probe>().unwrap(), Probe::default());
    }

    #[test]
    fn a_key_outside_the_schema_or_a_bad_value_is_named_with_the_file_and_section() {
        let at = |kv: &str| {
            let c =
                Config { file: file(kv), base: PathBuf::new(), path: Some("/etc/mojim/mojim.toml".into()) };
            c.section::<Probe>().unwrap_err()
        };
        let e = at("port = 7\nmax_keys = 5\n");
        assert_eq!((e.section, e.key.as_deref()), (OwnedSection::Kv, Some("max_keys")));
        let m = e.to_string();
        for needle in
            ["/etc/mojim/mojim.toml: [kv] max_keys: unknown field `max_keys`", "`port`", "docs/KV.md"]
        {
            assert!(m.contains(needle), "{needle:?} not in {m}");
        }
        let m = at("names = [\"a\"]\nport = \"x\"\n").to_string();
        assert!(m.starts_with("/etc/mojim/mojim.toml: [kv] port: invalid type: string \"x\""), "{m}");
        let m = at("names = [1]\n").to_string();
        assert!(m.contains("[kv] names: invalid type: integer `1`"), "{m}");
        // Without a file (a configuration made in memory), the rest is said.
        let m = file("port = -1\n").section::<Probe>().unwrap_err().to_string();
        assert!(m.starts_with("[kv] port: "), "{m}");
    }

    #[test]
    fn unknown_sections_are_still_refused_and_owned_ones_must_be_tables() {
        let base = template_with(&[0; 16], 4096, "", "a:1", &[]);
        let e = toml::from_str::<ConfigFile>(&format!("{base}\n[kvv]\nport = 1\n")).unwrap_err();
        assert!(e.to_string().contains("unknown field `kvv`"), "{e}");
        let e = toml::from_str::<ConfigFile>(&format!("rvm = 5\n{base}")).unwrap_err();
        assert!(e.to_string().contains("rvm"), "{e}");
    }
}
