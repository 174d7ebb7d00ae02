//! Arbitrary schemas and values must give results or errors, never a panic.

use capstan_schema::{CrdInfo, Schema, apply_defaults, prune, validate_report};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z0-9%:./+=-]{0,8}".prop_map(Value::String),
        prop::sample::select(vec![
            "object",
            "array",
            "string",
            "integer",
            "number",
            "boolean",
            "int32",
            "int64",
            "byte",
            "date-time",
            "cidr",
            "ipv4",
            "mac",
            "uuid",
            "set",
            "map",
            "atomic",
            "^[a-z]+$",
            "(",
            "a{99999}",
            "\\",
            "^(?!x)",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn arb_value() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-c]{1,2}", inner), 0..5)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

const KEYWORDS: [&str; 31] = [
    "type",
    "format",
    "nullable",
    "default",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "uniqueItems",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
];

fn select(options: &[&'static str]) -> impl Strategy<Value = String> + use<> {
    prop::sample::select(options.to_vec()).prop_map(str::to_owned)
}

fn names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-c]{1,2}", 0..3)
}

/// One keyword, usually with a value of the right JSON type, sometimes with any value.
fn arb_keyword() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        4 => select(&["object", "array", "string", "integer", "number", "boolean"])
            .prop_map(|t| ("type".to_owned(), json!(t))),
        2 => select(&["int32", "int64", "byte", "date-time", "cidr", "ipv4", "ipv6", "mac", "uuid", "date", "other"])
            .prop_map(|f| ("format".to_owned(), json!(f))),
        2 => arb_value().prop_map(|v| ("default".to_owned(), v)),
        1 => names().prop_map(|r| ("required".to_owned(), json!(r))),
        1 => prop::collection::vec(arb_scalar(), 0..4).prop_map(|e| ("enum".to_owned(), json!(e))),
        1 => select(&["^[a-z]+$", "(", "^(?!x)", "[0-9]", "a{99999}{99999}"])
            .prop_map(|p| ("pattern".to_owned(), json!(p))),
        2 => (select(&["minimum", "maximum", "multipleOf"]), -5.0f64..10.0)
            .prop_map(|(k, n)| (k, json!(n))),
        3 => (select(&["exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "nullable",
                       "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
                       "x-kubernetes-embedded-resource", "additionalProperties"]), any::<bool>())
            .prop_map(|(k, b)| (k, json!(b))),
        2 => (select(&["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]), 0u64..5)
            .prop_map(|(k, n)| (k, json!(n))),
        1 => select(&["set", "map", "atomic"]).prop_map(|t| ("x-kubernetes-list-type".to_owned(), json!(t))),
        1 => names().prop_map(|k| ("x-kubernetes-list-map-keys".to_owned(), json!(k))),
        1 => (select(&KEYWORDS), arb_scalar()),
    ]
}

fn keywords() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec(arb_keyword(), 0..6).prop_map(|entries| entries.into_iter().collect())
}

/// Schema-shaped JSON: mostly well-typed keywords, nested through every sub-schema keyword.
fn arb_schema() -> impl Strategy<Value = Value> {
    keywords()
        .prop_map(Value::Object)
        .prop_recursive(4, 48, 4, |inner| {
            (
                keywords(),
                prop::collection::vec(("[a-c]{1,2}", inner.clone()), 0..3),
                prop::option::of(inner.clone()),
                prop::option::of(inner.clone()),
                prop::option::of((
                    select(&["allOf", "anyOf", "oneOf"]),
                    prop::collection::vec(inner.clone(), 1..3),
                )),
                prop::option::of(inner),
            )
                .prop_map(|(mut map, properties, items, additional, branches, not)| {
                    map.insert(
                        "properties".into(),
                        Value::Object(properties.into_iter().collect()),
                    );
                    if let Some(items) = items {
                        map.insert("items".into(), items);
                    }
                    if let Some(additional) = additional {
                        map.insert("additionalProperties".into(), additional);
                    }
                    if let Some((keyword, branches)) = branches {
                        map.insert(keyword, Value::Array(branches));
                    }
                    if let Some(not) = not {
                        map.insert("not".into(), not);
                    }
                    Value::Object(map)
                })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn arbitrary_schemas_and_values_do_not_panic(schema in arb_schema(), value in arb_value()) {
        if let Ok(schema) = Schema::from_value(&schema) {
            let _ = validate_report(&schema, &value);
            let mut defaulted = value.clone();
            apply_defaults(&schema, &mut defaulted);
            let mut pruned = value;
            let _ = prune(&schema, &mut pruned);
        }
    }

    #[test]
    fn arbitrary_crd_values_do_not_panic(spec in arb_value(), schema in arb_schema()) {
        let _ = CrdInfo::from_value(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "x"},
            "spec": spec,
        }));
        let _ = CrdInfo::from_value(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "x"},
            "spec": {"group": "g", "scope": "Cluster", "names": {"kind": "K", "plural": "ks"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": schema}}]},
        }));
    }
}

/// Pieces of CEL, valid and not, that arbitrary rules are made of.
fn arb_rule() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "self",
            "oldSelf",
            "x",
            ".",
            "a",
            "size",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            ",",
            " ",
            "==",
            "!=",
            "<",
            "+",
            "-",
            "*",
            "/",
            "%",
            "&&",
            "||",
            "!",
            "?",
            ":",
            "in",
            "has",
            "all",
            "exists_one",
            "map",
            "filter",
            "matches",
            "'('",
            "'a'",
            "0",
            "1",
            "-9223372036854775808",
            "1.5",
            "true",
            "null",
            "b'x'",
            "\"",
            "'",
            "\\",
            ".value()",
            ".orValue(1)",
            "int",
            "string",
            "9223372036854775807",
            "[1,2]",
            "{'a': 1}",
            "self.a",
            "self.l",
        ]),
        0..16,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Arbitrary rules compile or are refused, and evaluate or fail, without a panic escaping.
    #[test]
    fn arbitrary_cel_rules_never_panic(rule in arb_rule(), transition in any::<bool>()) {
        let schema = Schema::from_value(&json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "l": {"type": "array", "items": {"type": "string"}}},
            "x-kubernetes-validations": [{"rule": rule, "optionalOldSelf": transition}]}));
        if let Ok(schema) = schema {
            let _ = capstan_schema::rule_errors(&schema);
            let value = json!({"a": 1, "l": ["x", "y"]});
            let old = json!({"a": 2, "l": []});
            let _ = capstan_schema::validate_update(&schema, &value, transition.then_some(&old));
        }
    }
}
