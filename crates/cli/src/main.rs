//! # crossbow
//!
//! The `crossbow` command line (to be built): parses flags and TOML configs and wires the data
//! pipeline, the engine, the synchroniser and the tuner together.

fn main() {
    eprintln!("crossbow: no commands yet; see README.md");
    std::process::exit(2);
}
