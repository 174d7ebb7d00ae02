//! Manifest files: YAML documents loaded with file:line positions, object identity, canonical YAML
//! output.
//!
//! - [`load_str`], [`load_path`], [`load_paths`] read multi-document YAML or JSON into
//!   [`LoadedObject`]s: a `serde_json::Value` (mapping order kept), its [`Origin`] and the line of
//!   every field, so that any [`FieldPath`](capstan_model::path::FieldPath) can be reported as
//!   `file:line` ([`LoadedObject::location`]). `List` documents are flattened, anchors, aliases and
//!   merge keys resolved, duplicate keys rejected.
//! - [`ObjectId`] and [`ObjectKey`] name objects; [`ObjectSet`] indexes a load by identity and
//!   rejects duplicates, naming both locations.
//! - [`to_yaml_documents`] writes values back as deterministic, readable YAML that this crate
//!   (and YAML 1.1 parsers) read back as the same values.
//! - [`rewrite_stream`] edits a YAML stream so that chosen documents read as new values while the
//!   text of every unchanged part (comments, blank lines, quoting, key order) stays as it was.
//!
//! Scalars are typed per the YAML 1.2 core schema: `0644` is the integer 644 and `yes` is a
//! string, unlike YAML 1.1 tools. Quote values such as file modes to keep them strings.
//!
//! No input makes this crate panic: malformed text, hostile nesting and alias bombs all end as
//! [`ManifestError`]s.

mod edit;
mod emit;
mod error;
mod load;
mod object;
mod parse;
mod set;

pub use edit::{Rewrite, rewrite_stream};
pub use emit::{to_yaml, to_yaml_documents};
pub use error::ManifestError;
pub use load::{
    STDIN_NAME, load_path, load_paths, load_str, parse_documents, parse_documents_bounded,
};
pub use object::{LoadedObject, ObjectId, ObjectKey, Origin, split_api_version};
pub use parse::{MAX_DEPTH, MAX_NODES};
pub use set::ObjectSet;

#[cfg(test)]
mod robustness_tests {
    //! Arbitrary and mangled input must give `Ok` or `Err`, never a panic.

    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "\
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: &m
  name: capi-1
  labels: {a: b, 'c': \"d\"}
spec:
  list:
  - a
  - <<: *m
    x: |
      line
  flow: [1, 2.5, ~, true]
---
apiVersion: v1
kind: List
items: [{apiVersion: v1, kind: Secret, metadata: {name: s}}]
";

    fn mangle(text: &str, edits: &[(usize, u8)]) -> String {
        let mut bytes = text.as_bytes().to_vec();
        for &(position, byte) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = position % bytes.len();
            match byte % 3 {
                0 => bytes[i] = byte,
                1 => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, byte),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn arbitrary_bytes_do_not_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = load_str("fuzz", &text);
        }

        #[test]
        fn yaml_like_text_does_not_panic(text in "[a-z:\\-\\[\\]{}&*!|>'\" \n\t#?,.~<%@0-9]{0,120}") {
            let _ = load_str("fuzz", &text);
            let _ = parse_documents("fuzz", &text);
        }

        #[test]
        fn mangled_manifests_do_not_panic(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let text = mangle(SAMPLE, &edits);
            if let Ok(objects) = load_str("fuzz", &text) {
                for object in &objects {
                    let _ = object.id();
                }
                let _ = ObjectSet::new(objects);
            }
        }
    }

    #[test]
    fn sample_loads() {
        let objects = load_str("sample.yaml", SAMPLE).expect("loads");
        assert_eq!(objects.len(), 2);
        assert_eq!(
            objects[0].value["spec"]["list"][1]["name"],
            serde_json::json!("capi-1")
        );
        assert_eq!(objects[1].origin.to_string(), "sample.yaml:16");
    }
}
