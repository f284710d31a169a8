//! # crossbow
//!
//! The `crossbow` command line with the built-in synchronisers; everything is in the library
//! ([`crossbow_cli::main_with`]), so a binary with synchronisers of your own is this file plus
//! [`crossbow_cli::SyncRegistry::register`] calls.

fn main() -> std::process::ExitCode {
    crossbow_cli::main_with(crossbow_cli::SyncRegistry::builtin())
}
