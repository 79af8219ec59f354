//! The wait between tries of a call the server put off (a lock denied or
//! refused in grace, a server out of reach): doubling from a first pause,
//! one second at most.

use std::time::Duration;

const MAX: Duration = Duration::from_secs(1);

pub(crate) struct Pause(Duration);

impl Pause {
    pub(crate) fn from(first: Duration) -> Pause {
        Pause(first)
    }

    /// 50 ms first: what lock retries start with.
    pub(crate) fn for_locks() -> Pause {
        Pause::from(Duration::from_millis(50))
    }

    /// Sleeps the current pause, then doubles it.
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(MAX);
    }
}
