//! Documents embedded in string fields: a static pod in a KubeadmConfigSpec's `files[].content`, a
//! rendered Cilium manifest in a ConfigMap's `data`, network_data.json in a Secret.
//!
//! Embedded text is parsed with the manifest loader, so an embedded object has its own field lines,
//! counted from the start of the text. When the text was written as a block scalar (`content: |`),
//! its first line is the line after the key, and a finding inside it is reported at its real line in
//! the file; otherwise (quoted or base64 text, JSON files) at the line of the field.

use base64::Engine as _;
use capstan_manifest::LoadedObject;
use capstan_model::path::FieldPath;
use serde_json::Value;

use crate::diagnostic::{Location, path_text};

/// One document parsed out of a string field of a top-level object.
#[derive(Debug)]
pub(crate) struct EmbeddedDoc<'a> {
    /// The top-level object that holds the text.
    pub host: &'a LoadedObject,
    /// The string field holding the text.
    pub field: FieldPath,
    /// The file line of the text's first line, when the text is a block scalar in the file.
    pub first_line: Option<u32>,
    /// The parsed document; its lines count from the start of the text.
    pub doc: LoadedObject,
}

impl EmbeddedDoc<'_> {
    /// Where `inner` (a path in the embedded document) is in the file.
    pub fn at(&self, inner: &FieldPath) -> Location {
        let mut location = Location::of(self.host, &self.field);
        if let Some(first) = self.first_line {
            location.line = first.saturating_add(self.doc.line_of(inner).saturating_sub(1));
        }
        if !inner.is_root() {
            location.embedded_path = Some(path_text(inner));
        }
        location
    }

    /// The embedded document's `kind`.
    pub fn kind(&self) -> &str {
        self.doc
            .value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// How the text of a field is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// As written.
    Plain,
    /// Base64 (`files[].encoding: base64`, Secret `data`).
    Base64,
}

/// The text of a field, decoded. `None` when the field is not a string, or is not valid base64 or
/// UTF-8, or is compressed (lint does not inflate gzip).
pub(crate) fn field_text(
    host: &LoadedObject,
    field: &FieldPath,
    encoding: Encoding,
) -> Option<String> {
    let raw = field.lookup(&host.value)?.as_str()?;
    match encoding {
        Encoding::Plain => Some(raw.to_owned()),
        Encoding::Base64 => {
            let compact: String = raw.split_whitespace().collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
    }
}

/// Why the text of a field could not be read as documents.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EmbeddedError {
    /// The field is missing, not a string, or not valid base64/UTF-8.
    #[error("the field is not readable text")]
    NotText,
    /// The text is not YAML (or JSON).
    #[error("{0}")]
    Syntax(String),
}

/// The mapping documents of the YAML (or JSON) text in `field` of `host`.
pub(crate) fn parse<'a>(
    host: &'a LoadedObject,
    field: &FieldPath,
    encoding: Encoding,
) -> Result<Vec<EmbeddedDoc<'a>>, EmbeddedError> {
    let text = field_text(host, field, encoding).ok_or(EmbeddedError::NotText)?;
    let name = format!("{}#{}", host.origin.file, path_text(field));
    let docs = capstan_manifest::parse_documents(&name, &text)
        .map_err(|e| EmbeddedError::Syntax(e.to_string()))?;
    let first_line = match encoding {
        Encoding::Plain => block_scalar_first_line(host, field, &text),
        Encoding::Base64 => None,
    };
    Ok(docs
        .into_iter()
        .filter(|d| d.value.is_object())
        .map(|doc| EmbeddedDoc {
            host,
            field: field.clone(),
            first_line,
            doc,
        })
        .collect())
}

/// The mapping documents of the YAML (or JSON) text in `field` of `host`; text that is not YAML
/// (a shell script, say) yields nothing.
pub(crate) fn documents<'a>(
    host: &'a LoadedObject,
    field: &FieldPath,
    encoding: Encoding,
) -> Vec<EmbeddedDoc<'a>> {
    parse(host, field, encoding).unwrap_or_default()
}

/// The file line of the first line of the text in `field`, if the text is a block scalar (`|`).
///
/// A block scalar starts on the line after its key and occupies one file line per text line. The
/// text is taken as one when it has several lines, the file is not JSON, and no other field of the
/// object starts on the lines the text would occupy (a quoted multi-line string takes fewer lines,
/// so a following field would start inside that range).
fn block_scalar_first_line(host: &LoadedObject, field: &FieldPath, text: &str) -> Option<u32> {
    if !text.contains('\n') || host.origin.file.ends_with(".json") {
        return None;
    }
    let key_line = host.line_of(field);
    let lines = u32::try_from(text.lines().count()).ok()?;
    let occupied = key_line.saturating_add(1)..=key_line.saturating_add(lines);
    let mut clash = false;
    walk(&host.value, &mut FieldPath::root(), &mut |path| {
        if path != field && occupied.contains(&host.line_of(path)) {
            clash = true;
        }
    });
    (!clash).then_some(key_line.saturating_add(1))
}

/// Calls `visit` with the path of every node below `value`.
fn walk(value: &Value, path: &mut FieldPath, visit: &mut impl FnMut(&FieldPath)) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = path.key(key.clone());
                visit(&child_path);
                walk(child, &mut child_path.clone(), visit);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let child_path = path.index(i);
                visit(&child_path);
                walk(child, &mut child_path.clone(), visit);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::load;

    const KCP: &str = "apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: a
spec:
  kubeadmConfigSpec:
    files:
    - path: /etc/kubernetes/manifests/kube-vip.yaml
      content: |
        apiVersion: v1
        kind: Pod
        metadata:
          name: kube-vip
        spec:
          containers:
          - name: kube-vip
      owner: root:root
    - path: /x
      content: \"apiVersion: v1\\nkind: Pod\\nmetadata:\\n  name: q\\n\"
      owner: root:root
";

    #[test]
    fn block_scalars_map_to_file_lines() {
        let objects = load(KCP);
        let host = &objects[0];
        let field = FieldPath::parse("spec.kubeadmConfigSpec.files[0].content");
        let docs = documents(host, &field, Encoding::Plain);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].kind(), "Pod");
        assert_eq!(docs[0].first_line, Some(10));
        let at = docs[0].at(&FieldPath::parse("spec.containers[0].name"));
        assert_eq!(at.line, 16);
        assert_eq!(at.embedded_path.as_deref(), Some("spec.containers[0].name"));
        assert_eq!(at.path, "spec.kubeadmConfigSpec.files[0].content");
    }

    #[test]
    fn quoted_text_points_at_the_field() {
        let objects = load(KCP);
        let field = FieldPath::parse("spec.kubeadmConfigSpec.files[1].content");
        let docs = documents(&objects[0], &field, Encoding::Plain);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].first_line, None);
        assert_eq!(docs[0].at(&FieldPath::parse("metadata.name")).line, 19);
    }

    #[test]
    fn base64_and_garbage() {
        let objects = load(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  a: YXBpVmVyc2lvbjogdjEKa2luZDogUG9kCg==\n  b: '!!!'\n  c: 'key: [unclosed'\n",
        );
        let host = &objects[0];
        let docs = documents(host, &FieldPath::parse("data.a"), Encoding::Base64);
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].kind(), "Pod");
        assert!(documents(host, &FieldPath::parse("data.b"), Encoding::Base64).is_empty());
        assert!(documents(host, &FieldPath::parse("data.c"), Encoding::Plain).is_empty());
        assert!(documents(host, &FieldPath::parse("data.none"), Encoding::Plain).is_empty());
    }
}
