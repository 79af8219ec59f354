//! The write verifier NFSv3 and NFSv4 WRITE and COMMIT return: it changes
//! when data acknowledged UNSTABLE may have been lost, so clients send it
//! again. That is a restart, and also a write or flush that failed for
//! lack of storage or an I/O error: the kernel reports a writeback error
//! to one fsync of a file only, so a later COMMIT of the same file (by
//! another client, or a retry) would succeed over lost data (as knfsd,
//! which resets its verifier on such errors).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct WriteVerf(AtomicU64);

impl Default for WriteVerf {
    fn default() -> Self {
        WriteVerf(AtomicU64::new(fresh()))
    }
}

fn fresh() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_secs() << 32) ^ t.subsec_nanos() as u64 ^ rand::random::<u32>() as u64
}

impl WriteVerf {
    pub fn get(&self) -> [u8; 8] {
        self.0.load(Ordering::Relaxed).to_be_bytes()
    }

    /// A write or commit failed in a way that may have lost earlier
    /// unstable data (`lost`): a new verifier, and a log line saying so.
    pub fn reset_if(&self, lost: bool) {
        if lost {
            let old = self.0.load(Ordering::Relaxed);
            let mut new = fresh();
            if new == old {
                new = new.wrapping_add(1);
            }
            self.0.store(new, Ordering::Relaxed);
            tracing::warn!("storage error on write or commit: new write verifier, clients resend what they have not committed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_only_on_loss() {
        let v = WriteVerf::default();
        let a = v.get();
        v.reset_if(false);
        assert_eq!(v.get(), a);
        v.reset_if(true);
        assert_ne!(v.get(), a);
    }
}
