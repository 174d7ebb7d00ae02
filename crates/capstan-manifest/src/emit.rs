//! Deterministic YAML output for JSON values.
//!
//! The output is block-style YAML meant to be read by people and by any YAML parser: keys in the
//! value's order, two-space indentation (sequences indented under their key), multi-line strings
//! as literal block scalars so embedded scripts and manifests stay readable, and quotes exactly
//! where a plain scalar would read back as something else. Strings that YAML 1.1 parsers (Go's
//! `yaml.v2`, hence older kubectl) would type differently (`yes`, `on`, `010`, `1_000`,
//! `10.0.0.1`-like forms) are quoted too, so the output means the same to them.
//!
//! The guarantee, checked by a property test: parsing the output with this crate gives back the
//! same values.

use serde_json::{Map, Value};

use crate::parse::resolve_plain;

/// Keys longer than this (as written) use the explicit `? key` form, because YAML limits
/// implicit keys to 1024 characters.
const LONGEST_IMPLICIT_KEY: usize = 512;

/// Multi-document YAML: every value as a document opened by `---`.
pub fn to_yaml_documents(values: &[Value]) -> String {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        write_document(&mut out, value);
    }
    out
}

/// One YAML document without a `---` line.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    write_document(&mut out, value);
    out
}

fn write_document(out: &mut String, value: &Value) {
    match value {
        Value::Object(map) if !map.is_empty() => write_mapping(out, map, 0, false),
        Value::Array(items) if !items.is_empty() => write_sequence(out, items, 0, false),
        _ => {
            write_inline(out, value);
            out.push('\n');
        }
    }
}

fn indent(out: &mut String, width: usize) {
    out.extend(std::iter::repeat_n(' ', width));
}

/// Writes the entries of a non-empty mapping at `width`; with `started`, the first entry goes on
/// the current line (after a `- `).
fn write_mapping(out: &mut String, map: &Map<String, Value>, width: usize, started: bool) {
    for (n, (key, value)) in map.iter().enumerate() {
        if n > 0 || !started {
            indent(out, width);
        }
        let key_text = scalar_text(key);
        if key_text.len() > LONGEST_IMPLICIT_KEY {
            out.push_str("? ");
            out.push_str(&key_text);
            out.push('\n');
            indent(out, width);
        } else {
            out.push_str(&key_text);
        }
        out.push(':');
        write_entry_value(out, value, width);
    }
}

/// Writes what follows `key:` for an entry of a mapping at `width`.
fn write_entry_value(out: &mut String, value: &Value, width: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            write_mapping(out, map, width + 2, false);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            write_sequence(out, items, width + 2, false);
        }
        Value::String(s) if literal_block_fits(s) => {
            out.push(' ');
            write_literal_block(out, s, width + 2);
        }
        _ => {
            out.push(' ');
            write_inline(out, value);
            out.push('\n');
        }
    }
}

/// Writes the items of a non-empty sequence at `width`; with `started`, the first item goes on the
/// current line (after a `- `).
fn write_sequence(out: &mut String, items: &[Value], width: usize, started: bool) {
    for (n, item) in items.iter().enumerate() {
        if n > 0 || !started {
            indent(out, width);
        }
        out.push_str("- ");
        match item {
            Value::Object(map) if !map.is_empty() => write_mapping(out, map, width + 2, true),
            Value::Array(inner) if !inner.is_empty() => {
                write_sequence(out, inner, width + 2, true);
            }
            Value::String(s) if literal_block_fits(s) => write_literal_block(out, s, width + 2),
            _ => {
                write_inline(out, item);
                out.push('\n');
            }
        }
    }
}

/// A scalar or empty collection on the current line.
fn write_inline(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => out.push_str(&scalar_text(s)),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

/// A string as a plain scalar when that reads back as the same string, else double-quoted.
fn scalar_text(s: &str) -> String {
    if plain_is_safe(s) {
        s.to_owned()
    } else {
        double_quoted(s)
    }
}

/// Characters YAML treats as line breaks or that a YAML stream may not contain unescaped.
fn needs_escape(c: char) -> bool {
    let printable = matches!(c, '\t' | '\n' | '\u{20}'..='\u{7e}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
    !printable || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}')
}

fn plain_is_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let mut rest = s.chars().skip(1);
    let first_is_safe = match first {
        '-' => rest.next().is_some_and(|c| c != ' ') && !s.starts_with("---"),
        '?' | ':' | ',' | '[' | ']' | '{' | '}' | '#' | '&' | '*' | '!' | '|' | '>' | '\''
        | '"' | '%' | '@' | '`' | ' ' => false,
        '.' => !s.starts_with("..."),
        _ => true,
    };
    first_is_safe
        && !s.ends_with([' ', ':'])
        && !s.contains(": ")
        && !s.contains(" #")
        && !s.contains(['\t', '\n', '\r'])
        && !s.chars().any(needs_escape)
        && s != "<<"
        && !reads_differently_in_yaml_1_1(s)
        && resolve_plain(s).is_ok_and(|v| v.as_str() == Some(s))
}

/// Words and numeric-looking forms that YAML 1.1 parsers type as booleans, numbers or dates.
fn reads_differently_in_yaml_1_1(s: &str) -> bool {
    const WORDS: [&str; 12] = [
        "y", "yes", "n", "no", "on", "off", "true", "false", "null", "~", ".inf", ".nan",
    ];
    if WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return true;
    }
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let starts_numeric = unsigned.starts_with(|c: char| c.is_ascii_digit())
        || (unsigned.starts_with('.') && unsigned[1..].starts_with(|c: char| c.is_ascii_digit()));
    starts_numeric
        && unsigned
            .chars()
            .all(|c| c.is_ascii_hexdigit() || "_.:+-xXoObB".contains(c))
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) => {
                // Every character that needs escaping is in the Basic Multilingual Plane.
                out.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether a string is written as a literal block scalar: it spans lines, has some visible
/// content and holds nothing a block scalar cannot carry verbatim.
fn literal_block_fits(s: &str) -> bool {
    s.contains('\n')
        && !s.contains('\r')
        && !s.chars().any(needs_escape)
        && s.split('\n')
            .any(|line| !line.trim_matches([' ', '\t']).is_empty())
}

/// Writes `|`, `|-` or `|+` (with an indentation indicator when the content starts with
/// whitespace, which would otherwise be read as indentation) and the lines at `width`.
fn write_literal_block(out: &mut String, s: &str, width: usize) {
    let body = s.trim_end_matches('\n');
    let trailing_newlines = s.len() - body.len();
    let leading_whitespace = body
        .split('\n')
        .find(|line| !line.is_empty())
        .is_some_and(|line| line.starts_with([' ', '\t']));
    out.push('|');
    if leading_whitespace {
        out.push('2');
    }
    out.push_str(match trailing_newlines {
        0 => "-",
        1 => "",
        _ => "+",
    });
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            indent(out, width);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing_newlines {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_documents;
    use proptest::prelude::*;
    use serde_json::json;

    fn read_back(text: &str) -> Vec<Value> {
        parse_documents("out", text)
            .unwrap_or_else(|e| panic!("{e}\n--- emitted ---\n{text}"))
            .into_iter()
            .map(|o| o.value)
            .collect()
    }

    #[test]
    fn objects_read_like_kubectl_output() {
        let v = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {"name": "c", "labels": {"cluster.x-k8s.io/cluster-name": "capi"}},
            "spec": {
                "files": [{"path": "/etc/x.sh", "permissions": "0644", "content": "#!/bin/sh\necho hi\n"}],
                "preKubeadmCommands": ["echo a", "--flag=x"],
                "empty": {}, "none": [], "n": null, "version": "1.29", "replicas": 3, "ok": true,
            }
        });
        let text = to_yaml(&v);
        assert_eq!(
            text,
            "\
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfig
metadata:
  name: c
  labels:
    cluster.x-k8s.io/cluster-name: capi
spec:
  files:
    - path: /etc/x.sh
      permissions: \"0644\"
      content: |
        #!/bin/sh
        echo hi
  preKubeadmCommands:
    - echo a
    - --flag=x
  empty: {}
  none: []
  \"n\": null
  version: \"1.29\"
  replicas: 3
  ok: true
"
        );
        assert_eq!(read_back(&text), [v]);
    }

    #[test]
    fn ambiguous_strings_are_quoted() {
        for s in [
            "true",
            "0644",
            "1.29",
            "null",
            "",
            "~",
            "- x",
            ": ",
            "-",
            "a: b",
            "a #b",
            "yes",
            "On",
            "1e3",
            "0x1F",
            ".inf",
            "---",
            "...",
            "<<",
            " lead",
            "trail ",
            "#c",
            "*a",
            "&a",
            "!t",
            "[a]",
            "{a}",
            "@x",
            "%x",
            "10.0.0.1",
            "2024-01-01",
            "x:",
            "tab\tin",
        ] {
            let text = to_yaml(&json!({ s: s }));
            assert!(text.starts_with('"'), "{s:?} -> {text}");
            assert_eq!(read_back(&text), [json!({ s: s })], "{text}");
        }
        for s in [
            "hello",
            "a:b",
            "a#b",
            "-v",
            "100Mi",
            "192.168.0.0/24",
            "v1.29.0",
            "héllo",
        ] {
            assert_eq!(to_yaml(&json!(s)), format!("{s}\n"));
        }
    }

    #[test]
    fn multi_line_strings_use_block_scalars() {
        let cases = [
            ("a\nb", "|-"),
            ("a\nb\n", "|"),
            ("a\nb\n\n", "|+"),
            ("  indented\nx\n", "|2"),
            ("\n\nlate start", "|-"),
        ];
        for (s, header) in cases {
            let text = to_yaml(&json!({"k": s, "l": [s]}));
            assert!(text.starts_with(&format!("k: {header}\n")), "{text}");
            assert_eq!(read_back(&text), [json!({"k": s, "l": [s]})], "{text}");
        }
        assert_eq!(to_yaml(&json!("a\nb")), "\"a\\nb\"\n");
        assert_eq!(to_yaml(&json!({"k": "\n"})), "k: \"\\n\"\n");
    }

    #[test]
    fn documents_are_separated() {
        let text = to_yaml_documents(&[json!({"a": 1}), json!([1, [2, 3], {"b": {}}]), json!("s")]);
        assert_eq!(text, "---\na: 1\n---\n- 1\n- - 2\n  - 3\n- b: {}\n---\ns\n");
        assert_eq!(
            read_back(&text),
            [json!({"a": 1}), json!([1, [2, 3], {"b": {}}]), json!("s")]
        );
    }

    #[test]
    fn long_keys_use_the_explicit_form() {
        let key = "k".repeat(2000);
        let v = json!({ key.clone(): {"a": 1}, "b": [1] });
        assert_eq!(read_back(&to_yaml(&v)), [v]);
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ a-c0-9:#'\"\\-\n\t.|>&*!%@,\\[\\]{}~?]{0,12}",
            prop::sample::select(vec![
                "true",
                "null",
                "0644",
                "1.29",
                "",
                "~",
                "- x",
                ": ",
                "<<",
                "---",
                "...",
                " a",
                "a\n",
                "\n",
                "a\n\n",
                " a\nb",
                "\ta\nb",
                "a \nb ",
                "a\n \nb",
                " \n a",
                "\u{85}x\ny",
            ])
            .prop_map(str::to_owned),
        ]
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            arb_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((arb_string(), inner), 0..6)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn output_reads_back_as_the_same_value(v in arb_value()) {
            let text = to_yaml_documents(std::slice::from_ref(&v));
            let back = parse_documents("out", &text);
            prop_assert!(back.is_ok(), "{:?}\n{}", back.err(), text);
            let back: Vec<Value> = back.unwrap_or_default().into_iter().map(|o| o.value).collect();
            prop_assert_eq!(back, vec![v], "{}", text);
        }

        #[test]
        fn manifests_round_trip_through_load_str(v in arb_value()) {
            let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": v});
            let text = to_yaml_documents(std::slice::from_ref(&object));
            let loaded = crate::load::load_str("out", &text);
            prop_assert!(loaded.is_ok(), "{:?}\n{}", loaded.err(), text);
            let values: Vec<Value> = loaded.unwrap_or_default().into_iter().map(|o| o.value).collect();
            prop_assert_eq!(values, vec![object]);
        }
    }
}
