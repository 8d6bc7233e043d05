//! The operator's log lines and metrics (`cobordism_shard::events` decides their shape): each
//! line goes to `console.log` (Workers Logs, `wrangler tail`), each data point to the optional
//! Workers Analytics Engine binding `METRICS` (nothing when it is absent).

use cobordism_shard::{Event, MetricPoint, ShardError};
use worker::{AnalyticsEngineDataPointBuilder, Env};

use crate::config::var;

/// The binding of the Analytics Engine dataset, if the deployment has one.
const METRICS: &str = "METRICS";

/// Logs one line.
pub fn log(line: &str) {
    worker::console_log!("{line}");
}

/// `SHARD_INDEX`, when it is a number (errors are logged before the settings are checked).
fn shard_index(env: &Env) -> Option<usize> {
    var(env, "SHARD_INDEX").and_then(|v| v.trim().parse().ok())
}

/// Writes `point` to `METRICS`, if bound; a failure is logged, never answered.
pub fn record(env: &Env, point: MetricPoint) {
    let Ok(dataset) = env.analytics_engine(METRICS) else {
        return;
    };
    let written = AnalyticsEngineDataPointBuilder::new()
        .indexes([point.index.as_str()])
        .blobs(point.blobs)
        .doubles(point.doubles)
        .write_to(&dataset);
    if let Err(e) = written {
        worker::console_error!("METRICS: {e}");
    }
}

/// An error answer's log line and data point.
pub fn error(env: &Env, e: &ShardError) {
    let shard = shard_index(env);
    let event = Event::Error {
        shard,
        code: e.code.name(),
        status: e.status(),
    };
    log(&event.line());
    let point = MetricPoint::of(shard, e.status(), "-", "-", e.code.name());
    record(env, point);
}
