//! [`ChangeNotify`]: hearing of objects changed other than through this
//! server (NFSv4 uses it to recall delegations and drop cached state).
//! Only [`crate::local::LocalFs`] can tell (fanotify/inotify); the default
//! says it cannot. [`crate::faulty::Faulty`] passes it on.

use crate::Fid;

/// Notice of changes made behind the server's back.
pub trait ChangeNotify {
    /// Asks to hear of objects changed other than through this server
    /// (a local process writing, truncating, renaming, removing, changing
    /// attributes), soon after each change; false where the backend
    /// cannot tell (then nothing is called).
    fn on_local_change(&self, _hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        false
    }
}
