//! `capstan --version` names the commit the binary was built from (build.rs), so a bug report
//! quoting it points at exact source.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_version_names_the_package_version_and_the_commit_it_was_built_from() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap().trim().to_owned();
    assert!(
        head.len() == 12,
        "this test runs in a git checkout (as CI's clone is)"
    );
    let expected = format!("capstan {} ({head} ", env!("CARGO_PKG_VERSION"));
    assert!(
        text.starts_with(&expected),
        "{text:?} does not start with {expected:?}"
    );
    // … and the commit's date, as YYYY-MM-DD.
    let date = text
        .trim_end()
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .unwrap();
    assert!(
        date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
        "{text:?}"
    );
}
