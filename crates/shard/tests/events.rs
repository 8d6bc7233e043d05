//! The operator's log lines and metrics (`cobordism_shard::events`): a line per slice load with
//! its outcome and per failed manifest check (whoever made it), each line's shape, the pass
//! summary's cadence, the data points of an answer and of an error, and nothing written for a
//! request without access.

mod common;

use std::future::Ready;

use cobordism_protocol::{ErrorCode, Form, Precision, Query, MAX_BATCH};
use cobordism_shard::events::{written, PASS_SUMMARY_MS};
use cobordism_shard::{
    BodyPool, Coalescer, Event, Framing, Isolate, MetricPoint, PassStats, PassSummary, Served,
    Shard, ShardError,
};
use common::*;
use futures_util::stream;
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

/// The check is the shard's, so a warm-up's (`Shard::warm` runs the same `ensure`) logs as a
/// request's does.
#[test]
fn a_failed_manifest_check_logs_that_the_resident_slice_answers() {
    let (cfg, m) = (settings(2), model(82, 2));
    let (store, shard) = loaded(&m, &cfg);
    store.fault(|f| f.etag_fails = true);
    store.advance(cfg.manifest_ttl_ms);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    let got = lines(&store);
    assert_eq!(got.len(), 2, "{got:?}: the load, then the check");
    let why = got[1]["why"].as_str().unwrap();
    assert!(why.starts_with("checking model/manifest.json"), "{why}");
    assert_eq!(
        got[1],
        json!({ "event": "check_failed", "shard": 0, "version": m.manifest.version, "why": why })
    );
    store.advance(500.0);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    assert_eq!(
        lines(&store).len(),
        2,
        "no check before the backoff: no line"
    );
}

#[test]
fn an_error_line_names_the_code_the_status_and_what_is_for_the_operator() {
    let busy = ShardError::new(ErrorCode::Busy, "retry");
    assert_eq!(
        Event::error(Some(3), &busy).unwrap().line(),
        r#"{"event":"error","shard":3,"code":"busy","status":503,"internal":null}"#
    );
    let config = ShardError::config("SHARD_INDEX = \"x\"");
    assert_eq!(
        Event::error(None, &config).unwrap().line(),
        concat!(
            r#"{"event":"error","shard":null,"code":"misconfigured","status":503,"#,
            r#""internal":"SHARD_INDEX = \"x\""}"#
        )
    );
}

#[test]
fn a_request_without_access_writes_no_line_and_no_point() {
    let silent = [
        ErrorCode::Unauthorized,
        ErrorCode::AuthNotConfigured,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
    ];
    for &code in ErrorCode::ALL {
        let e = ShardError::new(code, "…");
        let (line, point) = (Event::error(Some(0), &e), MetricPoint::error(Some(0), &e));
        assert_eq!(written(code), !silent.contains(&code), "{code}");
        assert_eq!(line.is_some(), written(code), "{code}: the line");
        assert_eq!(point.is_some(), written(code), "{code}: the point");
    }
}

#[test]
fn the_lines_of_warm_ups_alarms_metrics_and_resets() {
    let e = ShardError::out_of_memory("the int8 kernels");
    let warm: Value = serde_json::from_str(&Event::warm_up_failed(2, &e).line()).unwrap();
    assert_eq!(
        warm,
        json!({ "event": "warm_up_failed", "shard": 2, "code": "out_of_memory",
                "internal": "could not reserve the int8 kernels" })
    );
    let alarm = Event::KeepWarmFailed {
        shard: Some(1),
        why: "alarm not set: storage reset",
    };
    assert_eq!(
        alarm.line(),
        r#"{"event":"keep_warm_failed","shard":1,"why":"alarm not set: storage reset"}"#
    );
    let metrics = Event::MetricsFailed {
        index: "shard-1",
        why: "too many blobs",
    };
    assert_eq!(
        metrics.line(),
        r#"{"event":"metrics_failed","index":"shard-1","why":"too many blobs"}"#
    );
    assert_eq!(Event::InstanceReset.line(), r#"{"event":"instance_reset"}"#);
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

/// Two vectors served over a shard `store` holds, asking for `query`.
fn served(store: &Store, shard: &Shard, query: &Query) -> Served {
    let (passes, bodies, cfg) = (Coalescer::new(), BodyPool::default(), settings(2));
    let isolate = Isolate {
        shard,
        passes: &passes,
        bodies: &bodies,
    };
    let body = vec![0u8; 2 * 4 * HIDDEN];
    let length = body.len().to_string();
    let framing = Framing {
        content_length: Some(&length),
        transfer_encoding: None,
    };
    let resident = || shard.ensure(&cfg, store);
    let chunks = Some(stream::iter([Ok(body)]));
    let no_turns: Option<fn() -> Ready<()>> = None;
    let serving = isolate.lm_head(&cfg, query, framing, resident, chunks, no_turns, || 0.0);
    block_on(serving).unwrap()
}

#[test]
fn an_answer_writes_the_documented_point() {
    let (cfg, m) = (settings(2), model(83, 2));
    let (store, shard) = (Store::default(), Shard::new());
    store.upload(&m);
    let top_k = Query {
        form: Form::TopK {
            k: 3,
            temperature: 1.0,
        },
        precision: Precision::Int8,
        adjust: None,
    };
    let point = served(&store, &shard, &top_k).metric_point(&cfg, &top_k);
    assert_eq!(point.index, "shard-0");
    assert_eq!(
        point.blobs,
        ["200", "miss", "int8", "top_k"].map(String::from)
    );
    assert_eq!(
        point.doubles,
        [2.0, 2.0, 0.0],
        "pass vectors, batch, load ms"
    );
    let logits = Query {
        form: Form::Logits,
        precision: Precision::Exact,
        adjust: None,
    };
    let point = served(&store, &shard, &logits).metric_point(&cfg, &logits);
    assert_eq!(point.blobs[..3], ["200", "hit", "exact"].map(String::from));
}

#[test]
fn an_error_writes_the_documented_point() {
    let e = ShardError::new(ErrorCode::BadLength, "…");
    let point = MetricPoint::error(Some(5), &e).unwrap();
    assert_eq!(point.index, "shard-5");
    assert_eq!(
        point.blobs,
        ["400", "-", "-", "bad_length"].map(String::from)
    );
    assert_eq!(point.doubles, [0.0; 3]);
    let config = ShardError::config("SHARD_INDEX = \"x\"");
    assert_eq!(
        MetricPoint::error(None, &config).unwrap().index,
        "shard-unknown",
        "an error before SHARD_INDEX is read as a number"
    );
}
