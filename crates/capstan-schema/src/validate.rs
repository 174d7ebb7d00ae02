//! Validation of a JSON value against a structural schema.
//!
//! Follows the Kubernetes API server's rules for custom resources: types (with `nullable` and
//! `x-kubernetes-int-or-string`), value constraints, unknown fields (as strict field validation
//! reports them), list uniqueness for `x-kubernetes-list-type: set|map`, and `allOf`/`anyOf`/
//! `oneOf`/`not` as value validations (their branches never make a field known). `metadata` at
//! the root (and in embedded resources) is only checked to be an object, as Kubernetes validates
//! ObjectMeta separately; embedded resources must have string `apiVersion` and `kind`.
//!
//! Stricter than the API server in one respect: `format: int32`/`int64` ranges are enforced,
//! because Go controllers cannot decode values outside them.
//!
//! CEL rules (`x-kubernetes-validations`) are evaluated after the structural checks (see the
//! `cel` module); [`validate_update`] gives them the stored object for transition rules.
//! [`validate_report`] lists every rule that applied but could not be compiled, and every
//! `pattern` that could not be compiled, so that callers can say what was not checked instead of
//! implying it passed.

use std::collections::HashSet;
use std::fmt;

use capstan_model::path::FieldPath;
use serde_json::{Map, Number, Value};

use crate::format;
use crate::schema::{AdditionalProperties, ListType, Schema, SchemaType};

/// What kind of rule a value broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ViolationKind {
    /// `type`, `nullable`, `x-kubernetes-int-or-string`.
    WrongType,
    /// `required` (and `apiVersion`/`kind` of embedded resources).
    Required,
    /// A field the schema does not define.
    UnknownField,
    /// `enum`.
    Enum,
    /// `pattern`.
    Pattern,
    /// `format`.
    Format,
    /// `minimum`, `maximum`, their exclusive forms, `multipleOf`.
    Range,
    /// `minLength`, `maxLength`.
    Length,
    /// `minItems`, `maxItems`.
    Items,
    /// `minProperties`, `maxProperties`.
    Properties,
    /// `uniqueItems`, `x-kubernetes-list-type: set|map`.
    Duplicate,
    /// `anyOf`: no branch matched.
    AnyOf,
    /// `oneOf`: not exactly one branch matched.
    OneOf,
    /// `not`: the branch matched.
    Not,
    /// An `x-kubernetes-validations` rule failed (or could not be evaluated), reported with the
    /// rule's reason.
    Rule(crate::cel::RuleReason),
}

/// One way a value breaks its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The offending field (for `Required`, the missing field).
    pub path: FieldPath,
    /// Which rule.
    pub kind: ViolationKind,
    /// What is wrong, without the path.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// A CEL rule that applied to a value but was not evaluated, because it does not compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnevaluatedRule {
    /// The field the rule is attached to.
    pub path: FieldPath,
    /// The CEL expression.
    pub rule: String,
    /// The rule's message, if it has one.
    pub message: Option<String>,
}

/// A `pattern` that applied to a value but could not be compiled, so was not checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UncheckedPattern {
    /// The field.
    pub path: FieldPath,
    /// The pattern.
    pub pattern: String,
}

/// Everything [`validate_report`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidationReport {
    /// Broken rules.
    pub violations: Vec<Violation>,
    /// CEL rules that applied but could not be compiled, so were not evaluated.
    pub unevaluated_rules: Vec<UnevaluatedRule>,
    /// Patterns that applied but could not be compiled.
    pub unchecked_patterns: Vec<UncheckedPattern>,
}

impl ValidationReport {
    /// Whether no violation was found (unevaluated rules aside).
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The violations of `value` against `schema`, the root of a custom resource's schema.
pub fn validate(schema: &Schema, value: &Value) -> Vec<Violation> {
    validate_report(schema, value).violations
}

/// Violations plus what could not be checked (CEL rules, uncompilable patterns), for a value
/// being created.
pub fn validate_report(schema: &Schema, value: &Value) -> ValidationReport {
    validate_update(schema, value, None)
}

/// [`validate_report`] for a value replacing `old` (the stored value, in the same version), so
/// that transition rules (`oldSelf`) are evaluated and unchanged values are not checked again by
/// CEL rules; `None` for a value being created.
pub fn validate_update(schema: &Schema, value: &Value, old: Option<&Value>) -> ValidationReport {
    let mut validator = Validator {
        report: ValidationReport::default(),
    };
    validator.check(schema, value, &FieldPath::root(), Mode::Structural, true);
    let mut report = validator.report;
    if let Some(old) = old {
        report
            .violations
            .retain(|violation| !ratchets(violation, value, old));
    }
    crate::cel::Evaluator::new(&mut report.violations, &mut report.unevaluated_rules).walk(
        schema,
        value,
        old,
        &FieldPath::root(),
    );
    report
}

/// Whether an update may keep a value that breaks a value rule because it did not change
/// (kube-apiserver's validation ratcheting): an object stored before a rule applied to it — by an
/// earlier capstan, or before a CRD tightened its schema — stays writable, and each field is held
/// to the rules once it is changed. A missing required field ratchets while the object that lacks
/// it is unchanged. Types and unknown fields never ratchet (a stored object has neither wrong), and
/// CEL rules ratchet in their own evaluation.
fn ratchets(violation: &Violation, value: &Value, old: &Value) -> bool {
    let unchanged = |path: &FieldPath| {
        let before = path.lookup(old);
        before.is_some() && before == path.lookup(value)
    };
    match violation.kind {
        ViolationKind::WrongType | ViolationKind::UnknownField | ViolationKind::Rule(_) => false,
        ViolationKind::Required => violation.path.parent().is_some_and(|p| unchanged(&p)),
        ViolationKind::Enum
        | ViolationKind::Pattern
        | ViolationKind::Format
        | ViolationKind::Range
        | ViolationKind::Length
        | ViolationKind::Items
        | ViolationKind::Properties
        | ViolationKind::Duplicate
        | ViolationKind::AnyOf
        | ViolationKind::OneOf
        | ViolationKind::Not => unchanged(&violation.path),
    }
}

/// Whether unknown fields and uncheckable rules are reported. Inside `allOf`/`anyOf`/`oneOf`/
/// `not` branches only value validations apply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Structural,
    Branch,
}

struct Validator {
    report: ValidationReport,
}

/// Longest rendering of a value inside a message.
const SHOWN_VALUE_CHARS: usize = 80;

/// A value as shown in messages, shortened.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_VALUE_CHARS {
        return text;
    }
    let mut short: String = text.chars().take(SHOWN_VALUE_CHARS).collect();
    short.push('…');
    short
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, schema_type: SchemaType) -> bool {
    match schema_type {
        SchemaType::Object => value.is_object(),
        SchemaType::Array => value.is_array(),
        SchemaType::String => value.is_string(),
        SchemaType::Integer => matches!(value, Value::Number(n) if !n.is_f64()),
        SchemaType::Number => value.is_number(),
        SchemaType::Boolean => value.is_boolean(),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Validator {
    fn violation(&mut self, path: &FieldPath, kind: ViolationKind, message: String) {
        self.report.violations.push(Violation {
            path: path.clone(),
            kind,
            message,
        });
    }

    /// Whether `value` satisfies `schema` as a branch, without recording anything.
    fn matches(schema: &Schema, value: &Value, path: &FieldPath) -> bool {
        let mut probe = Validator {
            report: ValidationReport::default(),
        };
        probe.check(schema, value, path, Mode::Branch, false);
        probe.report.violations.is_empty()
    }

    fn check(&mut self, schema: &Schema, value: &Value, path: &FieldPath, mode: Mode, root: bool) {
        if !self.check_type(schema, value, path) || value.is_null() {
            return;
        }
        if let Some(allowed) = &schema.enum_values
            && !allowed.iter().any(|a| json_equal(a, value))
        {
            let list: Vec<String> = allowed.iter().map(shown).collect();
            self.violation(
                path,
                ViolationKind::Enum,
                format!(
                    "unsupported value {}: supported values: {}",
                    shown(value),
                    list.join(", ")
                ),
            );
        }
        if let Some(format) = &schema.format
            && format::check(format, value) == Some(false)
        {
            self.violation(
                path,
                ViolationKind::Format,
                // `byte` values are base64 data — a Secret's among them: never echoed.
                if format == "byte" {
                    "is not valid base64 (format byte; the value is not shown)".to_owned()
                } else {
                    format!("{} is not a valid {format}", shown(value))
                },
            );
        }
        match value {
            Value::String(s) => self.check_string(schema, s, path, mode),
            Value::Number(n) => self.check_number(schema, n, path),
            Value::Array(items) => self.check_array(schema, items, path, mode),
            Value::Object(map) => self.check_object(schema, map, path, mode, root),
            Value::Bool(_) | Value::Null => {}
        }
        self.check_branches(schema, value, path);
    }

    /// Checks `type`, `nullable` and int-or-string; whether further checks make sense.
    fn check_type(&mut self, schema: &Schema, value: &Value, path: &FieldPath) -> bool {
        let expected = if schema.int_or_string {
            let ok = matches!(value, Value::String(_))
                || matches!(value, Value::Number(n) if !n.is_f64());
            (!ok).then_some("integer or string")
        } else {
            schema
                .schema_type
                .filter(|t| !has_type(value, *t))
                .map(SchemaType::name)
        };
        match expected {
            _ if value.is_null() && schema.nullable => true,
            None => true,
            Some(expected) => {
                self.violation(
                    path,
                    ViolationKind::WrongType,
                    format!("must be of type {expected}, not {}", json_type(value)),
                );
                false
            }
        }
    }

    fn check_string(&mut self, schema: &Schema, s: &str, path: &FieldPath, mode: Mode) {
        if let Some(pattern) = &schema.pattern {
            match pattern.regex() {
                Some(regex) if !regex.is_match(s) => {
                    self.violation(
                        path,
                        ViolationKind::Pattern,
                        format!(
                            "{} does not match the pattern {}",
                            shown(&Value::String(s.to_owned())),
                            pattern.source
                        ),
                    );
                }
                Some(_) => {}
                None if mode == Mode::Structural => {
                    self.report.unchecked_patterns.push(UncheckedPattern {
                        path: path.clone(),
                        pattern: pattern.source.clone(),
                    });
                }
                None => {}
            }
        }
        let length = u64::try_from(s.chars().count()).unwrap_or(u64::MAX);
        if let Some(min) = schema.min_length
            && length < min
        {
            self.violation(
                path,
                ViolationKind::Length,
                format!(
                    "must be at least {} long, is {length}",
                    plural(min, "character", "characters")
                ),
            );
        }
        if let Some(max) = schema.max_length
            && length > max
        {
            self.violation(
                path,
                ViolationKind::Length,
                format!(
                    "may not be longer than {}, is {length}",
                    plural(max, "character", "characters")
                ),
            );
        }
    }

    fn check_number(&mut self, schema: &Schema, n: &Number, path: &FieldPath) {
        let Some(x) = n.as_f64() else {
            return;
        };
        if let Some(min) = schema.minimum {
            let (ok, relation) = if schema.exclusive_minimum {
                (x > min, "greater than")
            } else {
                (x >= min, "greater than or equal to")
            };
            if !ok {
                self.violation(
                    path,
                    ViolationKind::Range,
                    format!("must be {relation} {}, is {n}", number_text(min)),
                );
            }
        }
        if let Some(max) = schema.maximum {
            let (ok, relation) = if schema.exclusive_maximum {
                (x < max, "less than")
            } else {
                (x <= max, "less than or equal to")
            };
            if !ok {
                self.violation(
                    path,
                    ViolationKind::Range,
                    format!("must be {relation} {}, is {n}", number_text(max)),
                );
            }
        }
        if let Some(divisor) = schema.multiple_of {
            let quotient = x / divisor;
            if divisor > 0.0 && quotient.is_finite() && (quotient - quotient.round()).abs() > 1e-9 {
                self.violation(
                    path,
                    ViolationKind::Range,
                    format!("must be a multiple of {}, is {n}", number_text(divisor)),
                );
            }
        }
    }

    fn check_array(&mut self, schema: &Schema, items: &[Value], path: &FieldPath, mode: Mode) {
        let count = u64::try_from(items.len()).unwrap_or(u64::MAX);
        if let Some(min) = schema.min_items
            && count < min
        {
            self.violation(
                path,
                ViolationKind::Items,
                format!(
                    "must have at least {}, has {count}",
                    plural(min, "item", "items")
                ),
            );
        }
        if let Some(max) = schema.max_items
            && count > max
        {
            self.violation(
                path,
                ViolationKind::Items,
                format!(
                    "must have at most {}, has {count}",
                    plural(max, "item", "items")
                ),
            );
        }
        match schema.list_type {
            Some(ListType::Map) => self.check_unique(items, path, |item| {
                let keys: Vec<Value> = schema
                    .list_map_keys
                    .iter()
                    .map(|key| item.get(key.as_str()).cloned().unwrap_or(Value::Null))
                    .collect();
                Value::Array(keys)
            }),
            Some(ListType::Set) => self.check_unique(items, path, Value::clone),
            _ if schema.unique_items => self.check_unique(items, path, Value::clone),
            _ => {}
        }
        if let Some(item_schema) = &schema.items {
            for (i, item) in items.iter().enumerate() {
                self.check(item_schema, item, &path.index(i), mode, false);
            }
        }
    }

    /// Reports every item whose identity (`identity(item)`) repeats an earlier item's.
    fn check_unique(
        &mut self,
        items: &[Value],
        path: &FieldPath,
        identity: impl Fn(&Value) -> Value,
    ) {
        let mut seen = HashSet::new();
        for (i, item) in items.iter().enumerate() {
            let id = identity(item);
            if !seen.insert(canonical(&id)) {
                self.violation(
                    &path.index(i),
                    ViolationKind::Duplicate,
                    format!("duplicate entry {}", shown(&id)),
                );
            }
        }
    }

    fn check_object(
        &mut self,
        schema: &Schema,
        map: &Map<String, Value>,
        path: &FieldPath,
        mode: Mode,
        root: bool,
    ) {
        let count = u64::try_from(map.len()).unwrap_or(u64::MAX);
        if let Some(min) = schema.min_properties
            && count < min
        {
            self.violation(
                path,
                ViolationKind::Properties,
                format!(
                    "must have at least {}, has {count}",
                    plural(min, "property", "properties")
                ),
            );
        }
        if let Some(max) = schema.max_properties
            && count > max
        {
            self.violation(
                path,
                ViolationKind::Properties,
                format!(
                    "must have at most {}, has {count}",
                    plural(max, "property", "properties")
                ),
            );
        }
        for name in &schema.required {
            if !map.contains_key(name) {
                self.violation(
                    &path.key(name.as_str()),
                    ViolationKind::Required,
                    "required field is missing".to_owned(),
                );
            }
        }
        let resource = root || schema.embedded_resource;
        if schema.embedded_resource && mode == Mode::Structural {
            for name in ["apiVersion", "kind"] {
                if !map.contains_key(name) {
                    self.violation(
                        &path.key(name),
                        ViolationKind::Required,
                        "required field of an embedded resource is missing".to_owned(),
                    );
                }
            }
        }
        for (name, value) in map {
            let field = path.key(name.as_str());
            if resource && name == "metadata" {
                if !value.is_object() {
                    self.violation(
                        &field,
                        ViolationKind::WrongType,
                        format!("must be of type object, not {}", json_type(value)),
                    );
                }
                continue;
            }
            if let Some(property) = schema.properties.get(name) {
                self.check(property, value, &field, mode, false);
                continue;
            }
            match &schema.additional_properties {
                Some(AdditionalProperties::Schema(additional)) => {
                    self.check(additional, value, &field, mode, false);
                    continue;
                }
                Some(AdditionalProperties::Allowed(true)) => continue,
                Some(AdditionalProperties::Allowed(false)) | None => {}
            }
            // `apiVersion` and `kind` belong to every resource, declared by its schema or not.
            if resource && (name == "apiVersion" || name == "kind") {
                if !value.is_string() {
                    self.violation(
                        &field,
                        ViolationKind::WrongType,
                        format!("must be of type string, not {}", json_type(value)),
                    );
                }
                continue;
            }
            if mode == Mode::Structural && !schema.preserve_unknown_fields {
                self.violation(
                    &field,
                    ViolationKind::UnknownField,
                    format!("unknown field \"{name}\""),
                );
            }
        }
    }

    fn check_branches(&mut self, schema: &Schema, value: &Value, path: &FieldPath) {
        for branch in &schema.all_of {
            self.check(branch, value, path, Mode::Branch, false);
        }
        if !schema.any_of.is_empty()
            && !schema
                .any_of
                .iter()
                .any(|branch| Self::matches(branch, value, path))
        {
            self.violation(
                path,
                ViolationKind::AnyOf,
                format!(
                    "{} matches none of the {} anyOf schemas",
                    shown(value),
                    schema.any_of.len()
                ),
            );
        }
        if !schema.one_of.is_empty() {
            let matching = schema
                .one_of
                .iter()
                .filter(|branch| Self::matches(branch, value, path))
                .count();
            if matching != 1 {
                self.violation(
                    path,
                    ViolationKind::OneOf,
                    format!(
                        "must match exactly one of the {} oneOf schemas, matches {matching}",
                        schema.one_of.len()
                    ),
                );
            }
        }
        if let Some(not) = &schema.not
            && Self::matches(not, value, path)
        {
            self.violation(
                path,
                ViolationKind::Not,
                "must not match the `not` schema".to_owned(),
            );
        }
    }
}

/// A bound as written: integers without a fraction.
fn number_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        x.to_string()
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_equal(x, y),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(k, x)| ys.get(k).is_some_and(|y| json_equal(x, y)))
        }
        _ => a == b,
    }
}

fn number_equal(x: &Number, y: &Number) -> bool {
    match (integer(x), integer(y)) {
        (Some(i), Some(j)) => i == j,
        _ => x.as_f64() == y.as_f64(),
    }
}

fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// A string that is equal for values [`json_equal`] calls equal: object keys sorted, integral
/// numbers written as integers.
fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => match integer(n) {
            Some(i) => out.push_str(&i.to_string()),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 1e18 => {
                    out.push_str(&format!("{f:.0}"));
                }
                _ => out.push_str(&n.to_string()),
            },
        },
        Value::Array(items) => {
            out.push('[');
            for item in items {
                write_canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(v, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Schema {
        Schema::from_value(&value).expect("schema parses")
    }

    /// (path, kind) of each violation.
    fn found(schema_value: Value, value: Value) -> Vec<(String, ViolationKind)> {
        validate(&schema(schema_value), &value)
            .into_iter()
            .map(|v| (v.path.to_string(), v.kind))
            .collect()
    }

    fn one(path: &str, kind: ViolationKind) -> Vec<(String, ViolationKind)> {
        vec![(path.to_owned(), kind)]
    }

    fn object_with(property: Value) -> Value {
        json!({"type": "object", "properties": {"f": property}})
    }

    use ViolationKind as K;

    /// Validation ratcheting, case by case: (old, new, what is reported).
    #[test]
    fn unchanged_values_that_break_value_rules_ratchet_on_update() {
        let schema = schema(json!({
            "type": "object",
            "properties": {
                "status": {"type": "object", "properties": {
                    "phase": {"type": "string", "enum": ["Running", "Failed"]},
                    "conditions": {"type": "array", "items": {
                        "type": "object",
                        "required": ["type", "message"],
                        "properties": {
                            "type": {"type": "string"},
                            "message": {"type": "string"},
                            "reason": {"type": "string", "pattern": "^[A-Za-z]+$"},
                        },
                    }},
                    "initialization": {"type": "object", "minProperties": 1,
                        "properties": {"provisioned": {"type": "boolean"}}},
                }},
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}},
            },
        }));
        let stored = json!({
            "spec": {"replicas": 0},
            "status": {
                "phase": "Ready",
                "conditions": [{"type": "Ready", "reason": "not ready"}],
                "initialization": {},
            },
        });
        let report = |old: Option<&Value>, new: &Value| -> Vec<(String, ViolationKind)> {
            validate_update(&schema, new, old)
                .violations
                .into_iter()
                .map(|v| (v.path.to_string(), v.kind))
                .collect()
        };
        // Created as it is: every rule applies.
        assert_eq!(report(None, &stored).len(), 5);
        // Updated without touching those fields (a label added): nothing to report.
        let mut labelled = stored.clone();
        labelled["metadata"] = json!({"labels": {"a": "b"}});
        assert_eq!(report(Some(&stored), &labelled), []);
        // A changed field is held to its rule again, and a changed object to its required
        // fields; the others still ratchet.
        let mut changed = stored.clone();
        changed["spec"]["replicas"] = json!(-1);
        changed["status"]["conditions"][0]["reason"] = json!("still not");
        assert_eq!(
            report(Some(&stored), &changed),
            [
                ("spec.replicas".to_owned(), K::Range),
                ("status.conditions[0].message".to_owned(), K::Required),
                ("status.conditions[0].reason".to_owned(), K::Pattern),
            ]
        );
        // A required field ratchets only while the object lacking it is unchanged.
        let mut edited = stored.clone();
        edited["status"]["conditions"][0]["type"] = json!("Available");
        assert_eq!(
            report(Some(&stored), &edited),
            [("status.conditions[0].message".to_owned(), K::Required)]
        );
        let mut added = stored.clone();
        added["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Available"}));
        assert_eq!(
            report(Some(&stored), &added),
            [("status.conditions[1].message".to_owned(), K::Required)]
        );
        // Types never ratchet.
        let mut retyped = stored.clone();
        retyped["status"]["phase"] = json!(1);
        let old_typed_wrong = retyped.clone();
        assert_eq!(
            report(Some(&old_typed_wrong), &retyped),
            [("status.phase".to_owned(), K::WrongType)]
        );
    }

    #[test]
    fn types() {
        for (t, good, bad) in [
            ("string", json!("a"), json!(1)),
            ("integer", json!(1), json!(1.5)),
            ("number", json!(1.5), json!("1")),
            ("number", json!(1), json!(true)),
            ("boolean", json!(false), json!("false")),
            ("array", json!([]), json!({})),
            ("object", json!({}), json!([])),
        ] {
            assert_eq!(
                found(object_with(json!({"type": t})), json!({"f": good})),
                []
            );
            assert_eq!(
                found(object_with(json!({"type": t})), json!({"f": bad})),
                one("f", K::WrongType),
                "{t}"
            );
        }
        let v = validate(
            &schema(object_with(json!({"type": "integer"}))),
            &json!({"f": "x"}),
        );
        assert_eq!(v[0].to_string(), "f: must be of type integer, not string");
    }

    #[test]
    fn nullable() {
        assert_eq!(
            found(object_with(json!({"type": "string"})), json!({"f": null})),
            one("f", K::WrongType)
        );
        assert_eq!(
            found(
                object_with(json!({"type": "string", "nullable": true, "minLength": 3})),
                json!({"f": null})
            ),
            []
        );
    }

    #[test]
    fn required() {
        let s = json!({"type": "object", "required": ["a", "b"], "properties": {"a": {}, "b": {}}});
        assert_eq!(found(s.clone(), json!({"a": 1, "b": 2})), []);
        assert_eq!(found(s, json!({"a": 1})), one("b", K::Required));
    }

    #[test]
    fn unknown_fields_and_additional_properties() {
        let s = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(
            found(s, json!({"a": "x", "b": 1})),
            one("b", K::UnknownField)
        );
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(found(map.clone(), json!({"x": "1", "y": "2"})), []);
        assert_eq!(found(map, json!({"x": 1})), one("x", K::WrongType));
        let any = json!({"type": "object", "additionalProperties": true});
        assert_eq!(found(any, json!({"x": [1]})), []);
        let none = json!({"type": "object", "additionalProperties": false});
        assert_eq!(found(none, json!({"x": 1})), one("x", K::UnknownField));
        let preserve = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"a": {"type": "integer"}}});
        assert_eq!(found(preserve.clone(), json!({"z": {"deep": 1}})), []);
        assert_eq!(found(preserve, json!({"a": "no"})), one("a", K::WrongType));
        let empty = json!({"type": "object"});
        assert_eq!(found(empty, json!({"x": 1})), one("x", K::UnknownField));
    }

    #[test]
    fn root_metadata_is_only_checked_to_be_an_object() {
        let s = json!({"type": "object", "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}}});
        assert_eq!(
            found(
                s.clone(),
                json!({"metadata": {"name": "x", "labels": {"a": "b"}}})
            ),
            []
        );
        assert_eq!(
            found(s, json!({"metadata": "x"})),
            one("metadata", K::WrongType)
        );
        let nested = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"metadata": {"type": "object"}}}}});
        assert_eq!(
            found(nested, json!({"spec": {"metadata": {"name": "x"}}})),
            one("spec.metadata.name", K::UnknownField)
        );
    }

    #[test]
    fn embedded_resources_allow_type_fields_and_metadata() {
        let s = object_with(
            json!({"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": false, "properties": {"spec": {"type": "object"}}}),
        );
        assert_eq!(
            found(
                s.clone(),
                json!({"f": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}})
            ),
            []
        );
        assert_eq!(
            found(s, json!({"f": {"kind": "Pod"}})),
            one("f.apiVersion", K::Required)
        );
    }

    #[test]
    fn enums_compare_numbers_by_value() {
        let s = object_with(json!({"enum": ["a", "b", 1]}));
        assert_eq!(found(s.clone(), json!({"f": "a"})), []);
        assert_eq!(found(s.clone(), json!({"f": 1.0})), []);
        assert_eq!(found(s.clone(), json!({"f": "c"})), one("f", K::Enum));
        let v = validate(&schema(s), &json!({"f": "c"}));
        assert_eq!(
            v[0].message,
            r#"unsupported value "c": supported values: "a", "b", 1"#
        );
    }

    #[test]
    fn patterns() {
        let s = object_with(json!({"type": "string", "pattern": "^[a-z]+$"}));
        assert_eq!(found(s.clone(), json!({"f": "abc"})), []);
        assert_eq!(found(s, json!({"f": "ABC"})), one("f", K::Pattern));
        let unsupported = object_with(json!({"type": "string", "pattern": "^(?!bad)"}));
        let report = validate_report(&schema(unsupported), &json!({"f": "bad"}));
        assert!(report.is_valid());
        assert_eq!(report.unchecked_patterns.len(), 1);
        assert_eq!(report.unchecked_patterns[0].path.to_string(), "f");
    }

    #[test]
    fn formats() {
        let s = object_with(json!({"type": "integer", "format": "int32"}));
        assert_eq!(found(s.clone(), json!({"f": 5})), []);
        assert_eq!(
            found(s, json!({"f": 5_000_000_000_i64})),
            one("f", K::Format)
        );
        let s = object_with(json!({"type": "string", "format": "date-time"}));
        assert_eq!(found(s.clone(), json!({"f": "2024-01-01T00:00:00Z"})), []);
        assert_eq!(found(s, json!({"f": "soon"})), one("f", K::Format));
        let s = object_with(json!({"type": "string", "format": "something-else"}));
        assert_eq!(found(s, json!({"f": "anything"})), []);
    }

    #[test]
    fn ranges() {
        let s = object_with(json!({"type": "number", "minimum": 1, "maximum": 10}));
        assert_eq!(found(s.clone(), json!({"f": 1})), []);
        assert_eq!(found(s.clone(), json!({"f": 10.0})), []);
        assert_eq!(found(s.clone(), json!({"f": 0})), one("f", K::Range));
        assert_eq!(found(s, json!({"f": 10.5})), one("f", K::Range));
        let s = object_with(
            json!({"type": "integer", "minimum": 1, "exclusiveMinimum": true,
            "maximum": 10, "exclusiveMaximum": true}),
        );
        assert_eq!(found(s.clone(), json!({"f": 1})), one("f", K::Range));
        assert_eq!(found(s.clone(), json!({"f": 10})), one("f", K::Range));
        assert_eq!(found(s.clone(), json!({"f": 5})), []);
        let v = validate(&schema(s), &json!({"f": 1}));
        assert_eq!(v[0].message, "must be greater than 1, is 1");
        let s = object_with(json!({"type": "integer", "multipleOf": 5}));
        assert_eq!(found(s.clone(), json!({"f": 15})), []);
        assert_eq!(found(s, json!({"f": 7})), one("f", K::Range));
    }

    #[test]
    fn lengths_count_characters() {
        let s = object_with(json!({"type": "string", "minLength": 2, "maxLength": 3}));
        assert_eq!(found(s.clone(), json!({"f": "héé"})), []);
        assert_eq!(found(s.clone(), json!({"f": "h"})), one("f", K::Length));
        assert_eq!(found(s.clone(), json!({"f": "héél"})), one("f", K::Length));
        let v = validate(&schema(s), &json!({"f": "abcd"}));
        assert_eq!(v[0].message, "may not be longer than 3 characters, is 4");
    }

    #[test]
    fn item_and_property_counts() {
        let s = object_with(
            json!({"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "integer"}}),
        );
        assert_eq!(found(s.clone(), json!({"f": [1]})), []);
        assert_eq!(found(s.clone(), json!({"f": []})), one("f", K::Items));
        assert_eq!(
            found(s.clone(), json!({"f": [1, 2, 3]})),
            one("f", K::Items)
        );
        assert_eq!(found(s, json!({"f": [1, "x"]})), one("f[1]", K::WrongType));
        let s = object_with(
            json!({"type": "object", "minProperties": 1, "maxProperties": 1,
            "additionalProperties": true}),
        );
        assert_eq!(found(s.clone(), json!({"f": {"a": 1}})), []);
        assert_eq!(found(s.clone(), json!({"f": {}})), one("f", K::Properties));
        assert_eq!(
            found(s, json!({"f": {"a": 1, "b": 2}})),
            one("f", K::Properties)
        );
    }

    #[test]
    fn list_types_and_unique_items() {
        let set = object_with(
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}),
        );
        assert_eq!(found(set.clone(), json!({"f": ["a", "b"]})), []);
        assert_eq!(
            found(set, json!({"f": ["a", "b", "a"]})),
            one("f[2]", K::Duplicate)
        );
        let map = object_with(json!({"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name", "port"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "number"}, "x": {}}}}));
        assert_eq!(
            found(
                map.clone(),
                json!({"f": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]})
            ),
            []
        );
        assert_eq!(
            found(
                map,
                json!({"f": [{"name": "a", "port": 1, "x": 1}, {"port": 1.0, "name": "a", "x": 2}]})
            ),
            one("f[1]", K::Duplicate)
        );
        let unique = object_with(json!({"type": "array", "uniqueItems": true}));
        assert_eq!(
            found(unique, json!({"f": [{"a": 1}, {"a": 1}]})),
            one("f[1]", K::Duplicate)
        );
        let atomic = object_with(json!({"type": "array", "x-kubernetes-list-type": "atomic"}));
        assert_eq!(found(atomic, json!({"f": [1, 1]})), []);
    }

    #[test]
    fn int_or_string() {
        let s = object_with(json!({"x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^[0-9]+%$"}]}));
        assert_eq!(found(s.clone(), json!({"f": 3})), []);
        assert_eq!(found(s.clone(), json!({"f": "30%"})), []);
        assert_eq!(found(s.clone(), json!({"f": 1.5})), one("f", K::WrongType));
        assert_eq!(found(s.clone(), json!({"f": true})), one("f", K::WrongType));
        assert_eq!(found(s, json!({"f": "x"})), one("f", K::AnyOf));
    }

    #[test]
    fn combinators() {
        let all =
            object_with(json!({"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}));
        assert_eq!(found(all.clone(), json!({"f": 3})), []);
        assert_eq!(found(all, json!({"f": 9})), one("f", K::Range));
        let one_of = object_with(json!({"type": "object", "properties": {"a": {}, "b": {}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}));
        assert_eq!(found(one_of.clone(), json!({"f": {"a": 1}})), []);
        assert_eq!(
            found(one_of.clone(), json!({"f": {"a": 1, "b": 2}})),
            one("f", K::OneOf)
        );
        assert_eq!(found(one_of, json!({"f": {}})), one("f", K::OneOf));
        let not = object_with(json!({"type": "object", "properties": {"a": {}, "b": {}},
            "not": {"required": ["a", "b"]}}));
        assert_eq!(found(not.clone(), json!({"f": {"a": 1}})), []);
        assert_eq!(found(not, json!({"f": {"a": 1, "b": 1}})), one("f", K::Not));
        // Branches never make a field known, and never report unknown fields themselves.
        let branch_props = object_with(json!({"type": "object", "properties": {"a": {}},
            "anyOf": [{"properties": {"a": {"type": "string"}}}]}));
        assert_eq!(found(branch_props.clone(), json!({"f": {"a": "x"}})), []);
        assert_eq!(
            found(branch_props, json!({"f": {"a": 1}})),
            one("f", K::AnyOf)
        );
    }

    #[test]
    fn cel_rules_are_evaluated_and_uncompilable_ones_reported() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.a > 0", "message": "a must be positive"}],
                     "properties": {"a": {"type": "integer"}}},
            "other": {"type": "object", "x-kubernetes-validations": [{"rule": "nope.a"}]}}}));
        let report = validate_report(&s, &json!({"spec": {"a": -1}, "other": {}}));
        assert_eq!(
            report.violations,
            [Violation {
                path: FieldPath::parse("spec"),
                kind: ViolationKind::Rule(crate::cel::RuleReason::Invalid),
                message: "Invalid value: \"object\": a must be positive".into()
            }]
        );
        assert_eq!(
            report.unevaluated_rules,
            [UnevaluatedRule {
                path: FieldPath::parse("other"),
                rule: "nope.a".into(),
                message: None
            }]
        );
    }

    #[test]
    fn canonical_form_ignores_key_order_and_number_spelling() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": [2.0]})),
            canonical(&json!({"a": [2], "b": 1.0}))
        );
        assert_ne!(canonical(&json!("1")), canonical(&json!(1)));
        assert!(json_equal(&json!({"a": [1]}), &json!({"a": [1.0]})));
    }
}
