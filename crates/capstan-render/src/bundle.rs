//! The rendered bundle and writing it to disk all at once.
//!
//! [`write_bundle`] writes every file into a fresh directory next to the output directory, then
//! swaps it into place with renames, so the output directory is either the old bundle or the new
//! one, never a mix. A marker file (`.capstan-bundle`) lists what capstan wrote; an existing output
//! directory is replaced only when it is empty or everything in it is listed in its marker, and is
//! otherwise left alone with an error naming the foreign files.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::error::RenderError;

/// Name of the marker file listing the files capstan wrote into a bundle directory.
pub const MARKER_FILE: &str = ".capstan-bundle";

/// First line of the marker file.
const MARKER_HEADER: &str =
    "# Files written by capstan render; the directory is replaced as a whole on the next render.";

/// Foreign entries named in an error, at most.
const FOREIGN_SHOWN: usize = 5;

/// A rendered bundle: every file, plus what to tell the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The files, sorted by path.
    pub files: Vec<BundleFile>,
    /// Warnings about the spec and one line per fix applied to the Cilium manifest.
    pub notices: Vec<String>,
    /// The `cilium install … --dry-run > MANIFEST` command that renders a Cilium manifest this
    /// cluster accepts as is.
    pub cilium_install_command: String,
    /// The same Cilium settings as Helm values (YAML).
    pub cilium_helm_values: String,
}

impl Bundle {
    /// The file at `path`, if any.
    pub fn file(&self, path: &str) -> Option<&BundleFile> {
        self.files.iter().find(|f| f.path == Path::new(path))
    }
}

/// One file of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleFile {
    /// Path relative to the bundle directory, `/`-separated, never absolute or with `..`.
    pub path: PathBuf,
    /// The file's text.
    pub contents: String,
    /// Whether it holds credentials; such files are written with mode 0600.
    pub secret: bool,
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> RenderError + '_ {
    move |source| RenderError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bundle` to `out_dir`, replacing a previous bundle there.
///
/// `out_dir` may not exist (it is created, with missing parents), may be empty, or may hold a
/// previous bundle (every entry listed in its `.capstan-bundle` marker). Anything else in it makes
/// this refuse without touching it. On any error, `out_dir` is left as it was.
///
/// # Errors
/// [`RenderError::ForeignOutput`] when `out_dir` holds files capstan did not write,
/// [`RenderError::Write`] when writing or moving fails.
pub fn write_bundle(bundle: &Bundle, out_dir: &Path) -> Result<(), RenderError> {
    for file in &bundle.files {
        if !is_relative_inside(&file.path) {
            return Err(RenderError::Write {
                path: file.path.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "bundle paths are relative and stay inside the bundle",
                ),
            });
        }
    }
    let existing = check_existing(out_dir)?;
    let parent = match out_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(write_error(&parent))?;
    let staging = tempfile::Builder::new()
        .prefix(".capstan-render-")
        .tempdir_in(&parent)
        .map_err(write_error(&parent))?;
    write_files(bundle, staging.path())?;

    if existing {
        // Move the old bundle aside, move the new one in, then delete the old one; if the second
        // move fails, the old bundle goes back.
        let old = tempfile::Builder::new()
            .prefix(".capstan-old-")
            .tempdir_in(&parent)
            .map_err(write_error(&parent))?;
        let aside = old.path().join("bundle");
        fs::rename(out_dir, &aside).map_err(write_error(out_dir))?;
        if let Err(source) = fs::rename(staging.path(), out_dir) {
            // Best effort: the error reported is the failed move of the new bundle.
            let _ = fs::rename(&aside, out_dir);
            return Err(RenderError::Write {
                path: out_dir.to_path_buf(),
                source,
            });
        }
        // `old` is removed on drop, with the previous bundle in it.
        drop(old);
    } else {
        fs::rename(staging.path(), out_dir).map_err(write_error(out_dir))?;
    }
    // The staging directory now is `out_dir`; keep it from being deleted.
    let _ = staging.keep();
    Ok(())
}

/// Whether a bundle path is relative and stays inside the bundle.
fn is_relative_inside(path: &Path) -> bool {
    !path.as_os_str().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Whether `out_dir` exists (and may be replaced); refuses foreign content.
fn check_existing(out_dir: &Path) -> Result<bool, RenderError> {
    let metadata = match fs::symlink_metadata(out_dir) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(write_error(out_dir)(err)),
    };
    if !metadata.is_dir() {
        return Err(RenderError::ForeignOutput {
            dir: out_dir.to_path_buf(),
            foreign: vec![if metadata.is_symlink() {
                "it is a symbolic link, not a directory".to_owned()
            } else {
                "it is a file, not a directory".to_owned()
            }],
        });
    }
    let listed: BTreeSet<String> = match fs::read_to_string(out_dir.join(MARKER_FILE)) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect(),
        Err(_) => BTreeSet::new(),
    };
    let mut foreign = Vec::new();
    collect_foreign(out_dir, out_dir, &listed, &mut foreign)?;
    if foreign.is_empty() {
        Ok(true)
    } else {
        foreign.sort();
        foreign.truncate(FOREIGN_SHOWN);
        Err(RenderError::ForeignOutput {
            dir: out_dir.to_path_buf(),
            foreign,
        })
    }
}

/// Collects entries below `dir` that are neither listed files, directories leading to listed
/// files, nor the marker.
fn collect_foreign(
    root: &Path,
    dir: &Path,
    listed: &BTreeSet<String>,
    foreign: &mut Vec<String>,
) -> Result<(), RenderError> {
    for entry in fs::read_dir(dir).map_err(write_error(dir))? {
        let entry = entry.map_err(write_error(dir))?;
        let path = entry.path();
        let relative = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        let file_type = entry.file_type().map_err(write_error(&path))?;
        if file_type.is_dir() {
            let prefix = format!("{relative}/");
            if listed.iter().any(|l| l.starts_with(&prefix)) {
                collect_foreign(root, &path, listed, foreign)?;
            } else {
                foreign.push(format!("{relative}/"));
            }
        } else if relative != MARKER_FILE && !listed.contains(&relative) {
            foreign.push(relative);
        }
    }
    Ok(())
}

fn write_files(bundle: &Bundle, dir: &Path) -> Result<(), RenderError> {
    let mut marker = format!("{MARKER_HEADER}\n");
    for file in &bundle.files {
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(write_error(parent))?;
        }
        write_file(&path, &file.contents, file.secret)?;
        marker.push_str(&file.path.to_string_lossy().replace('\\', "/"));
        marker.push('\n');
    }
    write_file(&dir.join(MARKER_FILE), &marker, false)
}

fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), RenderError> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(path).map_err(write_error(path))?;
    file.write_all(contents.as_bytes())
        .map_err(write_error(path))?;
    file.sync_all().map_err(write_error(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str, bool)]) -> Bundle {
        Bundle {
            files: files
                .iter()
                .map(|(p, c, s)| BundleFile {
                    path: PathBuf::from(p),
                    contents: (*c).to_owned(),
                    secret: *s,
                })
                .collect(),
            notices: Vec::new(),
            cilium_install_command: String::new(),
            cilium_helm_values: String::new(),
        }
    }

    #[test]
    fn writes_then_replaces_its_own_bundle() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out/nested");
        write_bundle(
            &bundle(&[("a/x.yaml", "x", false), ("s.yaml", "secret", true)]),
            &out,
        )
        .unwrap();
        assert_eq!(fs::read_to_string(out.join("a/x.yaml")).unwrap(), "x");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(out.join("s.yaml"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        write_bundle(&bundle(&[("b.yaml", "b", false)]), &out).unwrap();
        assert!(!out.join("a/x.yaml").exists());
        assert_eq!(fs::read_to_string(out.join("b.yaml")).unwrap(), "b");
        // Nothing is left behind next to the output directory.
        let siblings: Vec<_> = fs::read_dir(out.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(siblings, vec![std::ffi::OsString::from("nested")]);
    }

    #[test]
    fn refuses_directories_with_foreign_files() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        fs::create_dir_all(out.join("keep")).unwrap();
        fs::write(out.join("keep/mine.txt"), "mine").unwrap();
        let err = write_bundle(&bundle(&[("a.yaml", "a", false)]), &out).unwrap_err();
        assert!(matches!(err, RenderError::ForeignOutput { .. }), "{err}");
        assert!(err.to_string().contains("keep/"), "{err}");
        assert_eq!(
            fs::read_to_string(out.join("keep/mine.txt")).unwrap(),
            "mine"
        );

        // A file added to a previous bundle is foreign too.
        let out2 = tmp.path().join("out2");
        write_bundle(&bundle(&[("a/b.yaml", "a", false)]), &out2).unwrap();
        fs::write(out2.join("a/notes.txt"), "n").unwrap();
        let err = write_bundle(&bundle(&[("a/b.yaml", "a", false)]), &out2).unwrap_err();
        assert!(err.to_string().contains("a/notes.txt"), "{err}");
    }

    #[test]
    fn empty_directories_are_used_and_files_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("empty");
        fs::create_dir(&out).unwrap();
        write_bundle(&bundle(&[("a.yaml", "a", false)]), &out).unwrap();
        assert!(out.join(MARKER_FILE).exists());
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(write_bundle(&bundle(&[("a.yaml", "a", false)]), &file).is_err());
    }

    #[test]
    fn escaping_paths_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["../x.yaml", "/etc/x.yaml", ""] {
            let err = write_bundle(&bundle(&[(bad, "x", false)]), &tmp.path().join("o"));
            assert!(err.is_err(), "{bad}");
        }
        assert!(!tmp.path().join("o").exists());
    }
}
