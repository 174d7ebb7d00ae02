//! Debian's packages as building material: the cloud kernel (`linux-image-cloud-amd64`, resolved to
//! its versioned package) and `busybox-static`, fetched with `apt-get download` into a cache and
//! unpacked with `dpkg-deb -x`; module dependencies from `depmod` run on the unpacked tree.
//! [`fetch_all`] is the one way capstan downloads Debian packages, into its package cache.

use crate::{RamdiskError, io, run};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unpacked kernel and busybox.
#[derive(Clone, Debug)]
pub struct DebianParts {
    pub kernel_package: String,
    pub kernel_version: String,
    pub kernel: PathBuf,
    /// `lib/modules/VERSION` of the unpacked kernel.
    pub modules_dir: PathBuf,
    pub busybox_package: String,
    pub busybox: PathBuf,
}

/// The versioned kernel package `linux-image-cloud-amd64` depends on.
fn kernel_package() -> Result<String, RamdiskError> {
    let out = run(Command::new("apt-cache").args(["depends", "linux-image-cloud-amd64"]))?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_owned)
        .ok_or_else(|| {
            RamdiskError::Package(
                "apt-cache knows no linux-image-cloud-amd64: run `apt-get update`".into(),
            )
        })
}

/// The `.deb` of `package` in `cache`, if one is there.
fn cached(cache: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    std::fs::read_dir(cache).ok().and_then(|entries| {
        entries.filter_map(Result::ok).map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&prefix) && n.ends_with(".deb")
            })
        })
    })
}

/// The `.deb` of each of `packages` in `cache`, in their order, the missing ones downloaded by one
/// `apt-get download` (a run per package costs seconds of apt's start-up each; the offline bundle
/// fetches about a hundred). When that run fails, the missing ones are fetched one at a time so
/// the error names the package apt refused. This is the one way capstan downloads Debian
/// packages, into its package cache.
pub fn fetch_all<S: AsRef<str>>(
    cache: &Path,
    packages: &[S],
) -> Result<Vec<PathBuf>, RamdiskError> {
    let missing: Vec<&str> = packages
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| cached(cache, p).is_none())
        .collect();
    if !missing.is_empty() {
        let together = run(Command::new("apt-get")
            .args(["download", "-q"])
            .args(&missing)
            .current_dir(cache));
        if together.is_err() {
            for package in &missing {
                if cached(cache, package).is_none() {
                    run(Command::new("apt-get")
                        .args(["download", "-q", package])
                        .current_dir(cache))?;
                }
            }
        }
    }
    packages
        .iter()
        .map(|package| {
            let package = package.as_ref();
            cached(cache, package).ok_or_else(|| {
                RamdiskError::Package(format!(
                    "apt-get download {package} left no .deb in {}",
                    cache.display()
                ))
            })
        })
        .collect()
}

fn unpack(deb: &Path, into: &Path) -> Result<(), RamdiskError> {
    if into.is_dir() {
        return Ok(());
    }
    let partial = into.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(io("creating", &partial))?;
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&partial))?;
    std::fs::rename(&partial, into).map_err(io("renaming", &partial))
}

/// Fetches and unpacks the kernel and busybox into `cache`.
pub fn prepare(cache: &Path) -> Result<DebianParts, RamdiskError> {
    std::fs::create_dir_all(cache).map_err(io("creating", cache))?;
    let kernel_package = kernel_package()?;
    let kernel_version = kernel_package.trim_start_matches("linux-image-").to_owned();
    let [kernel_deb, busybox_deb]: [PathBuf; 2] =
        fetch_all(cache, &[kernel_package.as_str(), "busybox-static"])?
            .try_into()
            .map_err(|_| RamdiskError::Package("apt-get download fetched a wrong count".into()))?;
    let kernel_root = cache.join(format!("root-{kernel_package}"));
    unpack(&kernel_deb, &kernel_root)?;
    let modules_dir = kernel_root.join("lib/modules").join(&kernel_version);
    if !modules_dir.join("modules.dep").is_file() {
        run(Command::new("depmod")
            .arg("-b")
            .arg(&kernel_root)
            .arg(&kernel_version))?;
    }
    let busybox_root = cache.join("root-busybox-static");
    unpack(&busybox_deb, &busybox_root)?;
    Ok(DebianParts {
        kernel: kernel_root
            .join("boot")
            .join(format!("vmlinuz-{kernel_version}")),
        kernel_package,
        kernel_version,
        modules_dir,
        busybox_package: "busybox-static".into(),
        busybox: busybox_root.join("bin/busybox"),
    })
}

impl DebianParts {
    /// The module files for `wanted` (names the kernel has built in, or lacks, are skipped), with
    /// every dependency before the modules that need it.
    pub fn modules(&self, wanted: &[&str]) -> Result<Vec<PathBuf>, RamdiskError> {
        let dep_path = self.modules_dir.join("modules.dep");
        let deps = std::fs::read_to_string(&dep_path).map_err(io("reading", &dep_path))?;
        let table: Vec<(String, Vec<String>)> = deps
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(m, d)| {
                (
                    m.to_owned(),
                    d.split_whitespace().map(str::to_owned).collect(),
                )
            })
            .collect();
        let mut order: Vec<String> = Vec::new();
        fn visit(module: &str, table: &[(String, Vec<String>)], order: &mut Vec<String>) {
            if order.iter().any(|m| m == module) {
                return;
            }
            if let Some((_, deps)) = table.iter().find(|(m, _)| m == module) {
                // modules.dep lists dependencies nearest first; load the farthest first.
                for dep in deps.iter().rev() {
                    visit(dep, table, order);
                }
            }
            order.push(module.to_owned());
        }
        for name in wanted {
            let file = format!("/{name}.ko");
            if let Some((module, _)) = table
                .iter()
                .find(|(m, _)| m.ends_with(&file) || m.ends_with(&format!("{file}.xz")))
            {
                visit(module, &table, &mut order);
            }
        }
        Ok(order
            .into_iter()
            .map(|m| self.modules_dir.join(m))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packages already in the cache come back in the order asked, and no apt runs for them
    /// (`apt-get download` of the made-up names would fail).
    #[test]
    fn cached_packages_are_found_without_apt() {
        let cache = tempfile::tempdir().unwrap();
        for file in [
            "capstan-test-a_1.0_amd64.deb",
            "capstan-test-b_2%3a1.0_all.deb",
            "capstan-test-ab_1.0_amd64.deb",
        ] {
            std::fs::write(cache.path().join(file), b"").unwrap();
        }
        let found = fetch_all(cache.path(), &["capstan-test-b", "capstan-test-a"]).unwrap();
        let names: Vec<String> = found
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "capstan-test-b_2%3a1.0_all.deb",
                "capstan-test-a_1.0_amd64.deb"
            ]
        );
    }

    /// A package apt does not know fails the fetch with apt's own words, after the one batched
    /// run failed and the missing packages were tried one at a time.
    #[test]
    fn an_unknown_package_is_named_in_the_error() {
        let cache = tempfile::tempdir().unwrap();
        std::fs::write(cache.path().join("capstan-test-a_1.0_amd64.deb"), b"").unwrap();
        let err = fetch_all(
            cache.path(),
            &["capstan-test-a", "capstan-no-such-package-7f3a"],
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("capstan-no-such-package-7f3a"),
            "the error names the package: {err}"
        );
    }
}
