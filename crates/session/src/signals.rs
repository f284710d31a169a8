//! Ctrl-C and `kill`: the first SIGINT or SIGTERM asks the run to stop after the current
//! iteration (it then writes a checkpoint and exits with 130 or 143); a second one exits at
//! once with the same code. Exiting at once never damages a checkpoint: files are renamed
//! into place only when whole. Each signal is answered at once with a line ([`set_notes`]):
//! the first says what will happen, the second which checkpoint survives.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// The lines said when the first and the second signal arrive, as leaked byte strings (a
/// signal handler may only load a pointer and `write(2)` it; the strings are never freed, so
/// a handler never reads freed memory).
static FIRST_NOTE: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());
static SECOND_NOTE: AtomicPtr<Vec<u8>> = AtomicPtr::new(std::ptr::null_mut());

/// Sets what the first and the second signal say (`None` keeps the current line). Call it
/// when what survives changes (a checkpoint written); each call leaks the lines it replaces
/// (a few hundred bytes).
pub fn set_notes(first: Option<&str>, second: Option<&str>) {
    for (slot, text) in [(&FIRST_NOTE, first), (&SECOND_NOTE, second)] {
        if let Some(t) = text {
            let bytes = Box::new(format!("\n{t}\n").into_bytes());
            slot.store(Box::into_raw(bytes), Ordering::SeqCst);
        }
    }
}

/// Writes the line in `slot` to standard error; async-signal-safe.
#[cfg(unix)]
fn say_note(slot: &AtomicPtr<Vec<u8>>) {
    let p = slot.load(Ordering::SeqCst);
    if p.is_null() {
        return;
    }
    // SAFETY: `p` came from `Box::into_raw` in `set_notes` and is never freed; `write(2)` is
    // async-signal-safe and reads `len` bytes of the vector's buffer.
    unsafe {
        let v = &*p;
        let _ = libc::write(2, v.as_ptr().cast(), v.len());
    }
}

use crate::error::SessionError;

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
    pub fn install() -> Result<Self, SessionError> {
        let signal = Arc::new(AtomicUsize::new(0));
        #[cfg(unix)]
        {
            let seen = Arc::new(AtomicBool::new(false));
            for sig in [SIGINT, SIGTERM] {
                let (seen, signal) = (Arc::clone(&seen), Arc::clone(&signal));
                let action = move || {
                    if seen.swap(true, Ordering::SeqCst) {
                        // The second signal: say what survives, exit at once.
                        say_note(&SECOND_NOTE);
                        signal_hook::low_level::exit(128 + sig);
                    }
                    signal.store(sig as usize, Ordering::SeqCst);
                    say_note(&FIRST_NOTE);
                };
                // SAFETY: the action only swaps and stores atomics, loads a pointer, and calls
                // write(2) and _exit(2), which are async-signal-safe.
                unsafe { signal_hook::low_level::register(sig, action) }
                    .map_err(|e| SessionError::run(format!("cannot install the handler of signal {sig}: {e}")))?;
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
    pub fn during_startup(&self, stage: &str) -> Result<(), SessionError> {
        match self.signal.load(Ordering::SeqCst) {
            0 => Ok(()),
            s => Err(SessionError::Interrupted {
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
