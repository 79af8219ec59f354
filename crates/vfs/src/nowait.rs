//! Running a backend call inline on an async worker thread, only if it can
//! finish without waiting for a disk.
//!
//! Handing a call to the blocking pool and back costs more than the call
//! itself when everything it needs is cached (an `fstat` of an open
//! descriptor, a name in the dentry cache, a page in the page cache). Inside
//! [`attempt`], a backend that supports it ([`crate::Core::supports_nowait`])
//! does only what cannot block and reports [`crate::FsError::WouldBlock`]
//! otherwise; `attempt` then returns None and the caller runs the call again
//! on the blocking pool. Calls that can block must have no side effects
//! before they report it (reads only), which is why only lookups, stats,
//! access checks and reads take part.

use crate::FsError;
use std::cell::Cell;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static BLOCKED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` in no-wait mode. None if anything in it would have blocked, even
/// if `f` swallowed the error (a post-op getattr that is optional, say).
pub fn attempt<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(false));
        }
    }
    ACTIVE.with(|a| a.set(true));
    BLOCKED.with(|b| b.set(false));
    let _reset = Reset;
    let v = f();
    if BLOCKED.with(|b| b.get()) {
        None
    } else {
        Some(v)
    }
}

/// Whether the current call runs in no-wait mode.
pub fn active() -> bool {
    ACTIVE.with(|a| a.get())
}

/// Records that the current call would block; returns the error to report.
pub fn would_block() -> FsError {
    BLOCKED.with(|b| b.set(true));
    FsError::WouldBlock
}

/// For operations that may always block: fails in no-wait mode.
pub fn forbid() -> Result<(), FsError> {
    if active() {
        Err(would_block())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_even_if_swallowed() {
        assert_eq!(attempt(|| 5), Some(5));
        assert_eq!(attempt(|| forbid().ok()), None);
        assert!(!active());
        assert_eq!(forbid(), Ok(()));
    }
}
