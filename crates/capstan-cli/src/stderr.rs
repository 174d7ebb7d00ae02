//! Writing to stderr without panicking, for both binaries (`capstan` and `capstan-agent`): every
//! message, warning and progress line goes through [`errln!`], and the log lines through
//! [`write`] (`output::init_tracing`'s writer), never `eprintln!`.
//!
//! `eprintln!` panics when the write fails, and it fails whenever the reader of stderr has gone
//! (`capstan … 2>&1 | true`: EPIPE): the command would end with a panic and exit 101 instead of
//! its own exit code. A failed write to stderr is dropped: stderr is where failures are
//! reported, so there is nowhere left to report its own, and what the command did (its exit code,
//! its files, its stdout) does not depend on anyone reading its messages.

use std::io::Write;

/// Writes `bytes` to stderr in one call (so that lines from several threads do not interleave);
/// a failure (above all EPIPE, a closed stderr) is dropped, see the module comment.
pub fn write(bytes: &[u8]) {
    let _ = std::io::stderr().lock().write_all(bytes);
}

/// `eprintln!` through [`write`]: never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::stderr::write(format!("{}\n", format_args!($($arg)*)).as_bytes())
    };
}

pub(crate) use errln;
