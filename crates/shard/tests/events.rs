//! The operator's log lines and metrics (`cobordism_shard::events`): a line per slice load with
//! its outcome, the error line's shape, the pass summary's cadence, the data point's layout.

mod common;

use cobordism_protocol::MAX_BATCH;
use cobordism_shard::events::PASS_SUMMARY_MS;
use cobordism_shard::{Event, MetricPoint, PassStats, PassSummary, Shard};
use common::*;
use serde_json::{json, Value};

fn lines(store: &Store) -> Vec<Value> {
    let logged = store.logged.borrow();
    logged
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_slice_load_logs_one_line_with_its_outcome() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(2), model(81, 2));
    assert_eq!(
        code(block_on(shard.ensure(&cfg, &store))),
        "manifest_missing"
    );
    store.upload(&m);
    store.advance(cfg.load_retry_ms);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    let got = lines(&store);
    assert_eq!(got.len(), 2, "{got:?}: a hit logs nothing");
    assert_eq!(
        got[0],
        json!({ "event": "slice_load", "shard": 0, "version": null, "bytes": null,
                "streams": 4, "ms": 0.0, "outcome": "manifest_missing" })
    );
    assert_eq!(got[1]["outcome"], "ok");
    assert_eq!(got[1]["version"], m.manifest.version.as_str());
    assert_eq!(got[1]["bytes"], m.manifest.shards[0].bytes);
}

#[test]
fn an_error_line_names_the_code_and_status() {
    let event = Event::Error {
        shard: Some(3),
        code: "busy",
        status: 503,
    };
    assert_eq!(
        event.line(),
        r#"{"event":"error","shard":3,"code":"busy","status":503}"#
    );
}

#[test]
fn the_pass_summary_is_logged_at_most_once_a_minute() {
    let summary = PassSummary::default();
    let mut stats = PassStats::default();
    assert_eq!(summary.due(0.0, 1, &stats), None, "no pass yet");
    stats.by_vectors[0] = 3;
    stats.by_vectors[MAX_BATCH - 1] = 1;
    stats.requests = 6;
    let first: Value = serde_json::from_str(&summary.due(10.0, 1, &stats).unwrap()).unwrap();
    assert_eq!(
        first,
        json!({ "event": "passes", "shard": 1, "passes": 4, "vectors": 11, "requests": 6,
                "by_vectors": [3, 0, 0, 0, 0, 0, 0, 1] })
    );
    assert_eq!(summary.due(10.0 + PASS_SUMMARY_MS - 1.0, 1, &stats), None);
    assert!(summary.due(10.0 + PASS_SUMMARY_MS, 1, &stats).is_some());
}

#[test]
fn a_data_point_has_the_documented_layout() {
    let point = MetricPoint::of(Some(5), 200, "wait", "int8", "top_k").with_sizes(6, 2, 40.0);
    assert_eq!(point.index, "shard-5");
    let unknown = MetricPoint::of(None, 500, "-", "-", "config");
    assert_eq!(
        unknown.index, "shard-unknown",
        "an error before SHARD_INDEX is read"
    );
    assert_eq!(
        point.blobs,
        ["200", "wait", "int8", "top_k"].map(String::from)
    );
    assert_eq!(point.doubles, [6.0, 2.0, 40.0]);
}
