//! Debian's packages as building material: the cloud kernel (`linux-image-cloud-amd64`, resolved to
//! its versioned package) and `busybox-static`, fetched with `apt-get download` into a cache and
//! unpacked with `dpkg-deb -x`; module dependencies from `depmod` run on the unpacked tree. [`fetch`]
//! is the one way capstan downloads a Debian package, into its package cache.

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

/// The `.deb` of `package` in `cache`, downloaded if missing (`apt-get download`: the build
/// machine's own package lists and architecture). The offline bundle fetches its packages this way.
pub fn fetch(cache: &Path, package: &str) -> Result<PathBuf, RamdiskError> {
    let find = || {
        std::fs::read_dir(cache).ok().and_then(|entries| {
            entries.filter_map(Result::ok).map(|e| e.path()).find(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy().starts_with(&format!("{package}_"))
                        && n.to_string_lossy().ends_with(".deb")
                })
            })
        })
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    run(Command::new("apt-get")
        .args(["download", "-q", package])
        .current_dir(cache))?;
    find().ok_or_else(|| {
        RamdiskError::Package(format!(
            "apt-get download {package} left no .deb in {}",
            cache.display()
        ))
    })
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
    let kernel_deb = fetch(cache, &kernel_package)?;
    let kernel_root = cache.join(format!("root-{kernel_package}"));
    unpack(&kernel_deb, &kernel_root)?;
    let modules_dir = kernel_root.join("lib/modules").join(&kernel_version);
    if !modules_dir.join("modules.dep").is_file() {
        run(Command::new("depmod")
            .arg("-b")
            .arg(&kernel_root)
            .arg(&kernel_version))?;
    }
    let busybox_deb = fetch(cache, "busybox-static")?;
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
