//! The operator's log lines and metrics, printed and written as `cobordism_shard::events` builds
//! them (it decides their shape, and which answers write any): each line goes to `console.log`
//! (Workers Logs, `wrangler tail`), the only console call of the Worker's Rust code; each data
//! point to the optional Workers Analytics Engine binding `METRICS` (nothing when it is absent).

use cobordism_shard::{Event, MetricPoint, Settings, ShardError};
use wasm_bindgen::prelude::*;
use worker::{AnalyticsEngineDataPointBuilder, Env};

use crate::config::var;

/// The binding of the Analytics Engine dataset, if the deployment has one.
const METRICS: &str = "METRICS";

/// Logs one line.
pub fn log(line: &str) {
    worker::console_log!("{line}");
}

/// Logs `event`.
pub fn event(event: &Event<'_>) {
    log(&event.line());
}

/// The line `worker/entry.mjs` prints when it replaces a broken wasm instance, read once while
/// the instance is sound (`cobordism_shard::events` says why).
#[wasm_bindgen(js_name = instanceResetLine)]
pub fn instance_reset_line() -> String {
    Event::InstanceReset.line()
}

/// `SHARD_INDEX`, when it is a number (errors are logged before the settings are checked).
pub fn shard_index(env: &Env) -> Option<usize> {
    Settings::shard_index_of(|name| var(env, name))
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
        let why = e.to_string();
        event(&Event::MetricsFailed {
            index: &point.index,
            why: &why,
        });
    }
}

/// An error answer's log line and data point, if it writes any.
pub fn error(env: &Env, e: &ShardError) {
    let shard = shard_index(env);
    if let Some(line) = Event::error(shard, e) {
        event(&line);
    }
    if let Some(point) = MetricPoint::error(shard, e) {
        record(env, point);
    }
}
