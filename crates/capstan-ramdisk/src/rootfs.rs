//! Debian root filesystems from `debootstrap`, kept in the package cache: the one way capstan's
//! disk images ([`crate::cloud_image`], [`crate::node_image`]) get their operating system.
//!
//! A [`Recipe`] names the packages: `debootstrap --variant=minbase` installs the base set, then
//! `apt-get install --no-install-recommends` in the chroot (with `/proc` mounted) installs the
//! rest, so that debootstrap's simple resolver never meets virtual dependencies. The tree is kept
//! as `<name>-rootfs-<suite>-<hash of the recipe>` in the cache and only made when missing: a
//! changed recipe makes a new tree, an unchanged one costs nothing.
//!
//! Every tree gets what each boot of an image needs ([`configure`]): the root in fstab,
//! cloud-init's datasources, an empty machine id (a fresh one per machine), no host name of the
//! build machine, and no package lists.

use crate::{RamdiskError, io, run};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian release of the images.
pub const SUITE: &str = "bookworm";
/// The mirror `debootstrap` uses unless told otherwise.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// The root filesystem's label, which the kernel command line and fstab name.
pub const ROOT_LABEL: &str = "capstan-root";
/// What cloud-init is told: the config drive first (Metal3's `config-2`, which capstan's agent
/// writes), NoCloud second (the `cidata` medium of capstan's KVM provider).
pub const CLOUD_CFG: &str = "# capstan: read the config drive (config-2) the provisioner writes, else NoCloud.\n\
datasource_list: [ ConfigDrive, NoCloud, None ]\n";
/// Marks a finished tree; a tree without it is a build that stopped half way.
const COMPLETE: &str = ".capstan-complete";

/// The packages of a root filesystem.
#[derive(Clone, Copy, Debug)]
pub struct Recipe<'a> {
    /// Names the cached tree (`<name>-rootfs-<suite>-<hash>`).
    pub name: &'a str,
    /// Installed by `debootstrap --include`.
    pub base_packages: &'a [&'a str],
    /// Installed afterwards by apt-get in the chroot.
    pub chroot_packages: &'a [&'a str],
}

impl Recipe<'_> {
    /// The cache directory's name: the tree depends on what is installed and on what
    /// [`configure`] writes, so a change to either names a new one.
    pub fn dir_name(&self) -> String {
        let recipe: String = [self.base_packages, self.chroot_packages]
            .concat()
            .join(",")
            + CLOUD_CFG;
        let digest: String = Sha256::digest(recipe.as_bytes())
            .iter()
            .take(4)
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}-rootfs-{SUITE}-{digest}", self.name)
    }
}

/// Mounts `/proc` in a chroot and unmounts it when dropped, whatever happened in between.
pub(crate) struct ProcMount(PathBuf);

impl ProcMount {
    pub(crate) fn mount(root: &Path) -> Result<Self, RamdiskError> {
        let proc = root.join("proc");
        std::fs::create_dir_all(&proc).map_err(io("creating", &proc))?;
        run(Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&proc))?;
        Ok(Self(proc))
    }
}

impl Drop for ProcMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The cached root filesystem of `recipe`, bootstrapped from `mirror` when missing.
pub fn bootstrap(
    cache: &Path,
    recipe: &Recipe<'_>,
    mirror: &str,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, RamdiskError> {
    let name = recipe.dir_name();
    let root = cache.join(&name);
    if root.join(COMPLETE).is_file() {
        return Ok(root);
    }
    std::fs::create_dir_all(cache).map_err(io("creating", cache))?;
    let partial = cache.join(format!("{name}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(io("removing", &partial))?;
    }
    progress(&format!(
        "debootstrap {SUITE} from {mirror} (a few minutes; kept in {})",
        root.display()
    ));
    run(Command::new("debootstrap")
        .arg("--variant=minbase")
        .arg(format!("--include={}", recipe.base_packages.join(",")))
        .arg(SUITE)
        .arg(&partial)
        .arg(mirror))?;
    progress(&format!(
        "installing {} in the chroot",
        recipe.chroot_packages.join(", ")
    ));
    {
        let _proc = ProcMount::mount(&partial)?;
        run(Command::new("chroot")
            .arg(&partial)
            .args(["apt-get", "install", "-y", "-q", "--no-install-recommends"])
            .args(recipe.chroot_packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
        run(Command::new("chroot")
            .arg(&partial)
            .args(["apt-get", "clean"]))?;
    }
    configure(&partial)?;
    std::fs::rename(&partial, &root).map_err(io("renaming", &partial))?;
    let complete = root.join(COMPLETE);
    std::fs::write(&complete, SUITE).map_err(io("writing", &complete))?;
    Ok(root)
}

/// What every boot of an image needs: the root in fstab, cloud-init's datasources, a fresh
/// machine id per machine, no host name of the build machine, no package lists.
fn configure(root: &Path) -> Result<(), RamdiskError> {
    let write = |relative: &str, contents: &str| {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        std::fs::write(&path, contents).map_err(io("writing", &path))
    };
    write(
        "etc/fstab",
        &format!("LABEL={ROOT_LABEL} / ext4 defaults 0 1\n"),
    )?;
    write("etc/cloud/cloud.cfg.d/90-capstan.cfg", CLOUD_CFG)?;
    write("etc/machine-id", "")?;
    write("etc/hostname", "localhost\n")?;
    let lists = root.join("var/lib/apt/lists");
    if let Ok(entries) = std::fs::read_dir(&lists) {
        for entry in entries.flatten() {
            if entry.path().is_file() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

/// Every package installed in the tree at `root`, with its version (`dpkg-query` in a chroot).
pub fn installed_packages(root: &Path) -> Result<BTreeMap<String, String>, RamdiskError> {
    let out = run(Command::new("chroot").arg(root).args([
        "dpkg-query",
        "-W",
        "-f",
        "${Package}\t${Version}\t${db:Status-Abbrev}\n",
    ]))?;
    Ok(out
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let (name, version, status) = (fields.next()?, fields.next()?, fields.next()?);
            // `ii`: wanted and installed; packages only remembered (`rc`) are not in the tree.
            status
                .starts_with("ii")
                .then(|| (name.to_owned(), version.to_owned()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_name_follows_the_recipe() {
        let a = Recipe {
            name: "node",
            base_packages: &["systemd"],
            chroot_packages: &["containerd"],
        };
        let b = Recipe {
            chroot_packages: &["containerd", "runc"],
            ..a
        };
        assert!(a.dir_name().starts_with("node-rootfs-bookworm-"));
        assert_ne!(a.dir_name(), b.dir_name());
        assert_eq!(a.dir_name(), a.dir_name());
    }
}
