//! `capstan lint PATH…`: static analysis of a CAPI / Metal3 manifest set.
//!
//! The given files (or directories, or `-` for stdin) are the whole set unless `--partial`.
//! Exit 0: no errors; 1: errors found; 2: a file could not be read or parsed.

use crate::output::{Exit, Style};
use crate::output::{out, outln};
use crate::stderr::errln;
use capstan_lint::{LintOptions, Report};
use std::path::PathBuf;

/// Arguments of `capstan lint`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files, directories (read recursively: *.yaml, *.yml, *.json) or `-` for stdin.
    #[arg(required_unless_present_any = ["explain", "list_rules"])]
    paths: Vec<PathBuf>,
    /// The files are only part of the set: skip findings that need to see every object.
    #[arg(long)]
    partial: bool,
    /// Also validate every object against the CRD schemas in this directory (e.g. `kubectl get crd -o yaml`).
    #[arg(long, value_name = "DIR")]
    schemas: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Explain one rule and exit.
    #[arg(long, value_name = "ID")]
    explain: Option<String>,
    /// List every rule and exit.
    #[arg(long)]
    list_rules: bool,
}

/// `--format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Text,
    Json,
}

pub fn run(args: Args, style: &Style) -> anyhow::Result<Exit> {
    if let Some(id) = &args.explain {
        return Ok(explain(id, style));
    }
    if args.list_rules {
        list_rules(args.format)?;
        return Ok(Exit::Ok);
    }
    let objects = match capstan_manifest::load_paths(&args.paths) {
        Ok(objects) => objects,
        Err(err) => {
            errln!("{} {err}", style.error("error:"));
            return Ok(Exit::Unreadable);
        }
    };
    let schemas = match &args.schemas {
        Some(dir) => match capstan_schema::CrdSet::load_dir(dir) {
            Ok(set) => Some(set),
            Err(err) => {
                errln!("{} {}: {err}", style.error("error:"), dir.display());
                return Ok(Exit::Unreadable);
            }
        },
        None => None,
    };
    let options = LintOptions {
        partial: args.partial,
        schemas,
    };
    let report = capstan_lint::lint(objects, &options);
    print_report(&report, args.format, style)?;
    Ok(if report.has_errors() {
        Exit::Invalid
    } else {
        Exit::Ok
    })
}

fn print_report(report: &Report, format: Format, style: &Style) -> anyhow::Result<()> {
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&report.to_json())?),
        Format::Text => {
            let text = report.render_human(style.color);
            out!("{text}");
            if !text.ends_with('\n') {
                outln!();
            }
        }
    }
    Ok(())
}

fn explain(id: &str, style: &Style) -> Exit {
    match capstan_lint::explain(id) {
        Some(rule) => {
            outln!(
                "{} [{}]: {}\n\n{}\n\nfix: {}",
                rule.id,
                rule.severity,
                rule.summary,
                rule.explanation,
                rule.fix
            );
            Exit::Ok
        }
        None => {
            errln!(
                "{} no rule {id:?}; `capstan lint --list-rules` lists them",
                style.error("error:")
            );
            Exit::Unreadable
        }
    }
}

fn list_rules(format: Format) -> anyhow::Result<()> {
    let rules = capstan_lint::catalogue();
    match format {
        Format::Json => {
            let list: Vec<_> = rules
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "id": r.id, "severity": r.severity.to_string(), "summary": r.summary,
                        "explanation": r.explanation, "fix": r.fix,
                    })
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&list)?);
        }
        Format::Text => {
            for r in rules {
                outln!("{:<40} {:<8} {}", r.id, r.severity.to_string(), r.summary);
            }
        }
    }
    Ok(())
}
