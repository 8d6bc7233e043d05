//! What a shard tells its operator, typed here so that every line and data point has one shape:
//!
//! * [`Event`]: one JSON log line (the Worker prints it with `console.log`, which Workers Logs
//!   and `wrangler tail` collect) per slice load with its outcome, per error answer, and a
//!   summary of the passes at most once a [`PASS_SUMMARY_MS`] ([`PassSummary`]);
//! * [`MetricPoint`]: one Workers Analytics Engine data point per answer, written when the
//!   optional `METRICS` binding exists (docs/API.md, "Logs and metrics", gives the SQL).

use core::cell::Cell;

use serde::Serialize;

use crate::PassStats;

/// One log line's content.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// A load of the slice ended: `outcome` is `ok` or the error's code.
    SliceLoad {
        shard: usize,
        /// The manifest version loaded (when the manifest was read).
        version: Option<&'a str>,
        /// The slice's size (when the manifest was read).
        bytes: Option<u64>,
        streams: usize,
        ms: f64,
        outcome: &'a str,
    },
    /// An error answer (`shard` unknown when `SHARD_INDEX` is not a number).
    Error {
        shard: Option<usize>,
        code: &'a str,
        status: u16,
    },
    /// The passes since the isolate started.
    Passes {
        shard: usize,
        passes: u64,
        vectors: u64,
        requests: u64,
        by_vectors: [u64; cobordism_protocol::MAX_BATCH],
    },
}

impl Event<'_> {
    /// The line to log: one JSON object.
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Milliseconds between two pass summaries (host clock).
pub const PASS_SUMMARY_MS: f64 = 60_000.0;

/// When the next pass summary is due.
#[derive(Default)]
pub struct PassSummary {
    last_ms: Cell<Option<f64>>,
}

impl PassSummary {
    /// The summary to log at `now_ms`, if one is due: the first pass's, then one a
    /// [`PASS_SUMMARY_MS`] at most.
    pub fn due(&self, now_ms: f64, shard: usize, stats: &PassStats) -> Option<String> {
        let due = self
            .last_ms
            .get()
            .is_none_or(|last| now_ms - last >= PASS_SUMMARY_MS);
        if !due || stats.passes() == 0 {
            return None;
        }
        self.last_ms.set(Some(now_ms));
        let event = Event::Passes {
            shard,
            passes: stats.passes(),
            vectors: stats.vectors(),
            requests: stats.requests,
            by_vectors: stats.by_vectors,
        };
        Some(event.line())
    }
}

/// One Analytics Engine data point: `index` `shard-<i>` (`shard-unknown` for an error answered
/// before `SHARD_INDEX` was read as a number); blobs `status`, `cache` (`hit`, `wait`,
/// `miss`, or `-` for an error), `precision`, `reply` (the form, or the error's code); doubles
/// `pass_vectors`, `batch`, `load_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricPoint {
    /// The sampling key: the shard.
    pub index: String,
    /// `[status, cache, precision, reply]`.
    pub blobs: [String; 4],
    /// `[pass_vectors, batch, load_ms]`.
    pub doubles: [f64; 3],
}

impl MetricPoint {
    /// The point of an answer (`status` 200) or an error.
    pub fn of(
        shard: Option<usize>,
        status: u16,
        cache: &str,
        precision: &str,
        reply: &str,
    ) -> Self {
        MetricPoint {
            index: shard.map_or_else(|| "shard-unknown".into(), |i| format!("shard-{i}")),
            blobs: [
                status.to_string(),
                cache.into(),
                precision.into(),
                reply.into(),
            ],
            doubles: [0.0; 3],
        }
    }

    /// With the answer's pass size, batch and load time.
    pub fn with_sizes(mut self, pass_vectors: usize, batch: usize, load_ms: f64) -> Self {
        self.doubles = [pass_vectors as f64, batch as f64, load_ms];
        self
    }
}
