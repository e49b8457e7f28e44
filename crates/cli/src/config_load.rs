//! Loading the configuration file for a command. The library checks the sections it reads;
//! `[kv]` and `[rvm]` belong to `mojim kv` and the RVM face, whose schemas live in their crates.
//! A command that does not read them still checks them, and warns about a key they do not know
//! or a value of the wrong type: a typo is found when the file is first used, not when the
//! face that reads it later refuses to start. Only a warning: an operator's `status` or
//! `promote` must not fail for a section it never reads.

use mojim::config::Config;
use std::path::Path;

/// Reads and checks the configuration at `path` (see [`Config::load`]), warning about `[kv]`
/// and `[rvm]` as the module says.
pub(crate) fn load(path: &Path) -> mojim::Result<Config> {
    let cfg = Config::load(path)?;
    for problem in section_problems(&cfg) {
        tracing::warn!("{problem}; the faces that read it will refuse it");
    }
    Ok(cfg)
}

/// What is wrong with `[kv]` and `[rvm]` in `cfg`, one message for each.
fn section_problems(cfg: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if let Err(e) = cfg.section::<mojim_kv::KvSection>() {
        out.push(e.to_string());
    }
    if let Err(e) = cfg.section::<mojim_rvm::RvmSection>() {
        out.push(e.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim::config::ConfigFile;

    fn config(text: &str) -> Config {
        let file: ConfigFile = toml::from_str(text).expect("a configuration");
        Config { file, base: Default::default(), path: Some("/etc/mojim/mojim.toml".into()) }
    }

    const REGION: &str = "[region]\nuuid = \"0a0b0c0d-0000-4000-8000-000000000001\"\nsize = \"1MiB\"\n";

    #[test]
    fn a_typo_in_either_faces_section_is_named() {
        let cfg = config(&format!("{REGION}[kv]\nmax_clinets = 5\n[rvm]\nlog_sise = 4096\n"));
        let problems = section_problems(&cfg);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("[kv]") && problems[0].contains("max_clinets"), "{problems:?}");
        assert!(problems[1].contains("[rvm]") && problems[1].contains("log_sise"), "{problems:?}");
        assert!(problems[0].contains("/etc/mojim/mojim.toml"), "the file is named: {problems:?}");
    }

    #[test]
    fn sections_as_written_by_init_or_absent_have_nothing_to_say() {
        assert!(section_problems(&config(REGION)).is_empty());
        let cfg = config(&format!("{REGION}[kv]\nlisten = \"127.0.0.1:6379\"\n"));
        assert!(section_problems(&cfg).is_empty(), "{:?}", section_problems(&cfg));
    }
}
