//! Manifest files: YAML documents loaded with file:line positions, object identity, canonical YAML output.
