//! YAML text to JSON values, with the line of every field.
//!
//! The `yaml-rust2` event parser gives each event a source marker; the [`Builder`] here turns the
//! event stream into `serde_json::Value`s (mapping order kept) and records, for every field path,
//! the line where its key (or, for sequence items, the item) starts.
//!
//! Beyond plain YAML-to-JSON conversion the builder enforces what JSON and Kubernetes need:
//! mapping keys must be scalars and unique, scalars must have a JSON form (no `.inf`/`.nan`),
//! nesting depth and alias expansion are bounded, and YAML merge keys (`<<: *anchor`) are
//! expanded as kubectl does.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use capstan_model::path::FieldPath;
use serde_json::{Map, Number, Value};
use yaml_rust2::Yaml;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::error::ManifestError;

/// Deepest nesting of mappings and sequences accepted; real manifests stay far below.
pub const MAX_DEPTH: usize = 256;

/// Most nodes one document may expand to, counting alias expansions, so that alias bombs fail
/// fast instead of exhausting memory.
pub const MAX_NODES: usize = 2_000_000;

/// Line of each field path of one document (1-based).
pub(crate) type Positions = HashMap<FieldPath, u32>;

/// One YAML document of a stream.
#[derive(Debug)]
pub(crate) struct ParsedDocument {
    /// The document's value; `Null` for an empty document.
    pub value: Value,
    /// Line where the root node starts.
    pub line: u32,
    /// 0-based index of the document in the stream, empty documents included.
    pub index: usize,
    /// Line of every field below the root.
    pub positions: Positions,
}

/// Parses every document of a YAML (or JSON) stream.
pub(crate) fn parse_stream(file: &str, text: &str) -> Result<Vec<ParsedDocument>, ManifestError> {
    parse_stream_bounded(file, text, MAX_NODES)
}

/// [`parse_stream`] with another bound on the nodes the stream may expand to (alias expansions
/// included): a server parsing untrusted bodies keeps each request's memory small.
pub(crate) fn parse_stream_bounded(
    file: &str,
    text: &str,
    max_nodes: usize,
) -> Result<Vec<ParsedDocument>, ManifestError> {
    // A byte-order mark is legal at the start of a stream but not everywhere yaml-rust2 looks.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // The parser is third-party code with internal assertions; a malformed input must end as an
    // error, never as a crash of the whole command.
    catch_unwind(AssertUnwindSafe(|| run_parser(file, text, max_nodes))).unwrap_or_else(|_| {
        Err(ManifestError::ParserFailure {
            file: file.to_owned(),
        })
    })
}

fn run_parser(
    file: &str,
    text: &str,
    max_nodes: usize,
) -> Result<Vec<ParsedDocument>, ManifestError> {
    let mut parser = Parser::new_from_str(text);
    let mut builder = Builder::new(file);
    builder.max_nodes = max_nodes;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| ManifestError::Syntax {
            file: file.to_owned(),
            line: to_u32(e.marker().line()),
            column: to_u32(e.marker().col().saturating_add(1)),
            problem: e.info().to_owned(),
        })?;
        if event == Event::StreamEnd {
            break;
        }
        builder.on_event(event, mark)?;
    }
    Ok(builder.documents)
}

pub(crate) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The string form of a scalar used as a mapping key; `None` for mappings and sequences.
fn key_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".to_owned()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "sequence",
        _ => "mapping",
    }
}

/// The handle yaml-rust2 gives the `!!` (core schema) tags after resolving `%TAG` directives.
const CORE_TAG_HANDLE: &str = "tag:yaml.org,2002:";

/// Types a scalar: explicit core-schema tags win, quoted and block scalars are strings, plain
/// scalars follow the YAML 1.2 core schema as yaml-rust2 resolves it. The error is a phrase for
/// [`ManifestError::BadScalar`].
fn resolve_scalar(
    text: &str,
    style: TScalarStyle,
    tag: Option<&Tag>,
) -> Result<Value, &'static str> {
    match tag {
        Some(tag) if tag.handle == CORE_TAG_HANDLE => match tag.suffix.as_str() {
            "bool" => match text {
                "true" | "True" | "TRUE" => Ok(Value::Bool(true)),
                "false" | "False" | "FALSE" => Ok(Value::Bool(false)),
                _ => Err("is tagged !!bool but is not true or false"),
            },
            "int" => match resolve_plain(text) {
                Ok(v @ Value::Number(_)) if !is_float(&v) => Ok(v),
                _ => Err("is tagged !!int but is not an integer"),
            },
            "float" => match resolve_plain(text) {
                Ok(Value::Number(n)) => Ok(Value::Number(n)),
                Ok(_) => Err("is tagged !!float but is not a number"),
                Err(e) => Err(e),
            },
            "null" => match text {
                "" | "~" | "null" | "Null" | "NULL" => Ok(Value::Null),
                _ => Err("is tagged !!null but is not null"),
            },
            _ => Ok(Value::String(text.to_owned())),
        },
        _ if style != TScalarStyle::Plain => Ok(Value::String(text.to_owned())),
        Some(_) => Ok(Value::String(text.to_owned())),
        None => resolve_plain(text),
    }
}

fn is_float(value: &Value) -> bool {
    matches!(value, Value::Number(n) if n.is_f64())
}

/// Types an untagged plain scalar per the YAML 1.2 core schema (as yaml-rust2 does), extended to
/// unsigned integers beyond `i64`. The emitter uses the same function to decide what to quote.
pub(crate) fn resolve_plain(text: &str) -> Result<Value, &'static str> {
    match Yaml::from_str(text) {
        Yaml::Integer(i) => Ok(Value::from(i)),
        Yaml::Boolean(b) => Ok(Value::Bool(b)),
        Yaml::Null => Ok(Value::Null),
        Yaml::Real(real) => {
            let digits = real.strip_prefix('+').unwrap_or(&real);
            if !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && let Ok(u) = digits.parse::<u64>()
            {
                return Ok(Value::from(u));
            }
            float_value(&real)
        }
        Yaml::String(s) => Ok(Value::String(s)),
        // `from_str` yields only the variants above; anything else is kept as written.
        _ => Ok(Value::String(text.to_owned())),
    }
}

fn float_value(text: &str) -> Result<Value, &'static str> {
    let lower = text.to_ascii_lowercase();
    if lower.ends_with(".inf") {
        return Err("is infinite, which JSON cannot represent");
    }
    if lower == ".nan" {
        return Err("is not-a-number, which JSON cannot represent");
    }
    match text.parse::<f64>().ok().and_then(Number::from_f64) {
        Some(n) => Ok(Value::Number(n)),
        None => Err("is out of range for a JSON number"),
    }
}

/// A key read but whose value has not been completed yet.
#[derive(Debug)]
struct PendingKey {
    name: String,
    line: u32,
    /// A plain `<<`: the value is merged into the mapping rather than stored.
    merge: bool,
}

#[derive(Debug)]
enum Container {
    Sequence(Vec<Value>),
    Mapping {
        entries: Map<String, Value>,
        pending_key: Option<PendingKey>,
        key_lines: HashMap<String, u32>,
        merges: Vec<(Value, u32)>,
    },
}

/// A mapping or sequence being built.
#[derive(Debug)]
struct Frame {
    container: Container,
    anchor: usize,
    line: u32,
    path: FieldPath,
    /// Nodes inside this one (itself included), to charge alias expansions.
    nodes: usize,
}

/// Turns parser events into documents.
struct Builder<'a> {
    file: &'a str,
    documents: Vec<ParsedDocument>,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Value, usize)>,
    positions: Positions,
    root: Option<(Value, u32)>,
    total_nodes: usize,
    max_nodes: usize,
}

impl<'a> Builder<'a> {
    fn new(file: &'a str) -> Self {
        Self {
            file,
            documents: Vec::new(),
            stack: Vec::new(),
            anchors: HashMap::new(),
            positions: Positions::new(),
            root: None,
            total_nodes: 0,
            max_nodes: MAX_NODES,
        }
    }

    fn on_event(&mut self, event: Event, mark: Marker) -> Result<(), ManifestError> {
        let line = to_u32(mark.line());
        match event {
            Event::DocumentStart => {
                self.stack.clear();
                self.anchors.clear();
                self.positions = Positions::new();
                self.root = None;
                self.total_nodes = 0;
            }
            Event::DocumentEnd => {
                let (value, line) = self.root.take().unwrap_or((Value::Null, line));
                self.documents.push(ParsedDocument {
                    value,
                    line,
                    index: self.documents.len(),
                    positions: std::mem::take(&mut self.positions),
                });
            }
            Event::MappingStart(anchor, _) => self.start(
                Container::Mapping {
                    entries: Map::new(),
                    pending_key: None,
                    key_lines: HashMap::new(),
                    merges: Vec::new(),
                },
                anchor,
                line,
            )?,
            Event::SequenceStart(anchor, _) => {
                self.start(Container::Sequence(Vec::new()), anchor, line)?;
            }
            Event::MappingEnd | Event::SequenceEnd => self.end()?,
            Event::Scalar(text, style, anchor, tag) => {
                let value = resolve_scalar(&text, style, tag.as_ref()).map_err(|problem| {
                    ManifestError::BadScalar {
                        file: self.file.to_owned(),
                        line,
                        text: text.clone(),
                        problem,
                    }
                })?;
                let merge = style == TScalarStyle::Plain && tag.is_none() && text == "<<";
                self.charge(1, line)?;
                self.node(value, anchor, line, 1, merge)?;
            }
            Event::Alias(id) => {
                let Some((value, nodes)) = self.anchors.get(&id).cloned() else {
                    return Err(ManifestError::Syntax {
                        file: self.file.to_owned(),
                        line,
                        column: to_u32(mark.col().saturating_add(1)),
                        problem: "alias to an anchor that is not defined earlier in this document"
                            .to_owned(),
                    });
                };
                self.charge(nodes, line)?;
                self.node(value, 0, line, nodes, false)?;
            }
            Event::StreamStart | Event::StreamEnd | Event::Nothing => {}
        }
        Ok(())
    }

    /// Counts nodes against the bound ([`MAX_NODES`] unless the caller chose another).
    fn charge(&mut self, nodes: usize, line: u32) -> Result<(), ManifestError> {
        self.total_nodes = self.total_nodes.saturating_add(nodes);
        if self.total_nodes > self.max_nodes {
            return Err(ManifestError::TooLarge {
                file: self.file.to_owned(),
                line,
                limit: self.max_nodes,
            });
        }
        Ok(())
    }

    /// Whether the innermost container is a mapping waiting for a key.
    fn expects_key(&self) -> bool {
        matches!(
            self.stack.last(),
            Some(Frame {
                container: Container::Mapping {
                    pending_key: None,
                    ..
                },
                ..
            })
        )
    }

    /// The path of the node about to be added to the innermost container.
    fn child_path(&self) -> FieldPath {
        match self.stack.last() {
            None => FieldPath::root(),
            Some(frame) => match &frame.container {
                Container::Sequence(items) => frame.path.index(items.len()),
                Container::Mapping {
                    pending_key: Some(key),
                    ..
                } => frame.path.key(key.name.as_str()),
                Container::Mapping { .. } => frame.path.clone(),
            },
        }
    }

    fn start(
        &mut self,
        container: Container,
        anchor: usize,
        line: u32,
    ) -> Result<(), ManifestError> {
        if self.expects_key() {
            let found = match container {
                Container::Sequence(_) => "sequence",
                Container::Mapping { .. } => "mapping",
            };
            return Err(ManifestError::ComplexKey {
                file: self.file.to_owned(),
                line,
                found,
            });
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(ManifestError::TooDeep {
                file: self.file.to_owned(),
                line,
                limit: MAX_DEPTH,
            });
        }
        self.charge(1, line)?;
        let path = self.child_path();
        self.note_item_position(&path, line);
        self.stack.push(Frame {
            container,
            anchor,
            line,
            path,
            nodes: 1,
        });
        Ok(())
    }

    /// Sequence items have no key; their position is where the item starts.
    fn note_item_position(&mut self, path: &FieldPath, line: u32) {
        if matches!(
            self.stack.last(),
            Some(Frame {
                container: Container::Sequence(_),
                ..
            })
        ) {
            self.positions.insert(path.clone(), line);
        }
    }

    fn end(&mut self) -> Result<(), ManifestError> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let value = match frame.container {
            Container::Sequence(items) => Value::Array(items),
            Container::Mapping {
                mut entries,
                merges,
                ..
            } => {
                for (source, merge_line) in merges {
                    self.merge_into(&mut entries, &frame.path, source, merge_line)?;
                }
                Value::Object(entries)
            }
        };
        self.node(value, frame.anchor, frame.line, frame.nodes, false)
    }

    /// Applies a merge key: keys already present (written explicitly or merged earlier) win.
    fn merge_into(
        &mut self,
        entries: &mut Map<String, Value>,
        path: &FieldPath,
        source: Value,
        line: u32,
    ) -> Result<(), ManifestError> {
        let sources = match source {
            Value::Object(map) => vec![map],
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::Object(map) => Ok(map),
                    _ => Err(()),
                })
                .collect::<Result<Vec<_>, ()>>()
                .map_err(|()| self.bad_merge(line))?,
            _ => return Err(self.bad_merge(line)),
        };
        for map in sources {
            for (key, value) in map {
                if !entries.contains_key(&key) {
                    self.positions.insert(path.key(key.as_str()), line);
                    entries.insert(key, value);
                }
            }
        }
        Ok(())
    }

    fn bad_merge(&self, line: u32) -> ManifestError {
        ManifestError::BadMerge {
            file: self.file.to_owned(),
            line,
        }
    }

    /// Adds a completed node to the innermost container (or makes it the root).
    fn node(
        &mut self,
        value: Value,
        anchor: usize,
        line: u32,
        nodes: usize,
        merge_key: bool,
    ) -> Result<(), ManifestError> {
        if self.expects_key() {
            return self.key(&value, line, merge_key);
        }
        if anchor != 0 {
            self.anchors.insert(anchor, (value.clone(), nodes));
        }
        if self.stack.is_empty() {
            self.root = Some((value, line));
            return Ok(());
        }
        let path = self.child_path();
        self.note_item_position(&path, line);
        let Some(frame) = self.stack.last_mut() else {
            return Ok(());
        };
        frame.nodes = frame.nodes.saturating_add(nodes);
        match &mut frame.container {
            Container::Sequence(items) => items.push(value),
            Container::Mapping {
                entries,
                pending_key,
                merges,
                ..
            } => {
                if let Some(key) = pending_key.take() {
                    if key.merge {
                        merges.push((value, key.line));
                    } else {
                        entries.insert(key.name, value);
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a mapping key (the node just completed while the mapping expected a key).
    fn key(&mut self, value: &Value, line: u32, merge: bool) -> Result<(), ManifestError> {
        let Some(name) = key_string(value) else {
            return Err(ManifestError::ComplexKey {
                file: self.file.to_owned(),
                line,
                found: kind_name(value),
            });
        };
        let file = self.file;
        let Some(frame) = self.stack.last_mut() else {
            return Ok(());
        };
        let Container::Mapping {
            pending_key,
            key_lines,
            ..
        } = &mut frame.container
        else {
            return Ok(());
        };
        if !merge {
            if let Some(&first_line) = key_lines.get(&name) {
                return Err(ManifestError::DuplicateKey {
                    file: file.to_owned(),
                    key: name,
                    first_line,
                    line,
                });
            }
            key_lines.insert(name.clone(), line);
            self.positions.insert(frame.path.key(name.as_str()), line);
        }
        *pending_key = Some(PendingKey { name, line, merge });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(text: &str) -> Vec<Value> {
        parse_stream("t.yaml", text)
            .expect("parses")
            .into_iter()
            .map(|d| d.value)
            .collect()
    }

    fn line(doc: &ParsedDocument, path: &str) -> Option<u32> {
        doc.positions.get(&FieldPath::parse(path)).copied()
    }

    #[test]
    fn scalars_follow_the_core_schema() {
        let v = values(
            "a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: ~\ng: '1'\nh: \"true\"\ni: 0x10\nj: 0644\nk: 1.29\nl: yes\nm: 18446744073709551615\nn:\n",
        );
        assert_eq!(
            v[0],
            json!({"a": 1, "b": -2, "c": 1.5, "d": true, "e": null, "f": null, "g": "1", "h": "true",
                   "i": 16, "j": 644, "k": 1.29, "l": "yes", "m": 18_446_744_073_709_551_615_u64, "n": null})
        );
    }

    #[test]
    fn tags_override_plain_typing() {
        let v = values("a: !!str 1\nb: !!int \"7\"\nc: !!float 2\nd: !custom 3\n");
        assert_eq!(v[0], json!({"a": "1", "b": 7, "c": 2, "d": "3"}));
        assert!(matches!(
            parse_stream("t", "a: !!int abc\n"),
            Err(ManifestError::BadScalar { line: 1, .. })
        ));
    }

    #[test]
    fn infinities_and_nan_are_rejected() {
        for text in ["a: .inf\n", "a: -.Inf\n", "a: .nan\n", "a: 1e400\n"] {
            let err = parse_stream("f.yaml", text).expect_err(text);
            assert!(err.to_string().starts_with("f.yaml:1:"), "{err}");
        }
    }

    #[test]
    fn positions_point_at_keys_and_items() {
        let docs = parse_stream(
            "t",
            "# comment\napiVersion: v1\nspec:\n  items:\n  - name: a\n    value: |\n      x\n  - b\n",
        )
        .expect("parses");
        let doc = &docs[0];
        assert_eq!(doc.line, 2);
        assert_eq!(line(doc, "apiVersion"), Some(2));
        assert_eq!(line(doc, "spec"), Some(3));
        assert_eq!(line(doc, "spec.items"), Some(4));
        assert_eq!(line(doc, "spec.items[0]"), Some(5));
        assert_eq!(line(doc, "spec.items[0].name"), Some(5));
        assert_eq!(line(doc, "spec.items[0].value"), Some(6));
        assert_eq!(line(doc, "spec.items[1]"), Some(8));
    }

    #[test]
    fn documents_are_counted_including_empty_ones() {
        let docs =
            parse_stream("t", "a: 1\n---\n---\n# only a comment\n---\nb: 2\n").expect("parses");
        let summary: Vec<_> = docs.iter().map(|d| (d.index, d.value.clone())).collect();
        assert_eq!(
            summary,
            vec![
                (0, json!({"a": 1})),
                (1, Value::Null),
                (2, Value::Null),
                (3, json!({"b": 2}))
            ]
        );
        assert_eq!(docs[3].line, 6);
    }

    #[test]
    fn duplicate_keys_name_both_lines() {
        let err = parse_stream("d.yaml", "a: 1\nb:\n  c: 1\n  c: 2\n").expect_err("duplicate");
        assert_eq!(
            err.to_string(),
            "d.yaml:4: key `c` appears twice in the same mapping (first at line 3); remove one of them"
        );
    }

    #[test]
    fn non_string_keys_use_their_string_form() {
        assert_eq!(
            values("1: a\ntrue: b\n~: c\n0x10: d\n1.5: e\n")[0],
            json!({"1": "a", "true": "b", "null": "c", "16": "d", "1.5": "e"})
        );
        assert!(matches!(
            parse_stream("t", "? [a]\n: b\n"),
            Err(ManifestError::ComplexKey {
                found: "sequence",
                ..
            })
        ));
        assert!(matches!(
            parse_stream("t", "? {a: 1}\n: b\n"),
            Err(ManifestError::ComplexKey {
                found: "mapping",
                ..
            })
        ));
    }

    #[test]
    fn anchors_aliases_and_merge_keys_resolve() {
        let v = values(
            "base: &base\n  a: 1\n  b: 2\nuse: *base\nmerged:\n  <<: *base\n  b: 3\nlist: &l [1, 2]\nagain: *l\n",
        );
        assert_eq!(
            v[0],
            json!({"base": {"a": 1, "b": 2}, "use": {"a": 1, "b": 2}, "merged": {"b": 3, "a": 1},
                   "list": [1, 2], "again": [1, 2]})
        );
        assert!(matches!(
            parse_stream("t", "a: &x 1\nb:\n  <<: *x\n"),
            Err(ManifestError::BadMerge { line: 3, .. })
        ));
    }

    #[test]
    fn alias_bombs_and_deep_nesting_are_bounded() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(matches!(
            parse_stream("t", &bomb),
            Err(ManifestError::TooLarge { .. })
        ));
        let deep = "[".repeat(MAX_DEPTH + 5);
        assert!(parse_stream("t", &deep).is_err());
    }

    #[test]
    fn json_is_yaml() {
        assert_eq!(
            values("{\"a\": [1, 2.5, \"x\", null, true], \"b\": {}}")[0],
            json!({"a": [1, 2.5, "x", null, true], "b": {}})
        );
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let err = parse_stream("s.yaml", "a: [1, 2\nb: c\n").expect_err("unclosed");
        assert!(matches!(err, ManifestError::Syntax { .. }), "{err:?}");
        assert!(err.to_string().starts_with("s.yaml:"), "{err}");
    }
}
