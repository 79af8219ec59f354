//! The NFSv4 server's tunables ([`Nfs4Config`]): plain values the server
//! object, COPY and the delegation bound are built from (kept apart from
//! them so that the server object does not import its handlers).

use super::state;
use super::state::copy::CopyLimits;
use std::time::Duration;

/// Tunables of the NFSv4 server.
#[derive(Clone, Debug)]
pub struct Nfs4Config {
    pub lease: Duration,
    pub grace: Duration,
    /// The id-mapping domain for `owner@domain` strings.
    pub domain: String,
    /// Send names (`user@domain`) instead of numeric ids.
    pub id_names: bool,
    /// Most slots a session gets.
    pub max_slots: u32,
    /// How long, and how many, lapsed clients keep their state.
    pub courtesy: state::Courtesy,
    /// Most delegations outstanding at once; past it OPEN grants none
    /// (OPEN_DELEGATE_NONE_EXT with WND4_RESOURCE).
    pub max_delegations: usize,
    /// When COPY runs in the background, and its bounds.
    pub copy: CopyConfig,
    /// Bounds on client records and per-client state.
    pub limits: state::StateLimits,
}

impl Default for Nfs4Config {
    fn default() -> Self {
        Nfs4Config {
            lease: Duration::from_secs(90),
            grace: Duration::from_secs(90),
            domain: "localdomain".into(),
            id_names: false,
            max_slots: 128,
            courtesy: state::Courtesy::default(),
            max_delegations: default_max_delegations(),
            copy: CopyConfig::default(),
            limits: state::StateLimits::default(),
        }
    }
}

/// Most bytes one COPY copies: 16 MiB takes well under a second even on a
/// disk that writes 100 MB/s, and costs a client that loops only one round
/// trip per 16 MiB. (knfsd bounds a synchronous copy at 4 MiB.)
pub const COPY_MAX: u64 = 16 << 20;

/// When COPY runs in the background, and its bounds.
#[derive(Clone, Debug)]
pub struct CopyConfig {
    /// An asynchronous COPY asked for more bytes than this runs in the
    /// background; a smaller one is copied at once.
    pub async_min: u64,
    /// Bytes a background copy copies per step: it holds a pool thread
    /// and the destination's write queue for one step at a time, and a
    /// cancel takes effect after the step under way (4 MiB: well under a
    /// second on a slow disk).
    pub chunk: u64,
    pub limits: CopyLimits,
}

impl Default for CopyConfig {
    fn default() -> Self {
        CopyConfig {
            async_min: COPY_MAX,
            chunk: 4 << 20,
            limits: CopyLimits::default(),
        }
    }
}

/// The bound on outstanding delegations for this machine: four per MiB
/// of memory, as Linux's server allows (a delegation costs a few hundred
/// bytes here; the bound is for the clients' sake as much as ours).
pub fn default_max_delegations() -> usize {
    let mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4096, |kb| kb / 1024);
    (mib as usize * 4).clamp(1024, 4 << 20)
}
