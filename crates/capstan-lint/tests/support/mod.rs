//! What the lint tests that lint YAML text share: linting a text as one named file, and finding
//! the line a diagnostic should point at.

use capstan_lint::{LintOptions, Report, lint};

/// Lints `text` as the file `file` with the default options.
pub fn lint_file(file: &str, text: &str) -> Report {
    let objects = capstan_manifest::load_str(file, text).expect("YAML loads");
    lint(objects, &LintOptions::default())
}

/// The 1-based number of the first line of `text` that contains `needle`.
pub fn line_of(text: &str, needle: &str) -> u32 {
    let index = text
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in the text"));
    u32::try_from(index + 1).expect("small file")
}
