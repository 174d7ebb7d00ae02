//! Label selectors (`env=prod,tier!=web,app in (a,b),!legacy`) and field selectors
//! (`metadata.name=x,status.phase!=Running`), parsed from query strings and matched against objects.

use capstan_store::LabelTerm;
use std::collections::BTreeMap;

/// A malformed selector.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unable to parse selector {text:?}: {problem}")]
pub struct SelectorError {
    pub text: String,
    pub problem: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelRequirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

/// A token of the label selector language, as Kubernetes' lexer splits it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn shown(&self) -> String {
        match self {
            Self::Identifier(text) => text.clone(),
            Self::Bang => "!".into(),
            Self::Equals => "=".into(),
            Self::DoubleEquals => "==".into(),
            Self::NotEquals => "!=".into(),
            Self::In => "in".into(),
            Self::NotIn => "notin".into(),
            Self::Greater => ">".into(),
            Self::Less => "<".into(),
            Self::Open => "(".into(),
            Self::Close => ")".into(),
            Self::Comma => ",".into(),
            Self::End => String::new(),
        }
    }
}

/// Splits a label selector into tokens: whitespace separates, `!`, `=`, `==`, `!=`, `(`, `)`, `,`,
/// `<`, `>` are symbols, everything else runs into identifiers (`in` and `notin` are keywords).
fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let symbol = match c {
            '!' | '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    Some(if c == '!' {
                        Token::NotEquals
                    } else {
                        Token::DoubleEquals
                    })
                } else {
                    Some(if c == '!' { Token::Bang } else { Token::Equals })
                }
            }
            '(' => Some(Token::Open),
            ')' => Some(Token::Close),
            ',' => Some(Token::Comma),
            '<' => Some(Token::Less),
            '>' => Some(Token::Greater),
            _ => None,
        };
        if let Some(symbol) = symbol {
            if !matches!(
                symbol,
                Token::Bang | Token::Equals | Token::NotEquals | Token::DoubleEquals
            ) {
                chars.next();
            }
            out.push(symbol);
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || "!=(),<>".contains(c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        out.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Identifier(word),
        });
    }
    out.push(Token::End);
    out
}

/// The parser over [`tokens`], following Kubernetes' `labels.Parse`.
struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        self.tokens.get(self.at).unwrap_or(&Token::End)
    }

    fn next(&mut self) -> Token {
        let token = self.peek().clone();
        self.at += 1;
        token
    }

    fn error(&self, problem: String) -> SelectorError {
        SelectorError {
            text: self.text.to_owned(),
            problem,
        }
    }

    fn expected(&self, found: &Token, expected: &str) -> SelectorError {
        self.error(format!("found '{}', expected: {expected}", found.shown()))
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Token::Identifier(key) => {
                crate::limits::qualified_name(&key).map_err(|problem| {
                    self.error(format!("invalid label key {key:?}: {problem}"))
                })?;
                Ok(key)
            }
            other => Err(self.expected(&other, "identifier")),
        }
    }

    fn value(&self, value: String) -> Result<String, SelectorError> {
        crate::limits::label_value(&value)
            .map_err(|problem| self.error(format!("invalid label value {value:?}: {problem}")))?;
        Ok(value)
    }

    fn requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        if self.peek() == &Token::Bang {
            self.next();
            return Ok(LabelRequirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        let operator = match self.peek() {
            Token::End | Token::Comma => return Ok(LabelRequirement::Exists(key)),
            _ => self.next(),
        };
        match operator {
            Token::Equals | Token::DoubleEquals | Token::NotEquals => {
                let value = match self.peek().clone() {
                    Token::End | Token::Comma => String::new(),
                    Token::Identifier(value) => {
                        self.next();
                        value
                    }
                    other => return Err(self.expected(&other, "identifier")),
                };
                let value = self.value(value)?;
                Ok(if operator == Token::NotEquals {
                    LabelRequirement::NotEquals(key, value)
                } else {
                    LabelRequirement::Equals(key, value)
                })
            }
            Token::In | Token::NotIn => {
                let values = self.values()?;
                if values.is_empty() {
                    return Err(
                        self.error("for 'in', 'notin' operators, values set can't be empty".into())
                    );
                }
                Ok(if operator == Token::In {
                    LabelRequirement::In(key, values)
                } else {
                    LabelRequirement::NotIn(key, values)
                })
            }
            Token::Greater | Token::Less => {
                let bound = match self.next() {
                    Token::Identifier(value) => value.parse::<i64>().map_err(|_| {
                        self.error(format!(
                            "for 'Gt', 'Lt' operators, the value must be an integer, not {value:?}"
                        ))
                    })?,
                    other => return Err(self.expected(&other, "identifier")),
                };
                Ok(if operator == Token::Greater {
                    LabelRequirement::GreaterThan(key, bound)
                } else {
                    LabelRequirement::LessThan(key, bound)
                })
            }
            other => Err(self.expected(&other, "[!= == = > < in notin]")),
        }
    }

    /// `( value, value, ... )`; an empty entry is the empty value, as in Kubernetes.
    fn values(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Token::Open => {}
            other => return Err(self.expected(&other, "'('")),
        }
        let mut values = Vec::new();
        if self.peek() == &Token::Close {
            self.next();
            return Ok(values);
        }
        loop {
            let value = match self.peek().clone() {
                Token::Identifier(value) => {
                    self.next();
                    value
                }
                Token::Comma | Token::Close => String::new(),
                other => return Err(self.expected(&other, "',', ')' or identifier")),
            };
            values.push(self.value(value)?);
            match self.next() {
                Token::Comma => {}
                Token::Close => return Ok(values),
                other => return Err(self.expected(&other, "',' or ')'")),
            }
        }
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter as kube-apiserver does: `,,,`, a bare `!` or a
    /// requirement without a key (`!=b`) are errors, never "everything".
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            text,
            tokens: tokens(text),
            at: 0,
        };
        let mut reqs = Vec::new();
        match parser.peek() {
            Token::End => return Ok(Self(reqs)),
            Token::Identifier(_) | Token::Bang => {}
            other => {
                let other = other.clone();
                return Err(parser.expected(&other, "!, identifier, or 'end of string'"));
            }
        }
        loop {
            reqs.push(parser.requirement()?);
            match parser.next() {
                Token::End => return Ok(Self(reqs)),
                Token::Comma => match parser.peek() {
                    Token::Identifier(_) | Token::Bang => {}
                    other => {
                        let other = other.clone();
                        return Err(parser.expected(&other, "identifier after ','"));
                    }
                },
                other => return Err(parser.expected(&other, "',' or 'end of string'")),
            }
        }
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let number = |k: &str| labels.get(k).and_then(|v| v.parse::<i64>().ok());
        self.0.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => labels.get(k) == Some(v),
            LabelRequirement::NotEquals(k, v) => labels.get(k) != Some(v),
            LabelRequirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            LabelRequirement::Exists(k) => labels.contains_key(k),
            LabelRequirement::DoesNotExist(k) => !labels.contains_key(k),
            LabelRequirement::GreaterThan(k, n) => number(k).is_some_and(|v| v > *n),
            LabelRequirement::LessThan(k, n) => number(k).is_some_and(|v| v < *n),
        })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The selector as terms the store's label index answers, and whether they answer it exactly.
    /// `>` and `<` compare numbers, which the index does not: each becomes "the label exists" (a
    /// superset), and the caller must match the parsed objects against the selector itself.
    pub fn index_terms(&self) -> (Vec<LabelTerm>, bool) {
        let mut exact = true;
        let terms = self
            .0
            .iter()
            .map(|req| match req {
                LabelRequirement::Equals(k, v) => LabelTerm::Equals(k.clone(), v.clone()),
                LabelRequirement::NotEquals(k, v) => LabelTerm::NotEquals(k.clone(), v.clone()),
                LabelRequirement::In(k, vs) => LabelTerm::In(k.clone(), vs.clone()),
                LabelRequirement::NotIn(k, vs) => LabelTerm::NotIn(k.clone(), vs.clone()),
                LabelRequirement::Exists(k) => LabelTerm::Exists(k.clone()),
                LabelRequirement::DoesNotExist(k) => LabelTerm::DoesNotExist(k.clone()),
                LabelRequirement::GreaterThan(k, _) | LabelRequirement::LessThan(k, _) => {
                    exact = false;
                    LabelTerm::Exists(k.clone())
                }
            })
            .collect();
        (terms, exact)
    }
}

/// A parsed field selector: equality and inequality on dotted paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter as kube-apiserver does: terms split on unescaped
    /// commas (empty terms are skipped), each `field=value`, `field==value` or `field!=value`, with
    /// `\,`, `\=` and `\\` escapes in values. A term without an operator or a field is an error.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let error = |problem: String| SelectorError {
            text: text.to_owned(),
            problem,
        };
        let mut reqs = Vec::new();
        for term in split_unescaped_commas(text) {
            if term.is_empty() {
                continue;
            }
            let split = term.char_indices().find_map(|(i, _)| {
                let rest = &term[i..];
                ["!=", "==", "="]
                    .into_iter()
                    .find(|op| rest.starts_with(op))
                    .map(|op| (&term[..i], op, &term[i + op.len()..]))
            });
            let Some((field, op, value)) = split else {
                return Err(error(format!("can't understand {term:?}")));
            };
            if field.trim().is_empty() {
                return Err(error(format!("{term:?} names no field")));
            }
            let value = unescape(value).map_err(error)?;
            reqs.push((field.trim().to_owned(), op != "!=", value));
        }
        Ok(Self(reqs))
    }

    /// Whether `object` satisfies every requirement (a missing field reads as "").
    pub fn matches(&self, object: &serde_json::Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let mut current = object;
            for seg in path.split('.') {
                current = current.get(seg).unwrap_or(&serde_json::Value::Null);
            }
            let actual = match current {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }

    /// Whether the selector is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas not preceded by a backslash escape.
fn split_unescaped_commas(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Undoes `\,`, `\=` and `\\` in a field selector value; an unescaped `=` or another escape is an error.
fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(other) => {
                    return Err(format!("invalid escape sequence \\{other} in {value:?}"));
                }
                None => return Err(format!("unterminated escape in {value:?}")),
            },
            '=' => return Err(format!("unescaped '=' in the value {value:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The labels of an object.
pub fn labels_of(object: &serde_json::Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selector_forms() {
        let sel = LabelSelector::parse(
            "env=prod,tier!=web,app in (a, b),!legacy,cluster.x-k8s.io/cluster-name",
        )
        .unwrap();
        assert!(sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "b"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "c"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        assert!(!sel.matches(&labels(&[
            ("env", "prod"),
            ("app", "a"),
            ("legacy", "1"),
            ("cluster.x-k8s.io/cluster-name", "c")
        ])));
        let notin = LabelSelector::parse("app notin (a,b)").unwrap();
        assert!(notin.matches(&labels(&[])));
        assert!(!notin.matches(&labels(&[("app", "a")])));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("").unwrap().is_empty());
    }

    #[test]
    fn label_selectors_kube_apiserver_refuses_are_refused() {
        for bad in [
            "!", "!=b", ",,,", "a,", ",a", "a=b,,c", "a in ()", "a in (b", "a b", "!a=b", "a>b",
            "a=(b)", "-a", "a=b c", "==",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let problem = LabelSelector::parse("!").unwrap_err().problem;
        assert_eq!(problem, "found '', expected: identifier");
        let problem = LabelSelector::parse("!=b").unwrap_err().problem;
        assert_eq!(
            problem,
            "found '!=', expected: !, identifier, or 'end of string'"
        );
        let problem = LabelSelector::parse(",,,").unwrap_err().problem;
        assert_eq!(
            problem,
            "found ',', expected: !, identifier, or 'end of string'"
        );
        for good in [
            "",
            "  ",
            "a",
            "!a",
            "a=",
            "a==b",
            "a!=b",
            "a in (b,)",
            "a notin (b, c)",
            "a>1",
            "a<-2",
            " a = b , !c ",
        ] {
            assert!(LabelSelector::parse(good).is_ok(), "{good:?} was refused");
        }
        let empty = LabelSelector::parse("a=").unwrap();
        assert!(empty.matches(&labels(&[("a", "")])));
        assert!(!empty.matches(&labels(&[])));
        let greater = LabelSelector::parse("n>5").unwrap();
        assert!(greater.matches(&labels(&[("n", "6")])));
        assert!(!greater.matches(&labels(&[("n", "5")])));
        assert!(!greater.matches(&labels(&[("n", "x")])));
    }

    #[test]
    fn field_selectors_parse_as_kube_apiserver_parses_them() {
        assert!(FieldSelector::parse(",,,").unwrap().is_empty());
        for bad in ["=b", "a", "a=b=c", "a=b\\x", "!=x"] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let obj = serde_json::json!({"metadata": {"name": "a,b=c"}});
        assert!(
            FieldSelector::parse("metadata.name=a\\,b\\=c")
                .unwrap()
                .matches(&obj)
        );
    }

    #[test]
    fn field_selector_forms() {
        let obj = serde_json::json!({"metadata": {"name": "x", "namespace": "d"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=x,status.phase!=Pending")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace==e")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec.missing=").unwrap().matches(&obj));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
