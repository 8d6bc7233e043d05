//! What a shard tells its operator, built here so that every log line and data point has one
//! shape and the Worker only prints and writes what this module returns.
//!
//! **Log lines** ([`Event`], one JSON object each, which the Worker prints with `console.log`:
//! Workers Logs and `wrangler tail` collect them), by their `event`, and no others:
//!
//! * `slice_load`: a load of the slice ended, `outcome` `ok` or the error's code;
//! * `check_failed`: a manifest check failed (whether a request or a warm-up made it); the
//!   resident slice keeps answering;
//! * `error`: an error answer to a request with access ([`written`]), with what is for the
//!   operator only (`internal`: R2 keys, parser messages, variable values);
//! * `warm_up_failed`: the load or priming a warm-up left running failed (nobody waits for it);
//! * `passes`: a summary of the passes, at most once a [`PASS_SUMMARY_MS`] ([`PassSummary`]);
//! * `keep_warm_failed`: an object's keep-warm alarm was not set, or could not read the
//!   settings;
//! * `metrics_failed`: a data point could not be written;
//! * `instance_reset`: the wasm instance is replaced after a panic or trap.
//!
//! `instance_reset` is the one line not printed by Rust code: `worker/entry.mjs` prints it when it
//! replaces a broken instance, which can no longer be called. Its text still comes from here: the
//! entry module reads [`Event::InstanceReset`]'s line once, at start, while the instance is sound.
//!
//! **Data points** ([`MetricPoint`], written to the Workers Analytics Engine binding `METRICS`
//! when it exists; docs/DEPLOY.md, "Watching a deployment", gives the SQL): one per lm-head
//! answer ([`Served::metric_point`]) and one per error answer to a request with access, on any
//! route ([`MetricPoint::error`]). The warm-up's `200`/`202` and `/healthz` write none.
//!
//! **A request without access writes nothing**, neither line nor point: `401 unauthorized`,
//! `503 auth_not_configured`, and `404`/`405` (decided before access is): so whoever has no
//! token cannot fill the operator's log or dataset ([`written`]).

use core::cell::Cell;

use cobordism_protocol::{ErrorCode, Query};
use serde::Serialize;

use crate::{PassStats, Served, Settings, ShardError};

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
    /// A manifest check failed: `version` keeps answering; the next check backs off.
    CheckFailed {
        shard: usize,
        version: &'a str,
        why: &'a str,
    },
    /// An error answer (`shard` unknown when `SHARD_INDEX` is not a number), with what only the
    /// operator may read.
    Error {
        shard: Option<usize>,
        code: &'a str,
        status: u16,
        internal: Option<&'a str>,
    },
    /// The work a warm-up left running (the load, priming the kernels) failed.
    WarmUpFailed {
        shard: usize,
        code: &'a str,
        internal: Option<&'a str>,
    },
    /// The passes since the isolate started.
    Passes {
        shard: usize,
        passes: u64,
        vectors: u64,
        requests: u64,
        by_vectors: [u64; cobordism_protocol::MAX_BATCH],
    },
    /// An object's keep-warm alarm was not set (or its settings could not be read): the object
    /// may be evicted before `KEEP_WARM_S`; its next request sets the alarm again.
    KeepWarmFailed { shard: Option<usize>, why: &'a str },
    /// A data point could not be written (`index` is the point's).
    MetricsFailed { index: &'a str, why: &'a str },
    /// The wasm instance is replaced after a panic or trap (printed by `worker/entry.mjs`).
    InstanceReset,
}

impl<'a> Event<'a> {
    /// The line to log: one JSON object.
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The line of error answer `e`, unless the request had no access ([`written`]).
    pub fn error(shard: Option<usize>, e: &'a ShardError) -> Option<Event<'a>> {
        written(e.code).then(|| Event::Error {
            shard,
            code: e.code.name(),
            status: e.status(),
            internal: e.internal.as_deref(),
        })
    }

    /// The line of the failed work a warm-up left running.
    pub fn warm_up_failed(shard: usize, e: &'a ShardError) -> Event<'a> {
        Event::WarmUpFailed {
            shard,
            code: e.code.name(),
            internal: e.internal.as_deref(),
        }
    }
}

/// Whether an error answer writes its line and data point: not when it is given before access
/// is granted (`401`, `503 auth_not_configured`, and the `404`/`405` decided before access is),
/// so that a caller without a token writes nothing to the operator's log or dataset.
pub fn written(code: ErrorCode) -> bool {
    // A must-fail build (crates/shard/must-fail.txt) writes for every request.
    cfg!(shard_perturb = "written_without_access")
        || !matches!(
            code,
            ErrorCode::Unauthorized
                | ErrorCode::AuthNotConfigured
                | ErrorCode::NotFound
                | ErrorCode::MethodNotAllowed
        )
}

/// Milliseconds between two pass summaries (host clock).
pub const PASS_SUMMARY_MS: f64 = 60_000.0;

/// When the next pass summary is due.
#[derive(Default)]
pub struct PassSummary {
    last_ms: Cell<Option<f64>>,
}

impl PassSummary {
    /// The summary line to log at `now_ms`, if one is due: the first pass's, then one a
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

/// The status of an lm-head answer.
const SERVED: u16 = 200;

/// One Analytics Engine data point: `index` `shard-<i>` (`shard-unknown` for an error answered
/// before `SHARD_INDEX` was read as a number); blobs `status`, `cache` (`hit`, `wait`,
/// `miss`, or `-` for an error), `precision`, `reply` (the form, or the error's code); doubles
/// `pass_vectors`, `batch`, `load_ms` (zeros for an error).
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
    /// A point with zero doubles.
    fn of(shard: Option<usize>, status: u16, cache: &str, precision: &str, reply: &str) -> Self {
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

    /// The point of error answer `e`, unless the request had no access ([`written`]).
    pub fn error(shard: Option<usize>, e: &ShardError) -> Option<MetricPoint> {
        written(e.code).then(|| MetricPoint::of(shard, e.status(), "-", "-", e.code.name()))
    }
}

impl Served {
    /// The data point of this answer to `query`: its cache, precision and form, pass size,
    /// batch and load time.
    pub fn metric_point(&self, cfg: &Settings, query: &Query) -> MetricPoint {
        let facts = self.headers(cfg, query);
        let point = MetricPoint::of(
            Some(cfg.shard_index),
            SERVED,
            facts.cache.name(),
            facts.precision,
            facts.reply,
        );
        let doubles = [facts.pass_vectors as f64, facts.batch as f64, facts.load_ms];
        MetricPoint { doubles, ..point }
    }
}
