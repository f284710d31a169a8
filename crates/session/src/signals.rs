//! Ctrl-C and `kill`: the first SIGINT or SIGTERM asks the run to stop after the current
//! iteration (it then writes a checkpoint and exits with 130 or 143); a second one exits at
//! once with the same code. Exiting at once never damages a checkpoint: files are renamed
//! into place only when whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::CliError;

/// SIGINT's number.
pub const SIGINT: i32 = 2;
/// SIGTERM's number.
pub const SIGTERM: i32 = 15;

/// A test hook: `CROSSBOW_TEST_INTERRUPT_AT_ITERATION=N` behaves as a Ctrl-C arriving during
/// iteration N (for the tests of exact resume, which must interrupt at a known iteration).
const TEST_ENV: &str = "CROSSBOW_TEST_INTERRUPT_AT_ITERATION";

/// Whether a stop was asked for, and by which signal.
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
    test_at: Option<u64>,
}

impl Interrupt {
    /// Installs the handlers (once per process is enough; later calls add nothing harmful).
    pub fn install() -> Result<Self, CliError> {
        let signal = Arc::new(AtomicUsize::new(0));
        #[cfg(unix)]
        {
            let seen = Arc::new(AtomicBool::new(false));
            for sig in [SIGINT, SIGTERM] {
                // Order matters: the conditional exit checks the flag the second handler sets,
                // so the first signal only sets it and the second one exits.
                signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&seen))
                    .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&seen)))
                    .and_then(|_| signal_hook::flag::register_usize(sig, Arc::clone(&signal), sig as usize))
                    .map_err(|e| CliError::run(format!("cannot install the handler of signal {sig}: {e}")))?;
            }
        }
        #[cfg(not(unix))]
        let _ = AtomicBool::new(false);
        let test_at = std::env::var(TEST_ENV).ok().and_then(|v| v.parse().ok());
        Ok(Interrupt { signal, test_at })
    }

    /// A handle that never fires (library use, benchmarks).
    pub fn none() -> Self {
        Interrupt { signal: Arc::new(AtomicUsize::new(0)), test_at: None }
    }

    /// An error to stop with when a signal arrived during start-up (before any iteration:
    /// there is nothing to save).
    pub fn during_startup(&self, stage: &str) -> Result<(), CliError> {
        match self.signal.load(Ordering::SeqCst) {
            0 => Ok(()),
            s => Err(CliError::Interrupted {
                code: exit_code(s as i32),
                msg: format!(
                    "stopped by {} while {stage}, before the first iteration; nothing to save",
                    name(s as i32)
                ),
            }),
        }
    }

    /// The signal that asked to stop, checked after `iteration` iterations.
    pub fn requested(&self, iteration: u64) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 if self.test_at == Some(iteration) => Some(SIGINT),
            0 => None,
            s => Some(s as i32),
        }
    }
}

/// The exit code after `signal`: 128 + its number (130 for SIGINT, 143 for SIGTERM).
pub fn exit_code(signal: i32) -> i32 {
    128 + signal
}

/// The signal's usual name.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT (Ctrl-C)",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
