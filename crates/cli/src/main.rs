//! # crossbow
//!
//! The `crossbow` command line with the built-in synchronisers; everything is in the library
//! ([`crossbow_cli::main_with`]), so a binary with synchronisers of your own is this file plus
//! [`crossbow_cli::SyncRegistry::register`] calls — as `ako` below, which lives in its own
//! crate (`crates/ako`) and uses only the public synchroniser API.

fn main() -> std::process::ExitCode {
    let mut registry = crossbow_cli::SyncRegistry::builtin();
    // Ako: --sync ako --ako-partitions P|auto [--ako-bandwidth GB/s] (the same as
    // --sync-opt partitions=P|auto, --sync-opt bandwidth=GB/s).
    registry.register("ako", crossbow_ako::HELP, |o: &crossbow_cli::SyncOptions| {
        crossbow_ako::Ako::from_options(o.get("partitions"), o.get("bandwidth"))
    });
    registry.option_flag("ako-partitions", "partitions").option_flag("ako-bandwidth", "bandwidth");
    crossbow_cli::main_with(registry)
}
