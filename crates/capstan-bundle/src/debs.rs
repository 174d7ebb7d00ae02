//! The bundle's Debian packages: the dependency closure of capstan's package, fetched into capstan's
//! package cache, and the index of a flat apt repository over them, so that apt on the target
//! resolves and installs from the bundle alone (it picks one of `A | B` alternatives and skips what
//! the target already has, which installing every `.deb` with dpkg would not).

use crate::manifest::Package;
use crate::{BundleError, io, run, sha256_file};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The names in a `Depends` field: every alternative, without versions or architecture
/// qualifiers (`libc6 (>= 2.34), libvirt0 (>= 8.0.0) | foo, passwd:any` → libc6, libvirt0, foo,
/// passwd).
pub fn depends_names(field: &str) -> Vec<String> {
    field
        .split([',', '|'])
        .filter_map(|part| {
            let name = part.trim().split([' ', '(', ':']).next()?.trim();
            (!name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

/// The packages `apt-cache depends --recurse` reaches from `roots` over Depends and Pre-Depends
/// (no Recommends or Suggests), roots included; virtual packages (`<name>`) are left out, their
/// providers are in the list.
pub fn closure(roots: &[String]) -> Result<Vec<String>, BundleError> {
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    let out = run(Command::new("apt-cache")
        .args([
            "depends",
            "--recurse",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
        ])
        .args(roots))?;
    let names: BTreeSet<String> = parse_closure(&out);
    if let Some(missing) = roots.iter().find(|r| !names.contains(*r)) {
        return Err(BundleError::Input(format!(
            "apt knows no package {missing}: run `apt-get update` (the bundle's packages come from this machine's apt sources)"
        )));
    }
    Ok(names.into_iter().collect())
}

/// The package names of `apt-cache depends --recurse` output: unindented lines, virtual packages
/// (`<name>`) excluded.
fn parse_closure(out: &str) -> BTreeSet<String> {
    out.lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('<') && !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The control fields of a `.deb`, as `dpkg-deb -f` prints them.
pub fn control(deb: &Path) -> Result<String, BundleError> {
    run(Command::new("dpkg-deb").arg("-f").arg(deb))
}

/// One field's value from control text (its first line only).
pub fn field<'a>(control: &'a str, name: &str) -> Option<&'a str> {
    control.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// Fetches every package of `names` into `cache` (the one package cache of capstan's Debian
/// downloads), returning the files.
pub fn fetch_all(cache: &Path, names: &[String]) -> Result<Vec<PathBuf>, BundleError> {
    std::fs::create_dir_all(cache).map_err(io("creating", cache))?;
    capstan_ramdisk::debian::fetch_all(cache, names).map_err(BundleError::from)
}

/// A package of the bundle: its file there and what `manifest.json` says of it.
pub struct Indexed {
    pub package: Package,
    /// Its stanza in `Packages`.
    pub stanza: String,
}

/// Describes one `.deb` that will be at `debs/FILE_NAME` in the bundle.
pub fn index(deb: &Path) -> Result<Indexed, BundleError> {
    let control = control(deb)?;
    let name = field(&control, "Package")
        .ok_or_else(|| BundleError::Input(format!("{} has no Package field", deb.display())))?;
    let version = field(&control, "Version").unwrap_or_default();
    let architecture = field(&control, "Architecture").unwrap_or_default();
    let file_name = format!(
        "{name}_{}_{architecture}.deb",
        // apt's file names replace the epoch's colon.
        version.replace(':', "%3a")
    );
    let (sha256, bytes) = sha256_file(deb)?;
    let mut stanza = control.trim_end().to_owned();
    stanza.push_str(&format!(
        "\nFilename: ./{file_name}\nSize: {bytes}\nSHA256: {sha256}\n"
    ));
    Ok(Indexed {
        package: Package {
            name: name.to_owned(),
            version: version.to_owned(),
            architecture: architecture.to_owned(),
            file: format!("debs/{file_name}"),
            sha256,
            bytes,
        },
        stanza,
    })
}

/// The `Packages` text of a flat repository over `indexed`.
pub fn packages_index(indexed: &[Indexed]) -> String {
    indexed
        .iter()
        .map(|i| i.stanza.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `Release` text of a flat repository whose `Packages` is `packages` (unsigned: the bootstrapper
/// marks the source `trusted=yes`, and `SHA256SUMS` is what a person checks).
pub fn release(packages: &str, date: &str) -> String {
    let hash = crate::sha256_hex(packages.as_bytes());
    format!(
        "Origin: capstan-bundle\nLabel: capstan-bundle\nDate: {date}\nSHA256:\n {hash} {} Packages\n",
        packages.len()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn depends_names_take_every_alternative_without_versions() {
        assert_eq!(
            depends_names("libc6 (>= 2.34), libvirt0 (>= 8.0.0) | libvirt-lite, passwd:any, "),
            ["libc6", "libvirt0", "libvirt-lite", "passwd"]
        );
    }

    #[test]
    fn the_closure_leaves_out_virtual_packages_and_dependency_lines() {
        let out = "libvirt0\n  Depends: libc6\n  Depends: <libfoo>\n    libfoo1\nlibc6\n<libfoo>\nlibfoo1\n";
        assert_eq!(
            parse_closure(out).into_iter().collect::<Vec<_>>(),
            ["libc6", "libfoo1", "libvirt0"]
        );
    }

    #[test]
    fn fields_are_read_from_control_text() {
        let control = "Package: capstan\nVersion: 0.1.0+git1.abc\nDepends: libc6 (>= 2.34)\nDescription: x\n more\n";
        assert_eq!(field(control, "Package"), Some("capstan"));
        assert_eq!(field(control, "Version"), Some("0.1.0+git1.abc"));
        assert_eq!(field(control, "Pre-Depends"), None);
    }

    #[test]
    fn the_release_file_names_the_packages_index_by_its_checksum() {
        let text = release("Package: a\n", "Tue, 01 Dec 2026 00:00:00 +0000");
        assert!(text.contains(" 11 Packages"), "{text}");
        assert!(text.contains("Date: Tue, 01 Dec 2026"), "{text}");
    }
}
