//! CEL validation rules (`x-kubernetes-validations`), compiled once and evaluated as
//! kube-apiserver evaluates them for custom resources.
//!
//! - A rule is compiled the first time it is needed (when a definition is admitted, or when the
//!   first object meets it) and kept with its schema node ([`CompiledCell`]); compiling checks
//!   what kube-apiserver's type checker would refuse that a parse alone does not: references to
//!   variables other than `self`/`oldSelf` (and macro variables), unknown functions, an unknown
//!   `reason`, a `fieldPath` that is not a relative path, and expressions nested too deeply.
//! - `self` is the value at the rule's node, typed by the schema (a `number` field is a double even
//!   when written as an integer). A rule that mentions `oldSelf` is a transition rule: evaluated
//!   only on update, and only where the old value can be correlated (object properties, map
//!   values, `x-kubernetes-list-type: map` items by key) — or, with `optionalOldSelf`, also
//!   without one (`oldSelf` then has no value: `oldSelf.hasValue()` is false). A rule whose value
//!   did not change on update is not evaluated again (kube-apiserver's validation ratcheting), so
//!   objects stored before a rule existed stay writable.
//! - Cost is bounded before evaluation: each rule's cost is estimated from its expression and the
//!   size of the largest list or map it can iterate over (nested macros multiply), and a rule
//!   estimated above [`PER_CALL_COST_LIMIT`], or a request whose rules together exceed
//!   [`REQUEST_COST_BUDGET`], is refused rather than evaluated, so that no request can hang on a
//!   large list.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use capstan_model::path::FieldPath;
use cel_interpreter::extractors::{Arguments, This};
use cel_interpreter::objects::{Key, Map as CelMap};
use cel_interpreter::{Context, ExecutionError, FunctionContext, Value as CelValue};
use cel_parser::Expression;
use cel_parser::ast::{EntryExpr, Expr};
use serde_json::Value;

use crate::schema::{AdditionalProperties, ListType, Schema, SchemaType, ValidationRule};
use crate::validate::{UnevaluatedRule, Violation, ViolationKind};

/// kube-apiserver's limit on the cost of one evaluation of one rule.
pub const PER_CALL_COST_LIMIT: u64 = 1_000_000;

/// kube-apiserver's limit on the cost of every rule evaluated for one request.
pub const REQUEST_COST_BUDGET: u64 = 10_000_000;

/// Deepest nesting of a rule's expression accepted; kube-apiserver's parser refuses deeper ones
/// too, and the bound keeps evaluation's recursion well within a thread's stack.
const MAX_EXPRESSION_DEPTH: usize = 48;

/// Longest rule text compiled.
const MAX_RULE_LENGTH: usize = 8 * 1024;

/// Regular expressions of `matches` kept compiled across evaluations.
const CACHED_PATTERNS: usize = 64;

/// Why a rule cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// The expression does not parse.
    #[error("compilation failed: {0}")]
    Syntax(String),
    /// A variable other than `self`, `oldSelf` or a macro's.
    #[error("compilation failed: undeclared reference to '{0}'")]
    UndeclaredVariable(String),
    /// A function the evaluator does not have.
    #[error("compilation failed: undeclared reference to '{0}' (no such function)")]
    UndeclaredFunction(String),
    /// A construct the evaluator does not support (message literals).
    #[error("compilation failed: {0} is not supported")]
    Unsupported(&'static str),
    /// Nested deeper than the evaluator allows.
    #[error("compilation failed: expression nested deeper than {0} levels")]
    TooDeep(usize),
    /// Longer than the evaluator allows.
    #[error("compilation failed: rule longer than {0} bytes")]
    TooLong(usize),
    /// `reason` is not one of the four kube-apiserver accepts.
    #[error(
        "reason {0:?} is not supported: supported values: FieldValueInvalid, FieldValueForbidden, FieldValueRequired, FieldValueDuplicate"
    )]
    Reason(String),
    /// `fieldPath` is not a relative path such as `.spec.name` or `['key']`.
    #[error("fieldPath {0:?} must be a relative JSON path such as .field or ['key']")]
    FieldPath(String),
    /// `messageExpression` does not compile.
    #[error("messageExpression {0}")]
    Message(Box<RuleError>),
}

/// How a failed rule is reported (`reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleReason {
    /// `FieldValueInvalid` (the default).
    Invalid,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
}

/// A rule as evaluated: its expressions parsed and checked.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    rule: Expression,
    message: Option<Expression>,
    transition: bool,
    reason: RuleReason,
    field_path: Vec<String>,
}

/// A rule's compilation, made once on first use and shared by clones of the schema.
#[derive(Clone, Default)]
pub struct CompiledCell(OnceLock<Result<Arc<CompiledRule>, RuleError>>);

impl std::fmt::Debug for CompiledCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.get() {
            None => "not compiled",
            Some(Ok(_)) => "compiled",
            Some(Err(_)) => "invalid",
        };
        f.write_str(state)
    }
}

/// A compilation is a cache of the rule's text: rules are equal when their texts are.
impl PartialEq for CompiledCell {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CompiledCell {}

impl ValidationRule {
    /// Why the rule cannot be evaluated, if it cannot (compiling it on first use).
    pub fn compile_error(&self) -> Option<&RuleError> {
        self.compiled().err()
    }

    pub(crate) fn compiled(&self) -> Result<&Arc<CompiledRule>, &RuleError> {
        self.compiled
            .0
            .get_or_init(|| compile(self).map(Arc::new))
            .as_ref()
    }
}

/// A rule of a schema that does not compile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRule {
    /// Where, as kube-apiserver names it within `openAPIV3Schema`
    /// (`properties[spec].items.x-kubernetes-validations[0].rule`).
    pub place: String,
    /// The rule's expression.
    pub rule: String,
    /// Why it does not compile.
    pub error: RuleError,
}

/// Every rule of `schema` (and below) that does not compile.
pub fn rule_errors(schema: &Schema) -> Vec<InvalidRule> {
    let mut errors = Vec::new();
    collect_errors(schema, "", &mut errors);
    errors
}

fn collect_errors(schema: &Schema, place: &str, errors: &mut Vec<InvalidRule>) {
    let join = |next: &str| {
        if place.is_empty() {
            next.to_owned()
        } else {
            format!("{place}.{next}")
        }
    };
    for (i, rule) in schema.validations.iter().enumerate() {
        if let Some(error) = rule.compile_error() {
            let field = match error {
                RuleError::Reason(_) => "reason",
                RuleError::FieldPath(_) => "fieldPath",
                RuleError::Message(_) => "messageExpression",
                _ => "rule",
            };
            errors.push(InvalidRule {
                place: join(&format!("x-kubernetes-validations[{i}].{field}")),
                rule: rule.rule.clone(),
                error: error.clone(),
            });
        }
    }
    for (name, property) in &schema.properties {
        collect_errors(property, &join(&format!("properties[{name}]")), errors);
    }
    if let Some(AdditionalProperties::Schema(additional)) = &schema.additional_properties {
        collect_errors(additional, &join("additionalProperties"), errors);
    }
    if let Some(items) = &schema.items {
        collect_errors(items, &join("items"), errors);
    }
}

fn compile(rule: &ValidationRule) -> Result<CompiledRule, RuleError> {
    let reason = match rule.reason.as_deref() {
        None | Some("FieldValueInvalid") => RuleReason::Invalid,
        Some("FieldValueForbidden") => RuleReason::Forbidden,
        Some("FieldValueRequired") => RuleReason::Required,
        Some("FieldValueDuplicate") => RuleReason::Duplicate,
        Some(other) => return Err(RuleError::Reason(other.to_owned())),
    };
    let field_path = match &rule.field_path {
        None => Vec::new(),
        Some(text) => parse_field_path(text).ok_or_else(|| RuleError::FieldPath(text.clone()))?,
    };
    let expression = parse(&rule.rule)?;
    let transition = mentions_old_self(&expression);
    let message = match &rule.message_expression {
        None => None,
        Some(text) => Some(parse(text).map_err(|e| RuleError::Message(Box::new(e)))?),
    };
    Ok(CompiledRule {
        rule: expression,
        message,
        transition,
        reason,
        field_path,
    })
}

/// Parses and checks one expression.
fn parse(text: &str) -> Result<Expression, RuleError> {
    if text.len() > MAX_RULE_LENGTH {
        return Err(RuleError::TooLong(MAX_RULE_LENGTH));
    }
    // The parser recurses once per bracket or operator level: refuse what would nest too deeply
    // before parsing.
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut operators = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '<' | '>' | '=' | '!' | '?' | '&' | '|' | '.' => {
                operators += 1;
            }
            _ => {}
        }
        deepest = deepest.max(depth);
    }
    if deepest > MAX_EXPRESSION_DEPTH || operators > 16 * MAX_EXPRESSION_DEPTH {
        return Err(RuleError::TooDeep(MAX_EXPRESSION_DEPTH));
    }
    // The parser panics on some malformed input (an operator without its right operand): that
    // is a syntax error too, never a crash of the request.
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cel_parser::Parser::default().parse(text)
    }));
    let expression = match parsed {
        Ok(Ok(expression)) => expression,
        Ok(Err(errors)) => return Err(RuleError::Syntax(errors.to_string().trim().to_owned())),
        Err(_) => {
            return Err(RuleError::Syntax(format!(
                "{text:?} is not a CEL expression"
            )));
        }
    };
    let mut scope = Vec::new();
    check(&expression, &mut scope, 0)?;
    Ok(expression)
}

/// The functions the evaluator has beyond operators and macros.
const FUNCTIONS: &[&str] = &[
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "matches",
    "hasValue",
    "value",
    "orValue",
    "lowerAscii",
    "upperAscii",
    "isSorted",
];

/// Refuses references the evaluator would fail on at run time, and too deep expressions.
fn check(expression: &Expression, scope: &mut Vec<String>, depth: usize) -> Result<(), RuleError> {
    if depth > MAX_EXPRESSION_DEPTH {
        return Err(RuleError::TooDeep(MAX_EXPRESSION_DEPTH));
    }
    let next = depth + 1;
    match &expression.expr {
        Expr::Unspecified | Expr::Literal(_) => Ok(()),
        Expr::Ident(name) => {
            if name == "self" || name == "oldSelf" || scope.contains(name) {
                Ok(())
            } else {
                Err(RuleError::UndeclaredVariable(name.clone()))
            }
        }
        Expr::Select(select) => check(&select.operand, scope, next),
        Expr::Call(call) => {
            let operator = call.func_name.starts_with('_')
                || call.func_name.starts_with('@')
                || call.func_name == "!_"
                || call.func_name == "-_";
            if !operator && !FUNCTIONS.contains(&call.func_name.as_str()) {
                return Err(RuleError::UndeclaredFunction(call.func_name.clone()));
            }
            if let Some(target) = &call.target {
                check(target, scope, next)?;
            }
            call.args.iter().try_for_each(|a| check(a, scope, next))
        }
        Expr::List(list) => list.elements.iter().try_for_each(|e| check(e, scope, next)),
        Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::MapEntry(e) => {
                check(&e.key, scope, next)?;
                check(&e.value, scope, next)
            }
            EntryExpr::StructField(f) => check(&f.value, scope, next),
        }),
        Expr::Struct(_) => Err(RuleError::Unsupported("a message literal")),
        Expr::Comprehension(c) => {
            check(&c.iter_range, scope, next)?;
            check(&c.accu_init, scope, next)?;
            let before = scope.len();
            scope.push(c.iter_var.clone());
            scope.extend(c.iter_var2.iter().cloned());
            scope.push(c.accu_var.clone());
            let inner = check(&c.loop_cond, scope, next)
                .and_then(|()| check(&c.loop_step, scope, next))
                .and_then(|()| check(&c.result, scope, next));
            scope.truncate(before);
            inner
        }
    }
}

fn mentions_old_self(expression: &Expression) -> bool {
    let mut found = false;
    visit(expression, &mut |e| {
        if matches!(&e.expr, Expr::Ident(name) if name == "oldSelf") {
            found = true;
        }
    });
    found
}

/// Calls `f` on every node of the expression.
fn visit(expression: &Expression, f: &mut impl FnMut(&Expression)) {
    f(expression);
    match &expression.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) => {}
        Expr::Select(select) => visit(&select.operand, f),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                visit(target, f);
            }
            call.args.iter().for_each(|a| visit(a, f));
        }
        Expr::List(list) => list.elements.iter().for_each(|e| visit(e, f)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(e) => {
                        visit(&e.key, f);
                        visit(&e.value, f);
                    }
                    EntryExpr::StructField(s) => visit(&s.value, f),
                }
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                visit(part, f);
            }
        }
    }
}

/// The cost of evaluating `expression` once when no list or map it iterates over has more than
/// `largest` entries: one per node, a macro's body once per entry.
fn estimated_cost(expression: &Expression, largest: u64) -> u64 {
    let cost = |e: &Expression| estimated_cost(e, largest);
    let children: u64 = match &expression.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) => 0,
        Expr::Select(select) => cost(&select.operand),
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| cost(t))
            .chain(call.args.iter().map(cost))
            .fold(0, u64::saturating_add),
        Expr::List(list) => list.elements.iter().map(cost).fold(0, u64::saturating_add),
        Expr::Map(map) => map
            .entries
            .iter()
            .map(|entry| match &entry.expr {
                EntryExpr::MapEntry(e) => cost(&e.key).saturating_add(cost(&e.value)),
                EntryExpr::StructField(s) => cost(&s.value),
            })
            .fold(0, u64::saturating_add),
        Expr::Comprehension(c) => {
            let body = cost(&c.loop_cond).saturating_add(cost(&c.loop_step));
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(body.saturating_mul(largest.max(1)))
                .saturating_add(cost(&c.result))
        }
    };
    children.saturating_add(1)
}

/// The number of entries of the largest list or map in `value`: the most any macro over it (or
/// over a list made from it) iterates.
fn largest_collection(value: &Value) -> u64 {
    let own = match value {
        Value::Array(items) => items.len(),
        Value::Object(map) => map.len(),
        _ => 0,
    };
    let own = u64::try_from(own).unwrap_or(u64::MAX);
    let below = match value {
        Value::Array(items) => items.iter().map(largest_collection).max(),
        Value::Object(map) => map.values().map(largest_collection).max(),
        _ => None,
    };
    own.max(below.unwrap_or(0))
}

/// The root evaluation context: the standard functions, with Kubernetes' meaning where it differs
/// (`size` of a string counts characters; `matches` keeps its patterns compiled), and the optional
/// value functions `optionalOldSelf` rules use.
fn root_context() -> &'static Context<'static> {
    static ROOT: OnceLock<Context<'static>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let mut context = Context::default();
        context.add_function("size", size);
        context.add_function("matches", matches);
        context.add_function("hasValue", has_value);
        context.add_function("value", value_of);
        context.add_function("orValue", or_value);
        context.add_function("lowerAscii", lower_ascii);
        context.add_function("upperAscii", upper_ascii);
        context.add_function("isSorted", is_sorted);
        context
    })
}

fn size(ftx: &FunctionContext<'_>, This(this): This<CelValue>) -> Result<i64, ExecutionError> {
    let size = match this {
        CelValue::String(s) => s.chars().count(),
        CelValue::List(l) => l.len(),
        CelValue::Map(m) => m.map.len(),
        CelValue::Bytes(b) => b.len(),
        other => return Err(ftx.error(format!("no size of {:?}", other.type_of()))),
    };
    Ok(i64::try_from(size).unwrap_or(i64::MAX))
}

fn matches(
    ftx: &FunctionContext<'_>,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> Result<bool, ExecutionError> {
    static PATTERNS: OnceLock<Mutex<HashMap<String, regex::Regex>>> = OnceLock::new();
    let cache = PATTERNS.get_or_init(Mutex::default);
    let mut cache = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(regex) = cache.get(pattern.as_str()) {
        return Ok(regex.is_match(&this));
    }
    let regex = regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| ftx.error(format!("invalid pattern {pattern:?}: {e}")))?;
    let matched = regex.is_match(&this);
    if cache.len() >= CACHED_PATTERNS {
        cache.clear();
    }
    cache.insert(pattern.as_str().to_owned(), regex);
    Ok(matched)
}

fn has_value(This(this): This<CelValue>) -> bool {
    !matches!(this, CelValue::Null)
}

fn value_of(
    ftx: &FunctionContext<'_>,
    This(this): This<CelValue>,
) -> Result<CelValue, ExecutionError> {
    match this {
        CelValue::Null => Err(ftx.error("optional.none() dereference")),
        other => Ok(other),
    }
}

fn or_value(
    ftx: &FunctionContext<'_>,
    This(this): This<CelValue>,
    Arguments(args): Arguments,
) -> Result<CelValue, ExecutionError> {
    match (this, args.first()) {
        (CelValue::Null, Some(other)) => Ok(other.clone()),
        (CelValue::Null, None) => Err(ftx.error("orValue takes one argument")),
        (value, _) => Ok(value),
    }
}

fn lower_ascii(This(this): This<Arc<String>>) -> String {
    this.to_ascii_lowercase()
}

fn upper_ascii(This(this): This<Arc<String>>) -> String {
    this.to_ascii_uppercase()
}

fn is_sorted(
    ftx: &FunctionContext<'_>,
    This(this): This<CelValue>,
) -> Result<bool, ExecutionError> {
    let CelValue::List(items) = this else {
        return Err(ftx.error("isSorted applies to lists"));
    };
    Ok(items
        .windows(2)
        .all(|pair| pair[0].partial_cmp(&pair[1]).is_some_and(|o| o.is_le())))
}

/// A JSON value as CEL sees it, typed by its schema where one is known.
fn to_cel(schema: Option<&Schema>, value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            let double = schema.is_some_and(|s| s.schema_type == Some(SchemaType::Number));
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if !double => CelValue::Int(i),
                (None, Some(u)) if !double => CelValue::UInt(u),
                _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            }
        }
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let items_schema = schema.and_then(|s| s.items.as_deref());
            CelValue::List(Arc::new(
                items.iter().map(|i| to_cel(items_schema, i)).collect(),
            ))
        }
        Value::Object(map) => {
            let entries: HashMap<Key, CelValue> = map
                .iter()
                .map(|(k, v)| {
                    (
                        Key::String(Arc::new(k.clone())),
                        to_cel(schema.and_then(|s| s.property(k)), v),
                    )
                })
                .collect();
            CelValue::Map(CelMap {
                map: Arc::new(entries),
            })
        }
    }
}

/// `fieldPath`: `.name` and `['name']` steps.
fn parse_field_path(text: &str) -> Option<Vec<String>> {
    let mut steps = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']")?;
            steps.push(after[..end].to_owned());
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            if name.is_empty() {
                return None;
            }
            steps.push(name.to_owned());
            rest = &after[end..];
        } else {
            return None;
        }
    }
    (!steps.is_empty()).then_some(steps)
}

/// Longest evaluation error shown: the evaluator's errors may render whole values.
const SHOWN_ERROR_CHARS: usize = 200;

/// An evaluation error as kube-apiserver words the common ones, shortened.
fn error_text(error: &ExecutionError) -> String {
    let text = match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::UndeclaredReference(name) => format!("no such attribute: {name}"),
        other => other.to_string(),
    };
    if text.chars().count() <= SHOWN_ERROR_CHARS {
        return text;
    }
    let mut short: String = text.chars().take(SHOWN_ERROR_CHARS).collect();
    short.push('…');
    short
}

fn type_name(schema: &Schema, value: &Value) -> &'static str {
    match (schema.schema_type, value) {
        (Some(t), _) => t.name(),
        (None, Value::String(_)) => "string",
        (None, Value::Number(_)) => "integer",
        (None, Value::Object(_)) => "object",
        (None, Value::Array(_)) => "array",
        (None, Value::Bool(_)) => "boolean",
        (None, Value::Null) => "null",
    }
}

fn has_schema_type(schema: &Schema, value: &Value) -> bool {
    if schema.int_or_string {
        return value.is_string() || value.is_i64() || value.is_u64();
    }
    match schema.schema_type {
        None => true,
        Some(SchemaType::Object) => value.is_object(),
        Some(SchemaType::Array) => value.is_array(),
        Some(SchemaType::String) => value.is_string(),
        Some(SchemaType::Integer) => value.is_i64() || value.is_u64(),
        Some(SchemaType::Number) => value.is_number(),
        Some(SchemaType::Boolean) => value.is_boolean(),
    }
}

/// Evaluates one expression; a panic inside the interpreter is an evaluation error, never a crash
/// of the request.
fn resolve(context: &Context<'_>, expression: &Expression) -> Result<CelValue, ExecutionError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| context.resolve(expression)))
        .unwrap_or_else(|_| {
            Err(ExecutionError::function_error(
                "evaluation",
                "the interpreter failed",
            ))
        })
}

/// Evaluates every rule that applies to `value` (with `old`, the stored value on update).
pub(crate) struct Evaluator<'r> {
    remaining: u64,
    exhausted: bool,
    pub(crate) violations: &'r mut Vec<Violation>,
    pub(crate) unevaluated: &'r mut Vec<UnevaluatedRule>,
}

impl<'r> Evaluator<'r> {
    pub(crate) fn new(
        violations: &'r mut Vec<Violation>,
        unevaluated: &'r mut Vec<UnevaluatedRule>,
    ) -> Self {
        Self {
            remaining: REQUEST_COST_BUDGET,
            exhausted: false,
            violations,
            unevaluated,
        }
    }

    /// Walks `value` with its schema, evaluating rules where the value has the schema's type
    /// (type errors are the structural validation's to report).
    pub(crate) fn walk(
        &mut self,
        schema: &Schema,
        value: &Value,
        old: Option<&Value>,
        path: &FieldPath,
    ) {
        if self.exhausted || value.is_null() || !has_schema_type(schema, value) {
            return;
        }
        if !schema.validations.is_empty() {
            self.evaluate(schema, value, old, path);
        }
        match value {
            Value::Object(map) => {
                for (name, child) in map {
                    if let Some(child_schema) = schema.property(name) {
                        let old_child = old.and_then(|o| o.get(name));
                        self.walk(child_schema, child, old_child, &path.key(name.as_str()));
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_schema) = schema.items.as_deref() else {
                    return;
                };
                let old_items = match (schema.list_type, old) {
                    (Some(ListType::Map), Some(Value::Array(old_items)))
                        if !schema.list_map_keys.is_empty() =>
                    {
                        Some(old_items)
                    }
                    _ => None,
                };
                for (i, item) in items.iter().enumerate() {
                    let old_item = old_items.and_then(|olds| {
                        olds.iter().find(|o| {
                            schema
                                .list_map_keys
                                .iter()
                                .all(|k| o.get(k.as_str()) == item.get(k.as_str()))
                        })
                    });
                    self.walk(item_schema, item, old_item, &path.index(i));
                }
            }
            _ => {}
        }
    }

    fn evaluate(&mut self, schema: &Schema, value: &Value, old: Option<&Value>, path: &FieldPath) {
        let mut bound: Option<(CelValue, CelValue, u64)> = None;
        for rule in &schema.validations {
            let compiled = match rule.compiled() {
                Ok(compiled) => compiled,
                Err(_) => {
                    self.unevaluated.push(UnevaluatedRule {
                        path: path.clone(),
                        rule: rule.rule.clone(),
                        message: rule.message.clone(),
                    });
                    continue;
                }
            };
            if compiled.transition {
                if old.is_none() && !rule.optional_old_self {
                    continue;
                }
            } else if old == Some(value) {
                // Unchanged on update: as kube-apiserver's ratcheting, not evaluated again.
                continue;
            }
            let (this, previous, largest) = bound.get_or_insert_with(|| {
                (
                    to_cel(Some(schema), value),
                    old.map_or(CelValue::Null, |o| to_cel(Some(schema), o)),
                    largest_collection(value).max(old.map_or(0, largest_collection)),
                )
            });
            let cost = estimated_cost(&compiled.rule, *largest).saturating_add(
                compiled
                    .message
                    .as_ref()
                    .map_or(0, |m| estimated_cost(m, *largest)),
            );
            let shown_type = type_name(schema, value);
            if cost > PER_CALL_COST_LIMIT {
                self.violations.push(Violation {
                    path: path.clone(),
                    kind: ViolationKind::Rule(RuleReason::Invalid),
                    message: format!(
                        "Invalid value: {shown_type:?}: estimated rule cost exceeds budget by factor of {}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared); rule: {}",
                        cost / PER_CALL_COST_LIMIT,
                        rule.rule
                    ),
                });
                continue;
            }
            if cost > self.remaining {
                self.exhausted = true;
                self.violations.push(Violation {
                    path: path.clone(),
                    kind: ViolationKind::Rule(RuleReason::Forbidden),
                    message: "Forbidden: validation failed due to running out of cost budget, no further validation rules will be run".to_owned(),
                });
                return;
            }
            self.remaining -= cost;
            let mut context = root_context().new_inner_scope();
            context.add_variable_from_value("self", this.clone());
            context.add_variable_from_value("oldSelf", previous.clone());
            let failure = match resolve(&context, &compiled.rule) {
                Ok(CelValue::Bool(true)) => continue,
                Ok(CelValue::Bool(false)) => None,
                Ok(other) => Some(format!(
                    "rule evaluated to {:?}, not a bool, evaluating rule: {}",
                    other.type_of(),
                    rule.rule
                )),
                Err(error) => Some(format!(
                    "{} evaluating rule: {}",
                    error_text(&error),
                    rule.rule
                )),
            };
            let mut at = path.clone();
            for step in &compiled.field_path {
                at = at.key(step.as_str());
            }
            let message = match failure {
                Some(error) => {
                    self.violations.push(Violation {
                        path: at,
                        kind: ViolationKind::Rule(RuleReason::Invalid),
                        message: format!("Invalid value: {shown_type:?}: {error}"),
                    });
                    continue;
                }
                None => compiled
                    .message
                    .as_ref()
                    .and_then(|m| match resolve(&context, m) {
                        Ok(CelValue::String(s)) if !s.trim().is_empty() && !s.contains('\n') => {
                            Some(s.as_str().to_owned())
                        }
                        _ => None,
                    })
                    .or_else(|| rule.message.clone())
                    .unwrap_or_else(|| format!("failed rule: {}", rule.rule)),
            };
            let message = match compiled.reason {
                RuleReason::Invalid => format!("Invalid value: {shown_type:?}: {message}"),
                RuleReason::Forbidden => format!("Forbidden: {message}"),
                RuleReason::Required => format!("Required value: {message}"),
                RuleReason::Duplicate => format!("Duplicate value: {shown_type:?}"),
            };
            self.violations.push(Violation {
                path: at,
                kind: ViolationKind::Rule(compiled.reason),
                message,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> Schema {
        Schema::from_value(&value).unwrap()
    }

    fn messages(schema: &Schema, value: &Value, old: Option<&Value>) -> Vec<String> {
        crate::validate_update(schema, value, old)
            .violations
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn rules_accept_and_refuse_with_messages_and_reasons() {
        let s = schema(json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"replicas": {"type": "integer"}, "name": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "self.replicas != 0", "message": "replicas cannot be 0"},
                {"rule": "size(self.name) <= 3", "messageExpression": "'name ' + self.name + ' is too long'", "reason": "FieldValueForbidden", "fieldPath": ".name"},
                {"rule": "self.replicas < 100"}
            ]
        }}}));
        let ok = json!({"spec": {"replicas": 1, "name": "äbc"}});
        assert!(messages(&s, &ok, None).is_empty());
        let bad = json!({"spec": {"replicas": 0, "name": "abcd"}});
        assert_eq!(
            messages(&s, &bad, None),
            [
                "spec: Invalid value: \"object\": replicas cannot be 0",
                "spec.name: Forbidden: name abcd is too long"
            ]
        );
        let bad = json!({"spec": {"replicas": 100, "name": "a"}});
        assert_eq!(
            messages(&s, &bad, None),
            ["spec: Invalid value: \"object\": failed rule: self.replicas < 100"]
        );
        let missing = json!({"spec": {"name": "a"}});
        assert_eq!(
            messages(&s, &missing, None),
            [
                "spec: Invalid value: \"object\": no such key: replicas evaluating rule: self.replicas != 0",
                "spec: Invalid value: \"object\": no such key: replicas evaluating rule: self.replicas < 100"
            ]
        );
    }

    #[test]
    fn transition_rules_run_on_update_only_and_unchanged_values_are_not_checked_again() {
        let s = schema(json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"mode": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]},
                "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10"}]}},
        }}}));
        let old = json!({"spec": {"mode": "a", "size": 20}});
        assert!(messages(&s, &old, None).len() == 1, "create checks size");
        let same = json!({"spec": {"mode": "a", "size": 20}});
        assert!(messages(&s, &same, Some(&old)).is_empty());
        let changed = json!({"spec": {"mode": "b", "size": 20}});
        assert_eq!(
            messages(&s, &changed, Some(&old)),
            ["spec.mode: Invalid value: \"string\": mode is immutable"]
        );
        let grown = json!({"spec": {"mode": "a", "size": 21}});
        assert_eq!(messages(&s, &grown, Some(&old)).len(), 1);
    }

    #[test]
    fn optional_old_self_runs_on_create() {
        let s = schema(
            json!({"type": "object", "properties": {"v": {"type": "string",
            "x-kubernetes-validations": [{"rule": "!oldSelf.hasValue() || self == oldSelf.value()",
            "optionalOldSelf": true, "message": "immutable"},
            {"rule": "oldSelf.orValue('') != 'x' || self == 'x'", "optionalOldSelf": true}]}}}),
        );
        assert!(messages(&s, &json!({"v": "a"}), None).is_empty());
        assert_eq!(
            messages(&s, &json!({"v": "b"}), Some(&json!({"v": "a"}))).len(),
            1
        );
        assert_eq!(
            messages(&s, &json!({"v": "b"}), Some(&json!({"v": "x"}))).len(),
            2
        );
    }

    #[test]
    fn map_list_items_correlate_by_key() {
        let s = schema(
            json!({"type": "object", "properties": {"l": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v", "message": "v may not shrink"}]}}}}),
        );
        let old = json!({"l": [{"name": "a", "v": 2}, {"name": "b", "v": 5}]});
        let new =
            json!({"l": [{"name": "b", "v": 4}, {"name": "a", "v": 3}, {"name": "c", "v": 0}]});
        assert_eq!(
            messages(&s, &new, Some(&old)),
            ["l[0]: Invalid value: \"object\": v may not shrink"]
        );
    }

    #[test]
    fn rules_that_do_not_compile_are_named() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.a == "},
                {"rule": "other.a == 1"},
                {"rule": "self.nosuch()"},
                {"rule": "true", "reason": "Bogus"},
                {"rule": "true", "fieldPath": "spec"},
                {"rule": "self.all(x, x > 0)"}
            ]}}}),
        );
        let errors = rule_errors(&s);
        let places: Vec<&str> = errors.iter().map(|e| e.place.as_str()).collect();
        assert_eq!(
            places,
            [
                "properties[spec].x-kubernetes-validations[0].rule",
                "properties[spec].x-kubernetes-validations[1].rule",
                "properties[spec].x-kubernetes-validations[2].rule",
                "properties[spec].x-kubernetes-validations[3].reason",
                "properties[spec].x-kubernetes-validations[4].fieldPath",
            ]
        );
        assert_eq!(
            errors[1].error.to_string(),
            "compilation failed: undeclared reference to 'other'"
        );
        let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
        assert!(matches!(
            parse(&deep),
            Err(RuleError::TooDeep(MAX_EXPRESSION_DEPTH))
        ));
        let long_chain = vec!["1"; 2000].join("+");
        assert!(parse(&long_chain).is_err());
    }

    #[test]
    fn a_quadratic_rule_over_a_huge_list_is_refused_without_evaluating() {
        let s = schema(
            json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.exists_one(y, x.name == y.name))"}]}}}),
        );
        let items: Vec<Value> = (0..100_000)
            .map(|i| json!({"name": i.to_string()}))
            .collect();
        let found = messages(&s, &json!({"l": items}), None);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].contains("estimated rule cost exceeds budget"),
            "{found:?}"
        );
        let small: Vec<Value> = (0..50).map(|i| json!({"name": i.to_string()})).collect();
        assert!(messages(&s, &json!({"l": small}), None).is_empty());
    }

    #[test]
    fn many_cheap_rules_exhaust_the_request_budget() {
        let s = schema(
            json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "array", "items": {"type": "integer"},
                "x-kubernetes-validations": [{"rule": "self.all(x, x >= 0)"}]}}}}),
        );
        let row: Vec<Value> = (0..1000).map(Value::from).collect();
        let rows: Vec<Value> = (0..5000).map(|_| Value::Array(row.clone())).collect();
        let found = messages(&s, &json!({"l": rows}), None);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("running out of cost budget"));
    }

    #[test]
    fn numbers_follow_the_schema_type() {
        let s = schema(
            json!({"type": "object", "properties": {"n": {"type": "number",
            "x-kubernetes-validations": [{"rule": "self == 2.0"}]}}}),
        );
        assert!(messages(&s, &json!({"n": 2}), None).is_empty());
    }
}
