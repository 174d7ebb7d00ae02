//! The allocators of the `capstan` binary, and their settings for the long-running commands
//! (`capstan serve`, `capstan controllers`).
//!
//! Every Rust allocation goes to mimalloc. With glibc's malloc, the server's threads (the async
//! workers, the blocking pool's readers, SQLite's writer) contended for its arenas, and a limit of two
//! arenas — which kept an idle server tens of MiB lower — made the contention worse: 1,000 hosts
//! through `capstan serve` cost 39–44 ms of CPU each with two arenas and 36 ms with glibc's default,
//! against 30 ms with mimalloc (docs/benchmarks.md, "`capstan bench hosts` beside an older
//! build").
//!
//! What still calls the C allocator is SQLite (its page caches and statements), so glibc keeps its
//! limit of two arenas, and freed memory above 1 MiB at the top of the heap is given back. mimalloc
//! is told to return freed pages to the system at once and to commit its arenas as they fill rather
//! than up front: at 10,000 hosts that is 298 MiB of peak RSS instead of 333 MiB, for no measurable
//! CPU. Both allocators read their settings only when a process starts (`GLIBC_TUNABLES`,
//! `MIMALLOC_*`), so the command executes itself again, once, with them set, before any thread
//! exists. An environment that already sets `GLIBC_TUNABLES` (even to nothing) is left as it is: that
//! is how to opt out; a `MIMALLOC_*` setting the environment gives is kept.

/// Every Rust allocation of the binary goes to mimalloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// glibc's tunables: two arenas, and freed memory above 1 MiB at the top of the heap given back.
pub const TUNABLES: &str = "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1048576";

/// mimalloc's settings: freed pages go back to the system at once (no delay), and arenas are
/// committed as they fill.
pub const MIMALLOC_SETTINGS: [(&str, &str); 2] = [
    ("MIMALLOC_PURGE_DELAY", "0"),
    ("MIMALLOC_ARENA_EAGER_COMMIT", "0"),
];

/// Re-executes this process with [`TUNABLES`] and [`MIMALLOC_SETTINGS`] unless `GLIBC_TUNABLES` is
/// already set. Returns only when it does not re-execute (already set, not glibc, or the executable
/// cannot be run again, which is logged and otherwise ignored: the defaults only cost memory).
pub fn tune_allocators() {
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
                tracing::debug!(%error, "not re-executing with allocator settings");
                return;
            }
        };
        let mut command = std::process::Command::new(exe);
        if let Some(arg0) = arg0 {
            command.arg0(arg0);
        }
        command.args(args).env("GLIBC_TUNABLES", TUNABLES);
        for (name, value) in MIMALLOC_SETTINGS {
            if std::env::var_os(name).is_none() {
                command.env(name, value);
            }
        }
        // `exec` returns only on failure.
        let error = command.exec();
        tracing::debug!(%error, "not re-executing with allocator settings");
    }
}
