//! Line-oriented rewriting of a YAML stream: chosen documents are made to read as new values while
//! every part whose value did not change keeps its text.
//!
//! Each document's text is walked together with its old value (positions from the parser) and its
//! new value. A mapping entry or sequence item whose value is unchanged is copied line for line,
//! with its comments, blank lines, quoting and flow style. A changed block mapping or block
//! sequence of the same length is walked into, so only the changed entries below it are written
//! anew; any other changed value is written anew as a whole entry (by [`crate::to_yaml`], at the
//! entry's indentation, keeping the comment lines above its key). New entries go where the first
//! removed entry of their mapping was (after the comment lines that were above it), else after its
//! last entry; other removed entries go with the comment lines directly above them.
//!
//! So the comments that survive are those on lines of their own outside a rewritten entry, and
//! those inside or after any unchanged part; comments at the end of a rewritten line or inside a
//! rewritten entry are lost. Every rewritten document is parsed again and must read as the new
//! value exactly; where it does not (anchors and aliases across rewritten parts, flow collections,
//! keys that could not be found on their lines), the whole document is written anew, and
//! [`Rewrite::rewritten_whole`] says which.

use std::ops::Range;

use capstan_model::path::FieldPath;
use serde_json::{Map, Value};

use crate::emit::to_yaml;
use crate::load::parse_documents;
use crate::object::LoadedObject;

/// The outcome of [`rewrite_stream`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewrite {
    /// The new stream.
    pub text: String,
    /// Indices of the documents written anew as a whole (their comments are not kept).
    pub rewritten_whole: Vec<usize>,
}

/// Rewrites `text`, from which `documents` were read by [`crate::parse_documents`], so that
/// document `i` reads as `new_values[i]` where that is `Some` (see the module documentation).
/// Documents with `None`, text between documents and separators are kept as they are. When the
/// documents cannot be matched to their text, the whole stream is written anew (every changed
/// document is then listed in [`Rewrite::rewritten_whole`]).
pub fn rewrite_stream(
    text: &str,
    documents: &[LoadedObject],
    new_values: &[Option<Value>],
) -> Rewrite {
    match rewrite_in_place(text, documents, new_values) {
        Some(rewrite) => rewrite,
        None => whole_stream(documents, new_values),
    }
}

/// Every document written anew, the unchanged ones from their old values.
fn whole_stream(documents: &[LoadedObject], new_values: &[Option<Value>]) -> Rewrite {
    let mut values = Vec::new();
    let mut rewritten_whole = Vec::new();
    for (i, document) in documents.iter().enumerate() {
        match new_values.get(i).and_then(Option::as_ref) {
            Some(value) => {
                if *value != document.value {
                    rewritten_whole.push(i);
                }
                values.push(value.clone());
            }
            None if document.value.is_null() => {}
            None => values.push(document.value.clone()),
        }
    }
    Rewrite {
        text: crate::to_yaml_documents(&values),
        rewritten_whole,
    }
}

/// A line that separates documents: `---` (possibly followed by content) or `...`.
fn is_separator(line: &str) -> bool {
    let bare = line.trim_end_matches('\r');
    ["---", "..."].iter().any(|marker| {
        bare.strip_prefix(marker)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    })
}

fn rewrite_in_place(
    text: &str,
    documents: &[LoadedObject],
    new_values: &[Option<Value>],
) -> Option<Rewrite> {
    let body = text.strip_suffix('\n');
    let ends_with_newline = body.is_some();
    let lines: Vec<&str> = body.unwrap_or(text).split('\n').collect();
    // Segments between separators, as line ranges.
    let mut segments: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for (i, line) in lines.iter().enumerate() {
        if is_separator(line) {
            segments.push(start..i);
            start = i + 1;
        }
    }
    segments.push(start..lines.len());
    // Each changed document's segment.
    let mut replacements: Vec<(Range<usize>, Vec<String>)> = Vec::new();
    let mut rewritten_whole = Vec::new();
    for (i, document) in documents.iter().enumerate() {
        let Some(new) = new_values.get(i).and_then(Option::as_ref) else {
            continue;
        };
        if *new == document.value {
            continue;
        }
        let root = usize::try_from(document.origin.line).ok()?.checked_sub(1)?;
        let segment = segments.iter().find(|s| s.contains(&root))?.clone();
        if replacements.iter().any(|(r, _)| *r == segment) {
            return None;
        }
        let editor = Editor {
            lines: &lines,
            object: document,
        };
        let mut out = Vec::new();
        let edited = editor
            .value(
                &FieldPath::root(),
                &document.value,
                new,
                segment.clone(),
                None,
                &mut out,
            )
            .is_some()
            && reads_as(&out, new);
        if !edited {
            out = to_yaml(new).lines().map(str::to_owned).collect();
            rewritten_whole.push(i);
        }
        replacements.push((segment, out));
    }
    replacements.sort_by_key(|(range, _)| range.start);
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut next = 0;
    for (range, replacement) in replacements {
        out.extend(lines[next..range.start].iter().map(|l| (*l).to_owned()));
        out.extend(replacement);
        next = range.end;
    }
    out.extend(lines[next..].iter().map(|l| (*l).to_owned()));
    let mut text = out.join("\n");
    if ends_with_newline {
        text.push('\n');
    }
    Some(Rewrite {
        text,
        rewritten_whole,
    })
}

/// Whether `lines`, parsed as one document, are exactly `value`.
fn reads_as(lines: &[String], value: &Value) -> bool {
    let text = lines.join("\n") + "\n";
    match parse_documents("rewrite", &text) {
        Ok(documents) => match documents.as_slice() {
            [only] => only.value == *value,
            _ => false,
        },
        Err(_) => false,
    }
}

/// Width of leading spaces.
fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// A line holding only a comment, or nothing.
fn is_blank_or_comment(line: &str) -> bool {
    let trimmed = line.trim();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// The column where the content of an entry starts: after indentation and any `- ` markers.
fn content_column(line: &str) -> usize {
    let mut column = indentation(line);
    while let Some(rest) = line.get(column..) {
        if let Some(after) = rest.strip_prefix("- ") {
            column = line.len() - after.trim_start_matches(' ').len();
        } else {
            break;
        }
    }
    column
}

/// The first line of a child's entry: its own line, preceded by the blank and comment lines
/// directly above it (not beyond `lowest`) that are indented no deeper than `column`.
fn entry_start(lines: &[&str], line: usize, lowest: usize, column: usize) -> usize {
    let mut start = line;
    while start > lowest {
        let above = lines[start - 1];
        if is_blank_or_comment(above) && indentation(above) <= column {
            start -= 1;
        } else {
            break;
        }
    }
    start
}

/// Walks old and new values over the text of one document.
struct Editor<'t> {
    lines: &'t [&'t str],
    object: &'t LoadedObject,
}

impl Editor<'_> {
    /// The 0-based line of a field, if the file has exactly that field.
    fn line(&self, path: &FieldPath) -> Option<usize> {
        usize::try_from(self.object.exact_line(path)?)
            .ok()?
            .checked_sub(1)
    }

    /// Writes the text of a value whose entry spans `span` (its key line, if any, at `key_line`).
    fn value(
        &self,
        path: &FieldPath,
        old: &Value,
        new: &Value,
        span: Range<usize>,
        key_line: Option<usize>,
        out: &mut Vec<String>,
    ) -> Option<()> {
        match (old, new) {
            (Value::Object(old), Value::Object(new)) => {
                self.mapping(path, old, new, span, key_line, out)
            }
            (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
                self.sequence(path, old, new, span, key_line, out)
            }
            _ => None,
        }
    }

    /// The 0-based lines of children, checked to be block style: one per line, in order, below
    /// the key line.
    fn child_lines(
        &self,
        paths: impl Iterator<Item = FieldPath>,
        span: &Range<usize>,
        key_line: Option<usize>,
    ) -> Option<Vec<usize>> {
        let mut lines: Vec<usize> = Vec::new();
        for path in paths {
            let line = self.line(&path)?;
            let after_previous = lines.last().is_none_or(|&previous| line > previous);
            let below_key = key_line.is_none_or(|key| line > key);
            if !span.contains(&line) || !after_previous || !below_key {
                return None;
            }
            lines.push(line);
        }
        if lines.is_empty() { None } else { Some(lines) }
    }

    fn mapping(
        &self,
        path: &FieldPath,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        span: Range<usize>,
        key_line: Option<usize>,
        out: &mut Vec<String>,
    ) -> Option<()> {
        let keys: Vec<&String> = old.keys().collect();
        let lines = self.child_lines(keys.iter().map(|k| path.key(k.as_str())), &span, key_line)?;
        let column = content_column(self.lines[lines[0]]);
        for (key, &line) in keys.iter().zip(&lines) {
            let text = self.lines[line];
            if content_column(text) != column || !starts_with_key(&text[column..], key) {
                return None;
            }
        }
        let starts: Vec<usize> = lines
            .iter()
            .enumerate()
            .map(|(i, &line)| {
                let lowest = if i == 0 { span.start } else { lines[i - 1] + 1 };
                entry_start(self.lines, line, lowest, column)
            })
            .collect();
        out.extend(self.copy(span.start..starts[0]));
        let mut added: Vec<String> = Vec::new();
        for (key, value) in new {
            if !old.contains_key(key) {
                added.extend(emit_entry(key, value, &" ".repeat(column), column));
            }
        }
        let mut added = Some(added);
        for (i, key) in keys.iter().enumerate() {
            let line = lines[i];
            let end = starts.get(i + 1).copied().unwrap_or(span.end);
            let prefix = &self.lines[line][..column];
            let holds_marker = prefix.contains('-');
            let old_value = &old[key.as_str()];
            match new.get(key.as_str()) {
                Some(new_value) if new_value == old_value => out.extend(self.copy(starts[i]..end)),
                Some(new_value) => {
                    out.extend(self.copy(starts[i]..line));
                    let mut nested = Vec::new();
                    let child = path.key(key.as_str());
                    if self
                        .value(
                            &child,
                            old_value,
                            new_value,
                            line..end,
                            Some(line),
                            &mut nested,
                        )
                        .is_some()
                    {
                        out.extend(nested);
                    } else {
                        out.extend(emit_entry(key, new_value, prefix, column));
                    }
                }
                None if holds_marker => return None,
                None => {
                    // The first removed entry's place (and the comment lines above it, which
                    // usually describe what its replacement now says) goes to the new entries.
                    if let Some(added) = added.take()
                        && !added.is_empty()
                    {
                        out.extend(self.copy(starts[i]..line));
                        out.extend(added);
                    }
                }
            }
        }
        if let Some(added) = added {
            out.extend(added);
        }
        Some(())
    }

    fn sequence(
        &self,
        path: &FieldPath,
        old: &[Value],
        new: &[Value],
        span: Range<usize>,
        key_line: Option<usize>,
        out: &mut Vec<String>,
    ) -> Option<()> {
        let lines = self.child_lines((0..old.len()).map(|i| path.index(i)), &span, key_line)?;
        let column = indentation(self.lines[lines[0]]);
        for &line in &lines {
            let text = self.lines[line];
            if indentation(text) != column || !text[column..].starts_with('-') {
                return None;
            }
        }
        let starts: Vec<usize> = lines
            .iter()
            .enumerate()
            .map(|(i, &line)| {
                let lowest = if i == 0 { span.start } else { lines[i - 1] + 1 };
                entry_start(self.lines, line, lowest, column)
            })
            .collect();
        out.extend(self.copy(span.start..starts[0]));
        for (i, (old_item, new_item)) in old.iter().zip(new).enumerate() {
            let line = lines[i];
            let end = starts.get(i + 1).copied().unwrap_or(span.end);
            if old_item == new_item {
                out.extend(self.copy(starts[i]..end));
                continue;
            }
            out.extend(self.copy(starts[i]..line));
            let mut nested = Vec::new();
            let edited = matches!((old_item, new_item), (Value::Object(_), Value::Object(_)))
                && self
                    .value(
                        &path.index(i),
                        old_item,
                        new_item,
                        line..end,
                        None,
                        &mut nested,
                    )
                    .is_some();
            if edited {
                out.extend(nested);
            } else {
                let prefix = " ".repeat(column);
                out.extend(indent_lines(
                    &to_yaml(&Value::Array(vec![new_item.clone()])),
                    &prefix,
                    column,
                ));
            }
        }
        Some(())
    }

    fn copy(&self, range: Range<usize>) -> impl Iterator<Item = String> + '_ {
        self.lines[range].iter().map(|l| (*l).to_owned())
    }
}

/// Whether an entry's text begins with `key` as a YAML key (plain or quoted).
fn starts_with_key(text: &str, key: &str) -> bool {
    let plain = text
        .strip_prefix(key)
        .is_some_and(|rest| rest.starts_with(':'));
    let quoted = text.starts_with('"') || text.starts_with('\'');
    plain || quoted
}

/// `key: value` as block YAML, its first line after `first_prefix`, the rest at `column`.
fn emit_entry(key: &str, value: &Value, first_prefix: &str, column: usize) -> Vec<String> {
    let mut map = Map::new();
    map.insert(key.to_owned(), value.clone());
    indent_lines(&to_yaml(&Value::Object(map)), first_prefix, column)
}

fn indent_lines(text: &str, first_prefix: &str, column: usize) -> Vec<String> {
    let indent = " ".repeat(column);
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            if i == 0 {
                format!("{first_prefix}{line}")
            } else if line.is_empty() {
                String::new()
            } else {
                format!("{indent}{line}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn rewrite(text: &str, change: impl Fn(&mut Value)) -> Rewrite {
        let documents = parse_documents("t.yaml", text).unwrap();
        let new: Vec<Option<Value>> = documents
            .iter()
            .map(|d| {
                let mut v = d.value.clone();
                if v.is_object() {
                    change(&mut v);
                }
                Some(v)
            })
            .collect();
        let rewrite = rewrite_stream(text, &documents, &new);
        let back = parse_documents("out.yaml", &rewrite.text).unwrap();
        let wanted: Vec<Value> = new.into_iter().flatten().filter(|v| !v.is_null()).collect();
        let got: Vec<Value> = back
            .into_iter()
            .map(|d| d.value)
            .filter(|v| !v.is_null())
            .collect();
        assert_eq!(got, wanted, "{}", rewrite.text);
        rewrite
    }

    const MACHINE: &str = "\
# a machine
apiVersion: cluster.x-k8s.io/v1beta1   # old
kind: Machine
metadata:
  name: m   # its name
  labels: {a: b}
spec:
  clusterName: c
  # drain for five minutes
  nodeDrainTimeout: 5m
  bootstrap:
    dataSecretName: s
  # the provider's machine
  infrastructureRef:
    apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
    kind: Metal3Machine
    name: m
  list:
    # first
    - name: a
      timeout: 5m
    - name: b   # second
      timeout: 1m
---
# a secret, untouched
apiVersion: v1
kind: Secret
metadata: {name: s}
";

    #[test]
    fn keeps_comments_of_unchanged_parts() {
        let out = rewrite(MACHINE, |v| {
            if v["kind"] != "Machine" {
                return;
            }
            v["apiVersion"] = json!("cluster.x-k8s.io/v1beta2");
            let spec = v["spec"].as_object_mut().unwrap();
            spec.remove("nodeDrainTimeout");
            spec.insert("deletion".into(), json!({"nodeDrainTimeoutSeconds": 300}));
            spec["infrastructureRef"] = json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "Metal3Machine", "name": "m"});
            spec["list"][0] = json!({"name": "a", "timeoutSeconds": 300});
        });
        assert!(out.rewritten_whole.is_empty());
        let text = out.text;
        for kept in [
            "# a machine\n",
            "  name: m   # its name\n",
            "  labels: {a: b}\n",
            "  # the provider's machine\n",
            "    # first\n",
            "    - name: b   # second\n",
            "# a secret, untouched\n",
            "metadata: {name: s}\n",
        ] {
            assert!(text.contains(kept), "{kept:?} lost:\n{text}");
        }
        assert!(
            text.contains(
                "  clusterName: c\n  # drain for five minutes\n  deletion:\n    nodeDrainTimeoutSeconds: 300\n  bootstrap:"
            ),
            "{text}"
        );
        assert!(
            text.contains("    - name: a\n      timeoutSeconds: 300\n"),
            "{text}"
        );
        assert!(
            text.starts_with("# a machine\napiVersion: cluster.x-k8s.io/v1beta2\n"),
            "{text}"
        );
    }

    #[test]
    fn unchanged_streams_are_byte_identical() {
        let out = rewrite(MACHINE, |_| {});
        assert_eq!(out.text, MACHINE);
    }

    #[test]
    fn flow_and_aliases_fall_back_to_whole_values() {
        let text = "a: {b: 1, c: 2}\nd: &x\n  e: 1\nf: *x\n";
        let out = rewrite(text, |v| {
            v["a"]["b"] = json!(5);
            v["d"]["e"] = json!(2);
        });
        assert!(out.text.contains("a:\n  b: 5\n  c: 2\n"), "{}", out.text);
        let out = rewrite("k: v\n", |v| {
            *v = json!({"other": [1, 2]});
        });
        assert!(out.rewritten_whole.is_empty());
        assert_eq!(out.text, "other:\n  - 1\n  - 2\n");
        let out = rewrite("# note\nk: v\n", |v| {
            *v = json!("no longer a mapping");
        });
        assert_eq!(out.rewritten_whole, vec![0]);
    }

    #[test]
    fn separators_and_empty_documents_stay() {
        let text = "---\n# lead\n---\na: 1  # one\nb: 2\n...\n---\nc: 3\n";
        let out = rewrite(text, |v| {
            if v.get("b").is_some() {
                v["b"] = json!(4);
            }
        });
        assert_eq!(
            out.text,
            "---\n# lead\n---\na: 1  # one\nb: 4\n...\n---\nc: 3\n"
        );
    }
}
