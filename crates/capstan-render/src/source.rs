//! Reading the spec file: YAML to [`Spec`], with the `file:line` of every field kept so that later
//! checks can point at the line to fix.
//!
//! The YAML is parsed by `capstan_manifest` (which records the line of every field path), then
//! deserialised with `serde_path_to_error`, whose error path is mapped back to a line.

use std::path::Path;

use capstan_manifest::LoadedObject;
use capstan_model::path::FieldPath;

use crate::error::{Problem, RenderError};
use crate::spec::Spec;

/// Where a spec came from: its file name and the line of each field. Empty for specs built in code,
/// whose messages then name fields without a `file:line`.
#[derive(Clone, Default)]
pub struct Source {
    document: Option<LoadedObject>,
}

impl std::fmt::Debug for Source {
    // The document holds the spec as read, BMC passwords included; only its name is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("file", &self.file())
            .finish()
    }
}

impl Source {
    /// `file:line` of a field, or `None` for a spec built in code.
    pub fn location(&self, path: &FieldPath) -> Option<String> {
        self.document.as_ref().map(|doc| doc.location(path))
    }

    /// The spec file's display name, when read from a file.
    pub fn file(&self) -> Option<&str> {
        self.document.as_ref().map(|doc| doc.origin.file.as_str())
    }

    /// A problem at `path` of the spec.
    pub(crate) fn problem(&self, path: &FieldPath, message: impl Into<String>) -> Problem {
        Problem {
            location: self.location(path),
            field: (!path.is_root()).then(|| path.to_string()),
            message: message.into(),
        }
    }
}

/// Reads and parses a spec file.
///
/// # Errors
/// [`RenderError::Read`] when the file cannot be read, [`RenderError::Syntax`] for invalid YAML,
/// [`RenderError::Invalid`] when the YAML does not have the shape of a spec (unknown field, wrong
/// type, missing field), naming the file, line and field.
pub fn load_spec(path: &Path) -> Result<Spec, RenderError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| RenderError::Read {
        file: name.clone(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| RenderError::NotText { file: name.clone() })?;
    parse_spec(&name, &text)
}

/// Parses spec text; `name` is the file name used in messages.
///
/// # Errors
/// As [`load_spec`], without the read errors.
pub fn parse_spec(name: &str, text: &str) -> Result<Spec, RenderError> {
    let documents: Vec<LoadedObject> = capstan_manifest::parse_documents(name, text)?
        .into_iter()
        .filter(|doc| !doc.value.is_null())
        .collect();
    let mut documents = documents.into_iter();
    let Some(document) = documents.next() else {
        return Err(RenderError::NotASpec {
            file: name.to_owned(),
            problem: "is empty".to_owned(),
        });
    };
    if let Some(extra) = documents.next() {
        return Err(RenderError::NotASpec {
            file: extra.origin.to_string(),
            problem: "holds a second YAML document; a spec is one document (remove the `---`)"
                .to_owned(),
        });
    }
    if !document.value.is_object() {
        return Err(RenderError::NotASpec {
            file: document.origin.to_string(),
            problem: "is not a mapping of spec fields (name, kubernetes, controlPlane, hosts, ...)"
                .to_owned(),
        });
    }
    match serde_path_to_error::deserialize::<_, Spec>(&document.value) {
        Ok(mut spec) => {
            spec.source = Source {
                document: Some(document),
            };
            Ok(spec)
        }
        Err(err) => {
            let path = field_path(err.path());
            let message = format!("{}; see docs/spec.md for the spec format", err.inner());
            let source = Source {
                document: Some(document),
            };
            Err(RenderError::Invalid {
                problems: vec![source.problem(&path, message)],
            })
        }
    }
}

/// The spec field path of a deserialisation error.
fn field_path(path: &serde_path_to_error::Path) -> FieldPath {
    use serde_path_to_error::Segment;
    path.iter()
        .fold(FieldPath::root(), |acc, segment| match segment {
            Segment::Seq { index } => acc.index(*index),
            Segment::Map { key } => acc.key(key.as_str()),
            Segment::Enum { variant } => acc.key(variant.as_str()),
            Segment::Unknown => acc,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
name: c1
kubernetes:
  version: v1.31.4
controlPlane:
  replicas: 1
  vip: 10.0.0.9
image:
  url: http://images/i.raw
  checksum: http://images/i.raw.sha256sum
cilium:
  manifest: cilium.yaml
hosts:
- name: h1
  role: control-plane
  bmc:
    address: ipmi://10.0.1.1
  network:
    links:
    - name: ens2
      mac: 52:54:00:00:00:01
    addresses:
    - link: ens2
      cidr: 10.0.0.10/24
";

    #[test]
    fn minimal_spec_reads_with_defaults() {
        let spec = parse_spec("s.yaml", MINIMAL).unwrap();
        assert_eq!(spec.namespace, "default");
        assert_eq!(spec.kubernetes.pod_cidr, "10.244.0.0/16");
        assert_eq!(spec.control_plane.port, 6443);
        assert!(spec.cilium.fix);
        assert_eq!(
            spec.source
                .location(&FieldPath::parse("hosts[0].network.links[0].mac")),
            Some("s.yaml:20".to_owned())
        );
    }

    #[test]
    fn unknown_field_names_file_line_and_path() {
        let text = MINIMAL.replace(
            "      cidr: 10.0.0.10/24",
            "      cidr: 10.0.0.10/24\n      gatway: 10.0.0.1",
        );
        let err = parse_spec("s.yaml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("s.yaml:24: hosts[0].network.addresses[0]"),
            "{err}"
        );
        assert!(err.contains("unknown field `gatway`"), "{err}");
        assert!(err.contains("gateway"), "{err}");
    }

    #[test]
    fn wrong_type_names_the_field() {
        let text = MINIMAL.replace("replicas: 1", "replicas: three");
        let err = parse_spec("s.yaml", &text).unwrap_err().to_string();
        assert!(
            err.starts_with("s.yaml:5: controlPlane.replicas: invalid type"),
            "{err}"
        );
    }

    #[test]
    fn shapes_that_are_not_specs_are_refused() {
        assert!(matches!(
            parse_spec("s.yaml", "# nothing\n"),
            Err(RenderError::NotASpec { .. })
        ));
        assert!(matches!(
            parse_spec("s.yaml", "- a\n- b\n"),
            Err(RenderError::NotASpec { .. })
        ));
        let two = format!("{MINIMAL}---\nname: x\n");
        let err = parse_spec("s.yaml", &two).unwrap_err().to_string();
        assert!(err.contains("second YAML document"), "{err}");
        assert!(matches!(
            parse_spec("s.yaml", "name: [unclosed\n"),
            Err(RenderError::Syntax(_))
        ));
    }
}
