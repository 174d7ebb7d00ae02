//! Loading manifest objects from text, files, directories and standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

use capstan_model::path::{FieldPath, PathSegment};
use serde_json::Value;

use crate::error::ManifestError;
use crate::object::{LoadedObject, Origin};
use crate::parse::{ParsedDocument, Positions, parse_stream, parse_stream_bounded};

/// The display name used for standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// File extensions taken when walking a directory.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// Every document of a YAML stream as it is, one [`LoadedObject`] per document: no checks on
/// the shape, empty documents included as `null`, lists not flattened. For manifests use
/// [`load_str`].
///
/// # Errors
/// Invalid YAML, duplicate keys, non-scalar keys, scalars without a JSON form, excessive nesting
/// or alias expansion.
pub fn parse_documents(name: &str, text: &str) -> Result<Vec<LoadedObject>, ManifestError> {
    Ok(parse_stream(name, text)?
        .into_iter()
        .map(|doc| {
            let origin = Origin {
                file: name.to_owned(),
                document: doc.index,
                line: doc.line,
            };
            LoadedObject::with_positions(doc.value, origin, doc.positions)
        })
        .collect())
}

/// [`parse_documents`] with a bound on the nodes the text may expand to, aliases included (for
/// untrusted input, such as request bodies: an alias bomb fails fast and small).
///
/// # Errors
/// Everything [`parse_documents`] rejects, and [`ManifestError::TooLarge`] beyond `max_nodes`.
pub fn parse_documents_bounded(
    name: &str,
    text: &str,
    max_nodes: usize,
) -> Result<Vec<LoadedObject>, ManifestError> {
    Ok(parse_stream_bounded(name, text, max_nodes)?
        .into_iter()
        .map(|doc| {
            let origin = Origin {
                file: name.to_owned(),
                document: doc.index,
                line: doc.line,
            };
            LoadedObject::with_positions(doc.value, origin, doc.positions)
        })
        .collect())
}

/// The objects of a multi-document YAML (or JSON) text.
///
/// Empty documents and documents holding only comments are skipped. A `List` document (any kind
/// ending in `List` with an `items` sequence, as `kubectl get -o yaml` prints) stands for its
/// items. Every object must be a mapping with string `apiVersion` and `kind`.
///
/// `name` is the display name used in origins and errors (a path, or `<stdin>`).
///
/// # Errors
/// Everything [`parse_documents`] rejects, plus documents that are not mappings or lack
/// `apiVersion`/`kind`.
pub fn load_str(name: &str, text: &str) -> Result<Vec<LoadedObject>, ManifestError> {
    let mut objects = Vec::new();
    for doc in parse_stream(name, text)? {
        if doc.value.is_null() {
            continue;
        }
        if is_list(&doc.value) {
            flatten_list(name, doc, &mut objects)?;
        } else {
            let origin = Origin {
                file: name.to_owned(),
                document: doc.index,
                line: doc.line,
            };
            objects.push(checked(LoadedObject::with_positions(
                doc.value,
                origin,
                doc.positions,
            ))?);
        }
    }
    Ok(objects)
}

fn is_list(value: &Value) -> bool {
    let kind_is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|kind| kind.ends_with("List"));
    let items_are_a_list = matches!(value.get("items"), Some(Value::Array(_) | Value::Null));
    kind_is_list && items_are_a_list
}

fn flatten_list(
    name: &str,
    doc: ParsedDocument,
    objects: &mut Vec<LoadedObject>,
) -> Result<(), ManifestError> {
    let ParsedDocument {
        value,
        index,
        positions,
        line,
    } = doc;
    let items = match value {
        Value::Object(mut map) => match map.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut per_item: Vec<Positions> = vec![Positions::new(); items.len()];
    for (path, item_line) in positions {
        if let [
            PathSegment::Key(items_key),
            PathSegment::Index(i),
            rest @ ..,
        ] = path.segments()
            && items_key == "items"
            && let Some(item_positions) = per_item.get_mut(*i)
        {
            item_positions.insert(path_from(rest), item_line);
        }
    }
    for (item, item_positions) in items.into_iter().zip(per_item) {
        let item_line = item_positions
            .get(&FieldPath::root())
            .copied()
            .unwrap_or(line);
        let origin = Origin {
            file: name.to_owned(),
            document: index,
            line: item_line,
        };
        objects.push(checked(LoadedObject::with_positions(
            item,
            origin,
            item_positions,
        ))?);
    }
    Ok(())
}

fn path_from(segments: &[PathSegment]) -> FieldPath {
    segments
        .iter()
        .fold(FieldPath::root(), |path, segment| match segment {
            PathSegment::Key(key) => path.key(key.as_str()),
            PathSegment::Index(i) => path.index(*i),
        })
}

/// Requires a mapping with string `apiVersion` and `kind`.
fn checked(object: LoadedObject) -> Result<LoadedObject, ManifestError> {
    let found = match &object.value {
        Value::Object(_) => None,
        Value::Array(_) => Some("sequence"),
        Value::String(_) => Some("string"),
        Value::Number(_) => Some("number"),
        Value::Bool(_) => Some("boolean"),
        Value::Null => Some("null"),
    };
    if let Some(found) = found {
        return Err(ManifestError::NotAMapping {
            file: object.origin.file,
            line: object.origin.line,
            found,
        });
    }
    for field in ["apiVersion", "kind"] {
        let usable = matches!(object.value.get(field), Some(Value::String(s)) if !s.is_empty());
        if !usable {
            return Err(ManifestError::MissingTypeField {
                file: object.origin.file.clone(),
                line: object.line_of(&FieldPath::root().key(field)),
                field,
            });
        }
    }
    Ok(object)
}

/// The objects of a file, of every `*.yaml`/`*.yml`/`*.json` file below a directory (walked
/// recursively in name order, hidden entries skipped, symbolic links to directories not
/// followed), or of standard input when the path is `-`.
///
/// # Errors
/// Unreadable paths, non-UTF-8 files, and everything [`load_str`] rejects.
pub fn load_path(path: &Path) -> Result<Vec<LoadedObject>, ManifestError> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|source| ManifestError::Read {
                file: STDIN_NAME.to_owned(),
                source,
            })?;
        return load_str(STDIN_NAME, &text);
    }
    let metadata = std::fs::metadata(path).map_err(|source| read_error(path, source))?;
    if !metadata.is_dir() {
        return load_file(path);
    }
    let mut files = Vec::new();
    collect_manifest_files(path, &mut files)?;
    let mut objects = Vec::new();
    for file in files {
        objects.extend(load_file(&file)?);
    }
    Ok(objects)
}

/// [`load_path`] for each path in turn, objects in argument order.
///
/// # Errors
/// The first error of any path.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<LoadedObject>, ManifestError> {
    let mut objects = Vec::new();
    for path in paths {
        objects.extend(load_path(path)?);
    }
    Ok(objects)
}

fn read_error(path: &Path, source: std::io::Error) -> ManifestError {
    ManifestError::Read {
        file: path.display().to_string(),
        source,
    }
}

fn load_file(path: &Path) -> Result<Vec<LoadedObject>, ManifestError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| read_error(path, source))?;
    let text =
        String::from_utf8(bytes).map_err(|_| ManifestError::NotUtf8 { file: name.clone() })?;
    load_str(&name, &text)
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}

fn collect_manifest_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|source| read_error(dir, source))? {
        let entry = entry.map_err(|source| read_error(dir, source))?;
        entries.push(entry);
    }
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        if is_hidden(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        let file_type = entry
            .file_type()
            .map_err(|source| read_error(&path, source))?;
        if file_type.is_dir() {
            collect_manifest_files(&path, files)?;
            continue;
        }
        let is_manifest = path
            .extension()
            .and_then(|ext| ext.to_str())
            .is_some_and(|ext| MANIFEST_EXTENSIONS.contains(&ext));
        // A symbolic link is taken if it leads to a file; links to directories are not followed
        // so that link cycles cannot recurse forever.
        let is_file = file_type.is_file() || (file_type.is_symlink() && path.is_file());
        if is_manifest && is_file {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn multi_document_text_skips_empty_documents() {
        let objects = load_str(
            "m.yaml",
            "# header\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# nothing\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n",
        )
        .expect("loads");
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].origin.to_string(), "m.yaml:3");
        assert_eq!(objects[1].origin.to_string(), "m.yaml:10");
        assert_eq!(objects[1].origin.document, 2);
        assert_eq!(
            objects[1].location(&FieldPath::parse("metadata.name")),
            "m.yaml:13"
        );
    }

    #[test]
    fn lists_are_flattened_with_item_lines() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: a\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: b\n  data:\n    x: y\nmetadata:\n  resourceVersion: \"\"\n";
        let objects = load_str("l.yaml", text).expect("loads");
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].origin.line, 4);
        assert_eq!(objects[1].origin.line, 8);
        assert_eq!(objects[1].line_of(&FieldPath::parse("data.x")), 13);
        assert_eq!(objects[1].line_of(&FieldPath::parse("metadata.name")), 11);
        assert_eq!(objects[1].value["metadata"]["name"], json!("b"));

        let typed = "apiVersion: cluster.x-k8s.io/v1beta1\nkind: ClusterList\nitems: []\n";
        assert!(load_str("l.yaml", typed).expect("loads").is_empty());
    }

    #[test]
    fn non_mappings_and_missing_type_fields_are_errors() {
        let err =
            load_str("x.yaml", "apiVersion: v1\nkind: A\n---\n- 1\n- 2\n").expect_err("sequence");
        assert!(
            err.to_string()
                .starts_with("x.yaml:4: a manifest document must be a mapping"),
            "{err}"
        );
        let err = load_str("x.yaml", "\n\napiVersion: v1\nmetadata: {}\n").expect_err("no kind");
        assert!(
            err.to_string()
                .starts_with("x.yaml:3: object has no usable `kind`"),
            "{err}"
        );
        let err = load_str("x.yaml", "apiVersion: v1\nkind: 5\n").expect_err("numeric kind");
        assert!(err.to_string().starts_with("x.yaml:2:"), "{err}");
        let err =
            load_str("x.yaml", "apiVersion: v1\nkind: List\nitems:\n- 3\n").expect_err("item");
        assert!(err.to_string().starts_with("x.yaml:4:"), "{err}");
    }

    #[test]
    fn directories_are_walked_in_order_skipping_hidden_and_other_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let doc =
            |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
        std::fs::create_dir_all(dir.path().join("b/sub")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join(".hidden")).expect("mkdir");
        std::fs::write(dir.path().join("b/sub/c.yml"), doc("c")).expect("write");
        std::fs::write(dir.path().join("a.yaml"), doc("a")).expect("write");
        std::fs::write(
            dir.path().join("b/b.json"),
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}"#,
        )
        .expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not yaml: [").expect("write");
        std::fs::write(dir.path().join(".hidden/h.yaml"), doc("h")).expect("write");
        std::fs::write(dir.path().join(".dot.yaml"), doc("d")).expect("write");

        let objects = load_path(dir.path()).expect("loads");
        let names: Vec<_> = objects
            .iter()
            .map(|o| {
                o.value["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(objects[2].origin.file.ends_with("c.yml"));

        let both = load_paths(&[dir.path().join("b"), dir.path().join("a.yaml")]).expect("loads");
        assert_eq!(both.len(), 3);
        assert!(matches!(
            load_path(&dir.path().join("missing.yaml")),
            Err(ManifestError::Read { .. })
        ));
        std::fs::write(dir.path().join("bad.yaml"), [0xff, 0xfe, 0x00]).expect("write");
        assert!(matches!(
            load_path(&dir.path().join("bad.yaml")),
            Err(ManifestError::NotUtf8 { .. })
        ));
    }

    #[test]
    fn parse_documents_keeps_every_document() {
        let docs = parse_documents("p", "1\n---\n---\n[a]\n").expect("parses");
        let values: Vec<_> = docs.iter().map(|d| d.value.clone()).collect();
        assert_eq!(values, [json!(1), Value::Null, json!(["a"])]);
    }
}
