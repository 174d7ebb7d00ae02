//! Stamps the binary with the commit it was built from, so that `capstan --version` (and a bug
//! report quoting it) names the exact source.
//!
//! The commit comes from `CAPSTAN_BUILD_COMMIT` when set (a build from a source tarball, or a
//! packager who knows better), else from `git rev-parse` in the checkout, else `unknown`. A tree
//! with uncommitted changes is not detected: that would mean running git on every build, and the
//! stamp names the commit the build started from.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CAPSTAN_BUILD_COMMIT");
    let manifest_dir =
        std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    let commit = std::env::var("CAPSTAN_BUILD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuild when HEAD moves: HEAD itself (a checkout) and the ref it points at (a commit).
            if let Some(git_dir) = git(&manifest_dir, &["rev-parse", "--absolute-git-dir"]) {
                let git_dir = PathBuf::from(git_dir);
                let mut watched = vec![git_dir.join("HEAD"), git_dir.join("packed-refs")];
                if let Some(head_ref) = git(&manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
                    watched.push(git_dir.join(head_ref));
                }
                // Only files that exist: cargo reruns a build script on every build while a
                // watched path is missing, which would recompile this crate each time.
                for path in watched.iter().filter(|p| p.exists()) {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
            let hash = git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"])?;
            let date = git(&manifest_dir, &["show", "-s", "--format=%cs", "HEAD"]);
            Some(match date {
                Some(date) => format!("{hash} {date}"),
                None => hash,
            })
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CAPSTAN_BUILD_COMMIT={commit}");
}
