//! Terminal output shared by the subcommands: colour choice (`--color`, `NO_COLOR`), list formats
//! (`--output json|yaml`), exit codes, logging set-up, and writing to stdout ([`outln!`], [`out!`]).
//!
//! Every subcommand writes its stdout through [`write_stdout`], never `println!`: `println!` panics
//! when the reader has gone (`capstan get bmh | head -1`). A closed stdout ends the process quietly
//! with exit 0, as the reader asked for no more; any other write error is reported (exit 2).
//! stderr is written through [`crate::stderr`] (messages with `errln!`, logs with the writer
//! [`init_tracing`] installs), whose failed writes are dropped.

use crate::stderr::errln;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// The documented exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// The input was read but is not valid.
    Invalid = 1,
    /// The input could not be read or parsed.
    Unreadable = 2,
    /// The API server could not be reached.
    Unreachable = 3,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Writes to stdout; a closed pipe ends the process quietly (exit 0), another error with exit 2.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    let written = {
        let mut stdout = std::io::stdout().lock();
        stdout.write_fmt(args).and_then(|()| stdout.flush())
    };
    match written {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(Exit::Ok as i32)
        }
        Err(err) => {
            errln!("error: writing to stdout: {err}");
            std::process::exit(Exit::Unreadable as i32)
        }
    }
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};

/// `--color` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when writing to a terminal and `NO_COLOR` is not set.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Whether to colour, decided once per run.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Decides from `--color`, `NO_COLOR` (any non-empty value, per no-color.org) and whether stderr
    /// is a terminal.
    pub fn detect(choice: ColorChoice) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => !no_color && std::io::stderr().is_terminal(),
        };
        Self { color }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Bold red.
    pub fn error(&self, text: &str) -> String {
        self.paint("1;31", text)
    }

    /// Bold yellow.
    pub fn warning(&self, text: &str) -> String {
        self.paint("1;33", text)
    }

    /// Bold green.
    pub fn ok(&self, text: &str) -> String {
        self.paint("1;32", text)
    }
}

/// The log filter without `CAPSTAN_LOG`: warnings.
const DEFAULT_LOG_FILTER: &str = "warn";

/// The Kubernetes client's own line for every failed request: at ERROR, whatever the cause. It
/// repeats the error the caller reports (a command would print it twice), and a controller
/// waiting for a workload API server that is still booting would log an ERROR every few seconds
/// for an expected state its conditions already show. Off unless `CAPSTAN_LOG` names this target.
const KUBE_CLIENT_REQUEST_FAILURES: &str = "kube_client::client::builder";

/// The directive that keeps response bodies logged by kube's client out of the logs.
pub const KUBE_CLIENT_BODIES: &str = "kube_client::client=error";

/// Logs go to stderr, filtered by `CAPSTAN_LOG` (default [`DEFAULT_LOG_FILTER`]), never coloured
/// when `NO_COLOR` is set.
pub fn init_tracing() {
    let filter = log_filter(std::env::var("CAPSTAN_LOG").ok().as_deref());
    let ansi = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_ansi(ansi)
        .try_init();
}

/// The log filter for `requested` (the value of `CAPSTAN_LOG`, if set).
fn log_filter(requested: Option<&str>) -> tracing_subscriber::EnvFilter {
    let mut filter = requested
        .and_then(|r| tracing_subscriber::EnvFilter::try_new(r).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    if !requested.is_some_and(|r| r.contains(KUBE_CLIENT_REQUEST_FAILURES))
        && let Ok(off) = format!("{KUBE_CLIENT_REQUEST_FAILURES}=off").parse()
    {
        filter = filter.add_directive(off);
    }
    // kube's client logs the whole text of a response it cannot decode (at warn) and of every
    // Status answer (at trace): a Secret's data among them. Its errors still reach the callers,
    // which name the object; at any CAPSTAN_LOG, that module logs errors only.
    if let Ok(quiet) = KUBE_CLIENT_BODIES.parse() {
        filter = filter.add_directive(quiet);
    }
    filter
}

/// tracing's writer: stderr through [`crate::stderr::write`]. With `std::io::stderr` a closed
/// stderr made every log line fail, and tracing's fmt layer reports a failed write with
/// `eprintln!`, which panics on the same closed stderr.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::stderr::write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_request_failure_line_is_off_unless_asked_for() {
        for requested in [
            None,
            Some("debug"),
            Some("debug,kube=info"),
            Some("not a filter["),
        ] {
            let filter = log_filter(requested).to_string();
            assert!(
                filter.contains("kube_client::client::builder=off"),
                "{requested:?}: {filter}"
            );
            assert!(filter.contains("kube_client::client=error"), "{filter}");
        }
        let asked = log_filter(Some("warn,kube_client::client::builder=error")).to_string();
        assert!(
            asked.contains("kube_client::client::builder=error"),
            "{asked}"
        );
        assert!(!asked.contains("builder=off"), "{asked}");
    }
}
