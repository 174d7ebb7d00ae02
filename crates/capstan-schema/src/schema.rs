//! The structural schema of one CRD version, parsed once from its `openAPIV3Schema`.
//!
//! Parsing checks the JSON type of every keyword it knows and compiles `pattern`s, so that
//! validation, defaulting and pruning work on plain typed data. Keywords without a meaning for
//! validation (`description`, `example`, `title`, `externalDocs`, ...) are not kept: whoever
//! shows documentation (`kubectl explain`, `/openapi`) reads the definition as written.
//!
//! A process serves hundreds of schema versions whose sub-schemas repeat (ObjectMeta, conditions,
//! object references, Kubernetes' own types embedded in templates), so parsing shares them: every
//! property's schema is held in an `Arc`, and a [`SchemaInterner`] hands out one `Arc` for all
//! sub-schemas with the same keywords, and one compiled regex per distinct `pattern`.

use std::collections::HashMap;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

/// Deepest nesting of sub-schemas accepted. Upstream CRD schemas nest about 15 levels deep;
/// the bound keeps recursion over hostile schemas well within a thread's stack.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// Largest compiled size of one `pattern`, so that a hostile pattern cannot exhaust memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Why a schema could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A keyword whose value has the wrong JSON type or an unsupported value.
    #[error("schema {path}: `{keyword}` must be {expected}")]
    Keyword {
        /// JSON pointer of the sub-schema within the schema.
        path: String,
        /// The keyword.
        keyword: &'static str,
        /// What the keyword must be.
        expected: &'static str,
    },
    /// A sub-schema that is not a JSON object.
    #[error("schema {path}: must be an object")]
    NotAnObject {
        /// JSON pointer of the sub-schema within the schema.
        path: String,
    },
    /// Sub-schemas nested deeper than [`MAX_SCHEMA_DEPTH`].
    #[error("schema {path}: nested deeper than {limit} levels")]
    TooDeep {
        /// JSON pointer of the sub-schema within the schema.
        path: String,
        /// The limit.
        limit: usize,
    },
}

/// The `type` of a schema node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaType {
    /// `object`
    Object,
    /// `array`
    Array,
    /// `string`
    String,
    /// `integer`: JSON integers only.
    Integer,
    /// `number`: integers or floats.
    Number,
    /// `boolean`
    Boolean,
}

impl SchemaType {
    /// The name as written in schemas.
    pub fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Array => "array",
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "object" => Self::Object,
            "array" => Self::Array,
            "string" => Self::String,
            "integer" => Self::Integer,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            _ => return None,
        })
    }
}

/// `additionalProperties`: a boolean or a schema for every property not in `properties`.
#[derive(Clone, Debug)]
pub enum AdditionalProperties {
    /// `true` allows any other property, `false` none.
    Allowed(bool),
    /// Other properties must match this schema.
    Schema(Box<Schema>),
}

/// `x-kubernetes-list-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced as a whole on merge; items may repeat.
    Atomic,
    /// Items are unique scalars.
    Set,
    /// Items are objects unique by `x-kubernetes-list-map-keys`.
    Map,
}

/// `x-kubernetes-map-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Fields merge individually.
    Granular,
    /// The object is replaced as a whole on merge.
    Atomic,
}

/// A `pattern`, compiled when the regex engine accepts it.
///
/// Kubernetes patterns are Go (RE2) regular expressions; the few that use syntax this engine does
/// not support are kept uncompiled and reported as unchecked rather than failing the schema.
#[derive(Clone, Debug)]
pub struct Pattern {
    /// The pattern as written.
    pub source: String,
    regex: Option<Regex>,
}

impl Pattern {
    /// Compiles a pattern; an unsupported one is kept, uncompiled.
    pub fn new(source: &str) -> Self {
        Self {
            source: source.to_owned(),
            regex: compile(source),
        }
    }

    /// The compiled regex, if the pattern compiled.
    pub fn regex(&self) -> Option<&Regex> {
        self.regex.as_ref()
    }
}

fn compile(source: &str) -> Option<Regex> {
    regex::RegexBuilder::new(source)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .ok()
}

/// `properties`: the schema of each named property, in name order.
///
/// Each schema is behind an `Arc` so that identical sub-schemas parsed with one
/// [`SchemaInterner`] are held once. Reads give plain `&Schema`s, as a map of schemas would.
#[derive(Clone, Debug, Default)]
pub struct Properties {
    /// Sorted by name, names unique.
    entries: Vec<(String, Arc<Schema>)>,
}

impl Properties {
    /// No properties.
    pub fn new() -> Self {
        Self::default()
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(key, _)| key.as_str().cmp(name))
    }

    /// The schema of a property.
    pub fn get(&self, name: &str) -> Option<&Schema> {
        let index = self.position(name).ok()?;
        self.entries.get(index).map(|(_, schema)| &**schema)
    }

    /// Whether a property is declared.
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Declares (or replaces) a property; returns the schema it replaced.
    pub fn insert(&mut self, name: String, schema: impl Into<Arc<Schema>>) -> Option<Arc<Schema>> {
        let schema = schema.into();
        match self.position(&name) {
            Ok(index) => self
                .entries
                .get_mut(index)
                .map(|entry| std::mem::replace(&mut entry.1, schema)),
            Err(index) => {
                self.entries.insert(index, (name, schema));
                None
            }
        }
    }

    /// How many properties are declared.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no property is declared.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The properties in name order.
    pub fn iter(&self) -> PropertiesIter<'_> {
        self.entries.iter().map(entry_ref)
    }

    /// The property names in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(name, _)| name)
    }

    /// The property schemas in name order.
    pub fn values(&self) -> impl Iterator<Item = &Schema> {
        self.entries.iter().map(|(_, schema)| &**schema)
    }
}

/// Iterator over [`Properties`]: `(name, schema)` in name order.
pub type PropertiesIter<'a> = std::iter::Map<
    std::slice::Iter<'a, (String, Arc<Schema>)>,
    fn(&'a (String, Arc<Schema>)) -> (&'a String, &'a Schema),
>;

fn entry_ref(entry: &(String, Arc<Schema>)) -> (&String, &Schema) {
    (&entry.0, &entry.1)
}

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a String, &'a Schema);
    type IntoIter = PropertiesIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::ops::Index<&str> for Properties {
    type Output = Schema;

    /// # Panics
    /// When the property is not declared, as indexing a map does.
    fn index(&self, name: &str) -> &Schema {
        #[allow(clippy::expect_used)]
        self.get(name).expect("no such property")
    }
}

/// Shares what repeats between the schemas parsed with it: sub-schemas with the same keywords
/// become one `Arc`, and each distinct `pattern` is compiled once.
///
/// Parse every schema of a process (or of a set of definitions) with one interner to share across
/// them; drop it afterwards (the schemas keep what they share).
#[derive(Default)]
pub struct SchemaInterner {
    /// The shared sub-schemas by their key (their own keywords and their children's identities).
    schemas: HashMap<String, Arc<Schema>>,
    /// Compiled patterns by source (`None`: the engine does not support it).
    patterns: HashMap<String, Option<Regex>>,
}

impl SchemaInterner {
    /// An interner that shares nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn pattern(&mut self, source: &str) -> Pattern {
        let regex = self
            .patterns
            .entry(source.to_owned())
            .or_insert_with(|| compile(source))
            .clone();
        Pattern {
            source: source.to_owned(),
            regex,
        }
    }

    fn share(&mut self, key: String, schema: Schema) -> Arc<Schema> {
        self.schemas
            .entry(key)
            .or_insert_with(|| Arc::new(schema))
            .clone()
    }
}

/// An `x-kubernetes-validations` (CEL) rule, compiled on first use (see the `cel` module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationRule {
    /// The CEL expression.
    pub rule: String,
    /// The message shown when the rule fails.
    pub message: Option<String>,
    /// A CEL expression computing the message.
    pub message_expression: Option<String>,
    /// The reason reported when the rule fails (`FieldValueInvalid`, ...).
    pub reason: Option<String>,
    /// The field the failure is reported on, relative to the schema node.
    pub field_path: Option<String>,
    /// `optionalOldSelf`: a transition rule also evaluated without an old value.
    pub optional_old_self: bool,
    /// The compiled rule, made on first use.
    pub compiled: crate::cel::CompiledCell,
}

/// One node of a structural schema.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    /// `type`; `None` for untyped nodes (int-or-string, preserve-unknown-fields, branches).
    pub schema_type: Option<SchemaType>,
    /// `format`.
    pub format: Option<String>,
    /// `nullable`.
    pub nullable: bool,
    /// `default`.
    pub default: Option<Value>,
    /// `required` property names.
    pub required: Vec<String>,
    /// `properties`.
    pub properties: Properties,
    /// `additionalProperties`.
    pub additional_properties: Option<AdditionalProperties>,
    /// `items`.
    pub items: Option<Box<Schema>>,
    /// `enum`.
    pub enum_values: Option<Vec<Value>>,
    /// `pattern`.
    pub pattern: Option<Pattern>,
    /// `minimum`.
    pub minimum: Option<f64>,
    /// `maximum`.
    pub maximum: Option<f64>,
    /// `exclusiveMinimum` (OpenAPI v3.0: a flag on `minimum`).
    pub exclusive_minimum: bool,
    /// `exclusiveMaximum` (OpenAPI v3.0: a flag on `maximum`).
    pub exclusive_maximum: bool,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `minLength`, in Unicode characters.
    pub min_length: Option<u64>,
    /// `maxLength`, in Unicode characters.
    pub max_length: Option<u64>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
    /// `minProperties`.
    pub min_properties: Option<u64>,
    /// `maxProperties`.
    pub max_properties: Option<u64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `allOf`.
    pub all_of: Vec<Schema>,
    /// `anyOf`.
    pub any_of: Vec<Schema>,
    /// `oneOf`.
    pub one_of: Vec<Schema>,
    /// `not`.
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`.
    pub embedded_resource: bool,
    /// `x-kubernetes-list-type`.
    pub list_type: Option<ListType>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`.
    pub map_type: Option<MapType>,
    /// `x-kubernetes-validations`.
    pub validations: Vec<ValidationRule>,
}

impl Schema {
    /// Parses an `openAPIV3Schema` (or any sub-schema).
    ///
    /// # Errors
    /// A known keyword with a value of the wrong JSON type, a sub-schema that is not an object, or
    /// nesting deeper than [`MAX_SCHEMA_DEPTH`].
    pub fn from_value(value: &Value) -> Result<Self, SchemaError> {
        Self::from_value_shared(value, &mut SchemaInterner::new())
    }

    /// Parses a schema, sharing sub-schemas and compiled patterns with every other schema parsed
    /// with `interner`.
    ///
    /// # Errors
    /// As [`Schema::from_value`].
    pub fn from_value_shared(
        value: &Value,
        interner: &mut SchemaInterner,
    ) -> Result<Self, SchemaError> {
        let mut parser = Parser { interner };
        parser.parse(value, "", 0).map(|(schema, _)| schema)
    }

    /// The schema of a property, following `additionalProperties` for names not in `properties`.
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.properties
            .get(name)
            .or(match &self.additional_properties {
                Some(AdditionalProperties::Schema(schema)) => Some(schema),
                _ => None,
            })
    }

    /// Every CEL rule in this schema and below, each with the JSON pointer of its sub-schema.
    pub fn validation_rules(&self) -> Vec<(String, &ValidationRule)> {
        let mut rules = Vec::new();
        self.collect_rules(String::new(), &mut rules);
        rules
    }

    fn collect_rules<'a>(&'a self, pointer: String, rules: &mut Vec<(String, &'a ValidationRule)>) {
        rules.extend(self.validations.iter().map(|r| (pointer.clone(), r)));
        for (name, property) in &self.properties {
            property.collect_rules(format!("{pointer}/properties/{}", escape(name)), rules);
        }
        if let Some(AdditionalProperties::Schema(schema)) = &self.additional_properties {
            schema.collect_rules(format!("{pointer}/additionalProperties"), rules);
        }
        if let Some(items) = &self.items {
            items.collect_rules(format!("{pointer}/items"), rules);
        }
    }
}

fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Keywords holding sub-schemas: they enter a node's key through their children's keys.
const CHILD_KEYWORDS: &[&str] = &[
    "properties",
    "additionalProperties",
    "items",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];

/// Keywords that do not change what a node validates, defaults or prunes.
const IGNORED_KEYWORDS: &[&str] = &["description", "example", "title", "externalDocs"];

/// Parses schema nodes, sharing property schemas through the interner.
struct Parser<'i> {
    interner: &'i mut SchemaInterner,
}

impl Parser<'_> {
    /// Parses one node and returns it with its key: its own keywords and its children's keys (a
    /// shared child's key is the address of its `Arc`), so equal keys mean equal compiled nodes.
    fn parse(
        &mut self,
        value: &Value,
        path: &str,
        depth: usize,
    ) -> Result<(Schema, String), SchemaError> {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(SchemaError::TooDeep {
                path: display_path(path),
                limit: MAX_SCHEMA_DEPTH,
            });
        }
        let Value::Object(map) = value else {
            return Err(SchemaError::NotAnObject {
                path: display_path(path),
            });
        };
        let mut key = String::from("{");
        for (keyword, value) in map {
            if CHILD_KEYWORDS.contains(&keyword.as_str())
                || IGNORED_KEYWORDS.contains(&keyword.as_str())
            {
                continue;
            }
            key.push_str(&Value::String(keyword.clone()).to_string());
            key.push(':');
            key.push_str(&value.to_string());
            key.push(',');
        }
        let reader = Reader { map, path };
        let mut schema = Schema {
            schema_type: match reader.string("type")? {
                None => None,
                Some(name) => Some(SchemaType::parse(name).ok_or_else(|| {
                    reader.error(
                        "type",
                        "one of object, array, string, integer, number, boolean",
                    )
                })?),
            },
            format: reader.string("format")?.map(str::to_owned),
            nullable: reader.flag("nullable")?,
            default: map.get("default").cloned(),
            required: reader.strings("required")?,
            enum_values: match map.get("enum") {
                None | Some(Value::Null) => None,
                Some(Value::Array(values)) => Some(values.clone()),
                Some(_) => return Err(reader.error("enum", "an array")),
            },
            pattern: reader
                .string("pattern")?
                .map(|source| self.interner.pattern(source)),
            minimum: reader.number("minimum")?,
            maximum: reader.number("maximum")?,
            multiple_of: reader.number("multipleOf")?,
            min_length: reader.count("minLength")?,
            max_length: reader.count("maxLength")?,
            min_items: reader.count("minItems")?,
            max_items: reader.count("maxItems")?,
            min_properties: reader.count("minProperties")?,
            max_properties: reader.count("maxProperties")?,
            unique_items: reader.flag("uniqueItems")?,
            int_or_string: reader.flag("x-kubernetes-int-or-string")?,
            preserve_unknown_fields: reader.flag("x-kubernetes-preserve-unknown-fields")?,
            embedded_resource: reader.flag("x-kubernetes-embedded-resource")?,
            list_type: match reader.string("x-kubernetes-list-type")? {
                None => None,
                Some("atomic") => Some(ListType::Atomic),
                Some("set") => Some(ListType::Set),
                Some("map") => Some(ListType::Map),
                Some(_) => {
                    return Err(reader.error("x-kubernetes-list-type", "atomic, set or map"));
                }
            },
            list_map_keys: reader.strings("x-kubernetes-list-map-keys")?,
            map_type: match reader.string("x-kubernetes-map-type")? {
                None => None,
                Some("granular") => Some(MapType::Granular),
                Some("atomic") => Some(MapType::Atomic),
                Some(_) => {
                    return Err(reader.error("x-kubernetes-map-type", "granular or atomic"));
                }
            },
            validations: reader.rules()?,
            ..Schema::default()
        };
        (schema.minimum, schema.exclusive_minimum) =
            exclusive_bound(&reader, "exclusiveMinimum", schema.minimum)?;
        (schema.maximum, schema.exclusive_maximum) =
            exclusive_bound(&reader, "exclusiveMaximum", schema.maximum)?;

        if let Some(properties) = map.get("properties") {
            let Value::Object(properties) = properties else {
                return Err(reader.error("properties", "an object of schemas"));
            };
            key.push_str("properties:{");
            for (name, property) in properties {
                let sub = format!("{path}/properties/{}", escape(name));
                let (property, property_key) = self.parse(property, &sub, depth + 1)?;
                let shared = self.interner.share(property_key, property);
                key.push_str(&Value::String(name.clone()).to_string());
                key.push_str(&format!(":{:p},", Arc::as_ptr(&shared)));
                schema.properties.insert(name.clone(), shared);
            }
            key.push_str("},");
        }
        schema.additional_properties = match map.get("additionalProperties") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(allowed)) => {
                key.push_str(&format!("additionalProperties:{allowed},"));
                Some(AdditionalProperties::Allowed(*allowed))
            }
            Some(sub @ Value::Object(_)) => {
                let (sub, sub_key) =
                    self.parse(sub, &format!("{path}/additionalProperties"), depth + 1)?;
                key.push_str(&format!("additionalProperties:{sub_key},"));
                Some(AdditionalProperties::Schema(Box::new(sub)))
            }
            Some(_) => return Err(reader.error("additionalProperties", "a boolean or a schema")),
        };
        schema.items = match map.get("items") {
            None | Some(Value::Null) => None,
            Some(sub @ Value::Object(_)) => {
                let (sub, sub_key) = self.parse(sub, &format!("{path}/items"), depth + 1)?;
                key.push_str(&format!("items:{sub_key},"));
                Some(Box::new(sub))
            }
            Some(_) => {
                return Err(reader.error(
                    "items",
                    "a schema (structural schemas have one items schema)",
                ));
            }
        };
        schema.all_of = self.branches(&reader, "allOf", depth, &mut key)?;
        schema.any_of = self.branches(&reader, "anyOf", depth, &mut key)?;
        schema.one_of = self.branches(&reader, "oneOf", depth, &mut key)?;
        schema.not = match map.get("not") {
            None | Some(Value::Null) => None,
            Some(sub) => {
                let (sub, sub_key) = self.parse(sub, &format!("{path}/not"), depth + 1)?;
                key.push_str(&format!("not:{sub_key},"));
                Some(Box::new(sub))
            }
        };
        key.push('}');
        Ok((schema, key))
    }

    fn branches(
        &mut self,
        reader: &Reader<'_>,
        keyword: &'static str,
        depth: usize,
        key: &mut String,
    ) -> Result<Vec<Schema>, SchemaError> {
        match reader.map.get(keyword) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(subs)) => {
                key.push_str(keyword);
                key.push_str(":[");
                let mut branches = Vec::with_capacity(subs.len());
                for (i, sub) in subs.iter().enumerate() {
                    let sub_path = format!("{}/{keyword}/{i}", reader.path);
                    let (branch, branch_key) = self.parse(sub, &sub_path, depth + 1)?;
                    key.push_str(&branch_key);
                    key.push(',');
                    branches.push(branch);
                }
                key.push_str("],");
                Ok(branches)
            }
            Some(_) => Err(reader.error(keyword, "an array of schemas")),
        }
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

/// Reads `exclusiveMinimum`/`exclusiveMaximum`: the OpenAPI v3.0 flag, or the newer JSON Schema
/// form where the keyword itself is the (exclusive) bound.
fn exclusive_bound(
    reader: &Reader<'_>,
    keyword: &'static str,
    bound: Option<f64>,
) -> Result<(Option<f64>, bool), SchemaError> {
    match reader.map.get(keyword) {
        None | Some(Value::Null) => Ok((bound, false)),
        Some(Value::Bool(exclusive)) => Ok((bound, *exclusive)),
        Some(Value::Number(n)) => Ok((n.as_f64(), true)),
        Some(_) => Err(reader.error(keyword, "a boolean")),
    }
}

/// Typed access to the keywords of one schema object.
struct Reader<'a> {
    map: &'a serde_json::Map<String, Value>,
    path: &'a str,
}

impl Reader<'_> {
    fn error(&self, keyword: &'static str, expected: &'static str) -> SchemaError {
        SchemaError::Keyword {
            path: display_path(self.path),
            keyword,
            expected,
        }
    }

    fn string(&self, keyword: &'static str) -> Result<Option<&str>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.error(keyword, "a string")),
        }
    }

    fn flag(&self, keyword: &'static str) -> Result<bool, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(self.error(keyword, "a boolean")),
        }
    }

    fn number(&self, keyword: &'static str) -> Result<Option<f64>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(_) => Err(self.error(keyword, "a number")),
        }
    }

    fn count(&self, keyword: &'static str) -> Result<Option<u64>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.error(keyword, "a non-negative integer")),
            Some(_) => Err(self.error(keyword, "a non-negative integer")),
        }
    }

    fn strings(&self, keyword: &'static str) -> Result<Vec<String>, SchemaError> {
        match self.map.get(keyword) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.error(keyword, "an array of strings"))
                })
                .collect(),
            Some(_) => Err(self.error(keyword, "an array of strings")),
        }
    }

    fn rules(&self) -> Result<Vec<ValidationRule>, SchemaError> {
        const KEYWORD: &str = "x-kubernetes-validations";
        const EXPECTED: &str = "an array of objects with a string `rule`";
        let items = match self.map.get(KEYWORD) {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(self.error(KEYWORD, EXPECTED)),
        };
        items
            .iter()
            .map(|item| {
                let text = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
                Ok(ValidationRule {
                    rule: text("rule").ok_or_else(|| self.error(KEYWORD, EXPECTED))?,
                    message: text("message"),
                    message_expression: text("messageExpression"),
                    reason: text("reason"),
                    field_path: text("fieldPath"),
                    optional_old_self: item
                        .get("optionalOldSelf")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    compiled: crate::cel::CompiledCell::default(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keywords_are_read() {
        let schema = Schema::from_value(&json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer", "format": "int32", "minimum": 0, "exclusiveMinimum": true, "default": 1},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 63},
                        "mode": {"type": "string", "enum": ["a", "b"]},
                        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "ports": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
                    },
                    "x-kubernetes-validations": [{"rule": "self.replicas >= 0", "message": "m"}]
                }
            }
        }))
        .expect("parses");
        assert_eq!(schema.schema_type, Some(SchemaType::Object));
        assert_eq!(schema.required, ["spec"]);
        let spec = &schema.properties["spec"];
        let replicas = &spec.properties["replicas"];
        assert_eq!(replicas.format.as_deref(), Some("int32"));
        assert_eq!(
            (replicas.minimum, replicas.exclusive_minimum),
            (Some(0.0), true)
        );
        assert_eq!(replicas.default, Some(json!(1)));
        assert!(
            spec.properties["name"]
                .pattern
                .as_ref()
                .and_then(Pattern::regex)
                .is_some()
        );
        assert_eq!(
            spec.properties["mode"].enum_values,
            Some(vec![json!("a"), json!("b")])
        );
        assert!(spec.properties["port"].int_or_string);
        assert_eq!(spec.properties["port"].any_of.len(), 2);
        assert!(spec.properties["labels"].property("anything").is_some());
        assert_eq!(spec.properties["ports"].list_type, Some(ListType::Map));
        assert_eq!(spec.properties["ports"].list_map_keys, ["name"]);
        let rules = schema.validation_rules();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].0, "/properties/spec");
    }

    #[test]
    fn wrong_keyword_types_are_errors_with_paths() {
        let err = Schema::from_value(&json!({"properties": {"a": {"type": 5}}})).expect_err("type");
        assert_eq!(
            err.to_string(),
            "schema /properties/a: `type` must be a string"
        );
        let err = Schema::from_value(&json!({"items": [{"type": "string"}]})).expect_err("tuple");
        assert!(matches!(
            err,
            SchemaError::Keyword {
                keyword: "items",
                ..
            }
        ));
        assert!(Schema::from_value(&json!({"minLength": -1})).is_err());
        assert!(Schema::from_value(&json!({"type": "null"})).is_err());
        assert!(Schema::from_value(&json!("string")).is_err());
    }

    #[test]
    fn unsupported_patterns_are_kept_uncompiled() {
        let schema =
            Schema::from_value(&json!({"type": "string", "pattern": "^(?!x)a$"})).expect("parses");
        let pattern = schema.pattern.expect("pattern");
        assert_eq!(pattern.source, "^(?!x)a$");
        assert!(pattern.regex().is_none());
    }

    #[test]
    fn newer_exclusive_bounds_are_read() {
        let schema =
            Schema::from_value(&json!({"type": "number", "exclusiveMaximum": 5})).expect("parses");
        assert_eq!(
            (schema.maximum, schema.exclusive_maximum),
            (Some(5.0), true)
        );
    }

    #[test]
    fn deep_nesting_is_an_error() {
        let mut value = json!({"type": "string"});
        for _ in 0..(MAX_SCHEMA_DEPTH + 2) {
            value = json!({"type": "array", "items": value});
        }
        assert!(matches!(
            Schema::from_value(&value),
            Err(SchemaError::TooDeep { .. })
        ));
    }

    #[test]
    fn the_deepest_accepted_schema_validates_defaults_and_prunes() {
        let mut schema =
            json!({"type": "object", "properties": {"leaf": {"type": "string", "default": "d"}}});
        let mut value = json!({"extra": 1});
        for _ in 0..(MAX_SCHEMA_DEPTH / 2 - 1) {
            schema =
                json!({"type": "object", "properties": {"l": {"type": "array", "items": schema}}});
            value = json!({"l": [value]});
        }
        let schema = Schema::from_value(&schema).expect("parses");
        assert_eq!(crate::validate(&schema, &value).len(), 1);
        crate::apply_defaults(&schema, &mut value);
        assert_eq!(crate::prune(&schema, &mut value).len(), 1);
        assert!(crate::validate(&schema, &value).is_empty());
    }
}
