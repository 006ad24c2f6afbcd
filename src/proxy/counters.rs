//! The proxy's request counters, read by `binky metrics`.

use crate::protocol::ProxyMetrics;
use std::sync::atomic::{AtomicU64, Ordering};

/// Proxy counters, updated lock-free by the proxy: one shard per proxy
/// thread, each on its own cache line, so counting a request never makes
/// the threads contend; readers sum the shards.
#[derive(Default)]
pub struct ProxyCounters {
    shards: [CounterShard; crate::proxy::MAX_THREADS],
}

/// One proxy thread's counters.
#[derive(Default)]
#[repr(align(128))]
pub struct CounterShard {
    /// Requests handled.
    pub requests: AtomicU64,
    /// Response bytes sent.
    pub bytes: AtomicU64,
    /// Proxy errors.
    pub errors: AtomicU64,
}

impl ProxyCounters {
    /// The shard of proxy thread `i` (any `i`: it wraps).
    pub fn shard(&self, i: usize) -> &CounterShard {
        &self.shards[i % self.shards.len()]
    }

    /// The shards summed, for `binky metrics`.
    pub fn snapshot(&self) -> ProxyMetrics {
        let sum = |f: fn(&CounterShard) -> &AtomicU64| {
            self.shards
                .iter()
                .map(|s| f(s).load(Ordering::Relaxed))
                .sum()
        };
        ProxyMetrics {
            requests: sum(|s| &s.requests),
            bytes: sum(|s| &s.bytes),
            errors: sum(|s| &s.errors),
        }
    }
}
