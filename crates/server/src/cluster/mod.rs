//! Several heads serving one filesystem: the shared recovery records and
//! the cluster-wide grace (docs/cluster.md). [`grace`] is the pure rule
//! book; [`store`] is where the records live (the state directory for one
//! head; [`etcd`] for a cluster).

pub mod etcd;
pub mod grace;
pub mod store;

pub use etcd::Etcd;
pub use grace::{Change, ClusterGrace, Head, Params};
pub use store::{LocalStore, RecoveryStore};
