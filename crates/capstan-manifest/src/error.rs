//! The error type of this crate.
//!
//! Every variant says where the problem is (`file:line` whenever a line is known) and what to do
//! about it, because these messages end up in front of someone editing a manifest.

use std::io;

/// Why manifests could not be read, parsed or indexed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// A file, directory or standard input could not be read.
    #[error("{file}: cannot read; check that the path exists and is readable")]
    Read {
        /// The path (or `<stdin>`).
        file: String,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// A file is not UTF-8 text.
    #[error("{file}: not UTF-8 text; manifests must be UTF-8 encoded YAML or JSON")]
    NotUtf8 {
        /// The path.
        file: String,
    },

    /// The YAML scanner or parser rejected the text.
    #[error("{file}:{line}:{column}: invalid YAML: {problem}")]
    Syntax {
        /// The file's display name.
        file: String,
        /// 1-based line.
        line: u32,
        /// 1-based column.
        column: u32,
        /// What the YAML parser reported.
        problem: String,
    },

    /// A mapping has the same key twice.
    #[error(
        "{file}:{line}: key `{key}` appears twice in the same mapping (first at line {first_line}); remove one of them"
    )]
    DuplicateKey {
        /// The file's display name.
        file: String,
        /// The repeated key.
        key: String,
        /// Line of the first occurrence.
        first_line: u32,
        /// Line of the repeated occurrence.
        line: u32,
    },

    /// A mapping key is itself a mapping or a sequence, which JSON cannot express.
    #[error(
        "{file}:{line}: mapping keys must be scalars (strings, numbers, booleans); a {found} cannot be a key"
    )]
    ComplexKey {
        /// The file's display name.
        file: String,
        /// Line of the key.
        line: u32,
        /// `mapping` or `sequence`.
        found: &'static str,
    },

    /// A merge key (`<<`) whose value is not a mapping or a list of mappings.
    #[error("{file}:{line}: a merge key `<<` needs a mapping or a list of mappings as its value")]
    BadMerge {
        /// The file's display name.
        file: String,
        /// Line of the merge key.
        line: u32,
    },

    /// A scalar that has no JSON equivalent (`.inf`, `.nan`) or contradicts its tag (`!!int abc`).
    #[error("{file}:{line}: `{text}` {problem}; quote it if a string is meant")]
    BadScalar {
        /// The file's display name.
        file: String,
        /// Line of the scalar.
        line: u32,
        /// The scalar as written.
        text: String,
        /// What is wrong with it.
        problem: &'static str,
    },

    /// Nesting deeper than the loader accepts.
    #[error("{file}:{line}: nesting deeper than {limit} levels; flatten the document")]
    TooDeep {
        /// The file's display name.
        file: String,
        /// Line where the limit was crossed.
        line: u32,
        /// The limit.
        limit: usize,
    },

    /// Aliases that expand to more nodes than the loader accepts (an "alias bomb").
    #[error(
        "{file}:{line}: aliases expand to more than {limit} nodes; use fewer or smaller aliases"
    )]
    TooLarge {
        /// The file's display name.
        file: String,
        /// Line where the limit was crossed.
        line: u32,
        /// The limit.
        limit: usize,
    },

    /// A top-level document (or list item) that is not a mapping.
    #[error(
        "{file}:{line}: a manifest document must be a mapping (an object with apiVersion, kind, metadata), found a {found}"
    )]
    NotAMapping {
        /// The file's display name.
        file: String,
        /// Line where the document starts.
        line: u32,
        /// What was found instead (`sequence`, `string`, ...).
        found: &'static str,
    },

    /// A document without `apiVersion` or `kind`, or with a non-string or empty one.
    #[error(
        "{file}:{line}: object has no usable `{field}`; every manifest object needs string `apiVersion` and `kind` fields (for example `apiVersion: cluster.x-k8s.io/v1beta1` and `kind: Cluster`)"
    )]
    MissingTypeField {
        /// The file's display name.
        file: String,
        /// Line where the object starts (or of the field, if present but not a string).
        line: u32,
        /// `apiVersion` or `kind`.
        field: &'static str,
    },

    /// An object that has no `metadata.name` (or a non-string namespace), so it has no identity.
    #[error("{location}: {kind} has no usable `{field}`; set it to a non-empty string")]
    MissingIdentity {
        /// `file:line` of the object or field.
        location: String,
        /// The object's kind.
        kind: String,
        /// `metadata.name` or `metadata.namespace`.
        field: &'static str,
    },

    /// The same object (group, kind, namespace, name) appears twice.
    #[error("{second}: {object} is defined twice (first at {first}); remove or rename one of them")]
    DuplicateObject {
        /// The object, as `Kind namespace/name`.
        object: String,
        /// `file:line` of the first definition.
        first: String,
        /// `file:line` of the second definition.
        second: String,
    },

    /// The YAML parser failed internally on this input.
    #[error("{file}: the YAML parser failed on this input; check the file for unusual syntax")]
    ParserFailure {
        /// The file's display name.
        file: String,
    },
}
