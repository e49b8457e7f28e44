//! `PrimaryOptions::default()` is what a configuration file that sets nothing gives.

use super::PrimaryOptions;
use crate::config::{Config, ConfigFile};

#[test]
fn the_defaults_are_those_of_a_configuration_that_sets_nothing() {
    let mut file = ConfigFile::default();
    file.region.uuid = "00112233-4455-6677-8899-aabbccddeeff".into();
    file.region.size = "1MiB".into();
    let cfg = Config { file, base: "/nowhere".into(), path: None };
    let mut from_file = PrimaryOptions::from_config(&cfg, true).expect("options from the defaults");
    let defaults = PrimaryOptions::default();
    // The file's region path, resolved; no secret (insecure).
    from_file.region_path = defaults.region_path.clone();
    assert!(from_file.secret.0.is_empty());
    assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
}
