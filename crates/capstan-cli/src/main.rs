//! The `capstan` command line: Cluster API for the machines you own, in one binary.
//!
//! Each subcommand lives in its own module under [`cmd`]. Exit codes are shared by all of them and
//! documented in `docs/cli.md`:
//!
//! | code | meaning |
//! | ---- | ------- |
//! | 0 | success (for `lint`: no errors; warnings may have been printed); also when the reader of stdout went away |
//! | 1 | the input was read but is not valid (`lint` found errors, `render` refused the spec, `convert` refused a document and wrote nothing), or the object named does not exist |
//! | 2 | the input could not be read or parsed, or the command line was wrong |
//! | 3 | the API server could not be reached |

mod client;
mod cmd;
mod malloc;
mod output;
mod provisioning;
mod stderr;

use clap::Parser;
use std::process::ExitCode;

/// The version `--version` prints: the package's, and the commit the binary was built from (see
/// `build.rs`), e.g. `0.1.0 (3f2a9c1d8e7b 2026-12-01)`.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("CAPSTAN_BUILD_COMMIT"),
    ")"
);

/// Cluster API for the machines you own.
#[derive(Debug, Parser)]
#[command(name = "capstan", version = VERSION, about, long_about = None)]
struct Cli {
    /// When to colour the output. `NO_COLOR` in the environment means `never` unless `always` is given.
    #[arg(long, global = true, value_enum, default_value_t = output::ColorChoice::Auto)]
    color: output::ColorChoice,

    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    output::init_tracing();
    let style = output::Style::detect(cli.color);
    match cmd::run(cli.command, &style) {
        Ok(code) => code.into(),
        Err(err) => {
            stderr::errln!("{} {err:#}", style.error("error:"));
            exit_of(&err).into()
        }
    }
}

/// The exit code of an error that escaped a subcommand.
fn exit_of(err: &anyhow::Error) -> output::Exit {
    match err.downcast_ref::<client::ClientError>() {
        Some(e) if e.is_not_found() => output::Exit::Invalid,
        Some(client::ClientError::Unreachable { .. }) => output::Exit::Unreachable,
        _ => output::Exit::Unreadable,
    }
}
