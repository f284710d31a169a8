//! # crossbow
//!
//! The `crossbow` command line with the built-in synchronisers; everything is in the library
//! ([`crossbow_cli::main_with`]), so a binary with synchronisers of your own is this file plus
//! [`crossbow_cli::SyncRegistry::register`] or [`crossbow_cli::SyncRegistry::add`] calls — as `ako` below, which lives in its own
//! crate (`crates/ako`) and uses only the public synchroniser API.

fn main() -> std::process::ExitCode {
    let mut registry = crossbow_cli::SyncRegistry::builtin();
    // Ako: --sync ako --ako-partitions P|auto [--ako-bandwidth GB/s] (its entry declares the
    // options and their flags).
    registry.add(crossbow_ako::entry());
    crossbow_cli::main_with(registry)
}
