//! Tests of the kubectl discovery helpers.

use anyhow::Result;
use keel_testbed::kubectl::{installed, installed_in, newest};

#[test]
fn finds_1_27_to_1_33_with_matching_versions() -> Result<()> {
    let found = installed();
    let minors: Vec<u32> = found.iter().map(|k| k.minor).collect();
    assert_eq!(minors, (27..=33).collect::<Vec<_>>(), "{found:?}");
    for kubectl in &found {
        let version = kubectl.version_client()?;
        assert!(
            version.starts_with(&format!("v1.{}.", kubectl.minor)),
            "{} reports {version}",
            kubectl.path.display()
        );
    }
    assert_eq!(newest()?.minor, 33);
    Ok(())
}

#[test]
fn missing_dir_is_empty_not_a_panic() {
    assert!(installed_in(std::path::Path::new("/nonexistent/kubectl/dir")).is_empty());
}
