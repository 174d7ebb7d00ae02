//! Why a spec could not be rendered, and the located problems a refused spec lists.
//!
//! Every message names where the problem is (`file:line` and field path whenever they are known) and
//! what to do about it; none repeats the text of its underlying source error, which callers print
//! through the `source()` chain.

use std::fmt;
use std::path::PathBuf;

/// One problem found in the spec or in a file it refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `file:line` of the problem, when the input came from a file.
    pub location: Option<String>,
    /// The field the problem is about (`hosts[2].network.bonds[0].links`), when there is one.
    pub field: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(location) = &self.location {
            write!(f, "{location}: ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Why `capstan render` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The spec file could not be read.
    #[error("{file}: cannot read the spec; check that the path exists and is readable")]
    Read {
        /// The spec path.
        file: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },

    /// The spec file is not UTF-8.
    #[error("{file}: not UTF-8 text; a spec is a UTF-8 YAML file")]
    NotText {
        /// The spec path.
        file: String,
    },

    /// The spec is not valid YAML.
    #[error(transparent)]
    Syntax(#[from] capstan_manifest::ManifestError),

    /// The YAML is not one mapping.
    #[error("{file}: {problem}")]
    NotASpec {
        /// `file` or `file:line`.
        file: String,
        /// What is wrong with the document.
        problem: String,
    },

    /// The spec (or a file it refers to) has problems; all of them are listed.
    #[error("{}", list_problems(problems))]
    Invalid {
        /// Every problem found, in spec order.
        problems: Vec<Problem>,
    },

    /// The output directory holds files capstan did not write, so it is left alone.
    #[error("{dir}: holds files capstan did not write ({}); choose an empty or new directory, or remove them", foreign.join(", "))]
    ForeignOutput {
        /// The output directory.
        dir: PathBuf,
        /// The first few foreign entries, relative to `dir`.
        foreign: Vec<String>,
    },

    /// A rendered object could not be serialised; a bug in capstan.
    #[error(
        "could not serialise a {what}; this is a bug in capstan, please report it with the spec"
    )]
    Encode {
        /// The Rust type of the object.
        what: &'static str,
        /// What the serialiser said.
        #[source]
        source: serde_json::Error,
    },

    /// Writing the bundle failed; nothing was changed in the output directory.
    #[error("{path}: cannot write the bundle; nothing in the output directory was changed")]
    Write {
        /// The path being written or moved.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

impl RenderError {
    /// Whether the spec could not be read or parsed at all (as opposed to read and found invalid):
    /// missing or unreadable file, not UTF-8, not YAML. The CLI exits 2 for these and 1 otherwise.
    pub fn is_unreadable(&self) -> bool {
        matches!(
            self,
            Self::Read { .. } | Self::NotText { .. } | Self::Syntax(_)
        )
    }

    /// The problems of an [`RenderError::Invalid`] error; empty for the other kinds.
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid { problems } => problems,
            _ => &[],
        }
    }
}

fn list_problems(problems: &[Problem]) -> String {
    match problems {
        [one] => one.to_string(),
        many => {
            let mut text = format!("the spec has {} problems:", many.len());
            for problem in many {
                text.push_str("\n  ");
                text.push_str(&problem.to_string());
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(location: Option<&str>, field: Option<&str>, message: &str) -> Problem {
        Problem {
            location: location.map(str::to_owned),
            field: field.map(str::to_owned),
            message: message.to_owned(),
        }
    }

    #[test]
    fn one_problem_is_one_line() {
        let err = RenderError::Invalid {
            problems: vec![problem(
                Some("c.yaml:42"),
                Some("hosts[2].network.bonds[0].links"),
                "link \"ens9\" is not defined",
            )],
        };
        assert_eq!(
            err.to_string(),
            "c.yaml:42: hosts[2].network.bonds[0].links: link \"ens9\" is not defined"
        );
        assert!(!err.is_unreadable());
    }

    #[test]
    fn several_problems_are_listed() {
        let err = RenderError::Invalid {
            problems: vec![
                problem(Some("c.yaml:1"), Some("name"), "bad"),
                problem(None, Some("hosts"), "worse"),
            ],
        };
        assert_eq!(
            err.to_string(),
            "the spec has 2 problems:\n  c.yaml:1: name: bad\n  hosts: worse"
        );
        assert_eq!(err.problems().len(), 2);
    }
}
