//! The C allocator's settings for the long-running commands (`capstan serve`, `capstan
//! controllers`).
//!
//! glibc's malloc gives threads that contend up to eight arenas per core, and memory freed into one
//! arena is reused only by the threads of that arena and rarely returned to the system. A server
//! whose threads come and go (SQLite's writer per store, blocking-pool threads for reads) rests
//! tens of MiB above what it holds: at 400,000 stored objects, 139 MiB idle with the defaults
//! against 108 MiB with two arenas (docs/benchmarks.md). glibc reads its tunables only when a
//! process starts, so the command executes itself again, once, with `GLIBC_TUNABLES` set, before
//! any thread exists. An environment that already sets `GLIBC_TUNABLES` (even to nothing) is left
//! as it is: that is also how to opt out.

/// The tunables: two arenas, and freed memory above 1 MiB at the top of the heap given back.
pub const TUNABLES: &str = "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1048576";

/// Re-executes this process with [`TUNABLES`] unless `GLIBC_TUNABLES` is already set. Returns only
/// when it does not re-execute (already set, not glibc, or the executable cannot be run again,
/// which is logged and otherwise ignored: the defaults only cost memory).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        let mut args = std::env::args_os();
        let arg0 = args.next();
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(error) => {
                tracing::debug!(%error, "not re-executing with malloc tunables");
                return;
            }
        };
        let mut command = std::process::Command::new(exe);
        if let Some(arg0) = arg0 {
            command.arg0(arg0);
        }
        // `exec` returns only on failure.
        let error = command.args(args).env("GLIBC_TUNABLES", TUNABLES).exec();
        tracing::debug!(%error, "not re-executing with malloc tunables");
    }
}
