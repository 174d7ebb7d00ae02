//! The offline install bundle: everything an air-gapped management host needs to go from a bare
//! Debian system to `capstan serve` ready to provision, in one checksummed archive.
//!
//! A bundle is a tar archive with one top directory, `capstan-bundle-VERSION/`:
//!
//! | path | what |
//! | --- | --- |
//! | `install` | the bootstrapper a person runs first (`sudo ./install`): it checks every file against `SHA256SUMS`, installs capstan's package and the libraries it needs from `debs/` alone (a local apt repository, no other source), then runs `capstan bundle install` from the package it just installed |
//! | `manifest.json` | [`Manifest`]: capstan's version and commit, every package with its version and checksum, the ramdisk's kernel, the images, CRDs and manifests |
//! | `SHA256SUMS` | `sha256sum -c` format, every other file |
//! | `debs/` | capstan's `.deb`, the closure of its dependencies, and the `Packages`/`Release` index of a flat apt repository |
//! | `ramdisk/` | the provisioning ramdisk (`capstan ramdisk build`) |
//! | `images/` | node OS images, each with a `.sha256sum` beside it for an image URL's checksum |
//! | `crds/` | the CustomResourceDefinitions of `capstan crds` (for `capstan controllers` on a real management cluster) |
//! | `manifests/` | manifests the clusters take as files, e.g. the Cilium manifest of a cluster spec |
//!
//! [`create`] writes one ([`create::BundleSpec`]), [`install`] verifies one and puts its parts
//! where `capstan serve` finds them (the data directory's `ramdisk/` and `images/`). Starting the
//! service and waiting for its API is the CLI's part (`capstan bundle install`).
//!
//! Which dependencies travel: the whole `Depends` closure of capstan's package on the build machine
//! ([`debs::closure`]). Debian marks almost nothing `required` any more (libc6 is `optional`), so
//! priorities cannot tell what every target has; a bundle therefore carries the closure whole, and
//! apt installs from it only what the target lacks.

pub mod create;
pub mod debs;
pub mod install;
pub mod manifest;

pub use create::{BundleSpec, create};
pub use install::{InstallOptions, Installed, install};
pub use manifest::Manifest;

use std::path::{Path, PathBuf};

/// Why a bundle could not be made, read or installed.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A tool that failed, a Debian package that could not be fetched, a ramdisk that is not built.
    #[error(transparent)]
    Tool(#[from] capstan_ramdisk::RamdiskError),
    #[error("{0}")]
    Input(String),
    #[error(
        "{} is not a capstan bundle: {why} (make one with `capstan bundle create`)",
        path.display()
    )]
    NotABundle { path: PathBuf, why: String },
    #[error(
        "{file} in the bundle does not match SHA256SUMS (expected {expected}, found {found}): the copy is damaged; copy the bundle again"
    )]
    Checksum {
        file: String,
        expected: String,
        found: String,
    },
    #[error("reading {}'s manifest.json", path.display())]
    Manifest {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BundleError {
    let path = path.to_owned();
    move |source| BundleError::Io { what, path, source }
}

/// Runs a tool (apt-cache, dpkg-deb, chown) the way every capstan builder does.
pub(crate) fn run(command: &mut std::process::Command) -> Result<String, BundleError> {
    Ok(capstan_ramdisk::run(command)?)
}

/// The sha256 of a file, in hex, read in pieces (images are gigabytes).
pub(crate) fn sha256_file(path: &Path) -> Result<(String, u64), BundleError> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(io("reading", path))?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(io("reading", path))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buffer[..n]);
    }
    Ok((hex(&hasher.finalize()), total))
}

/// The sha256 of bytes in memory, in hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
