//! `/healthz` and the warm-up's answers as the Worker serializes them: their JSON fields, from
//! an empty, a loading and a loaded shard.

mod common;

use std::pin::pin;

use cobordism_protocol::health::State;
use cobordism_shard::{BodyPool, Coalescer, Host, Isolate, Runtime, Shard};
use common::*;
use serde_json::{json, Value};

fn health(shard: &Shard, passes: &Coalescer, bodies: &BodyPool, now_ms: f64) -> Value {
    let isolate = Isolate {
        shard,
        passes,
        bodies,
    };
    let runtime = Runtime {
        wasm_memory_bytes: 1 << 20,
        backend: "scalar",
        build_version: "9.9.9",
        module_sha256: Some("0f".repeat(32)),
        object: Some("shard-0/1".into()),
        age_ms: 1234.0,
    };
    let report = isolate.health_report(&settings(2), now_ms, runtime, None);
    serde_json::to_value(report).unwrap()
}

#[test]
fn an_empty_shard_reports_its_settings_and_nothing_resident() {
    let (shard, passes, bodies) = (Shard::new(), Coalescer::new(), BodyPool::default());
    assert_eq!(
        health(&shard, &passes, &bodies, 0.0),
        json!({
            "shard_index": 0,
            "shard_count": 2,
            "model_prefix": "model",
            "state": "empty",
            "resident": false,
            "loading_next": false,
            "checked_ms_ago": null,
            "last_check_error": null,
            "slice": null,
            "wasm_memory_bytes": 1 << 20,
            "bodies_in_flight": 0,
            "passes": {
                "count": 0,
                "vectors": 0,
                "requests": 0,
                "by_vectors": [0, 0, 0, 0, 0, 0, 0, 0],
                "compute_ms": 0,
                "waiting": 0,
            },
            "budget_bytes": 100 << 20,
            "backend": "scalar",
            "build_version": "9.9.9",
            "module_sha256": "0f".repeat(32),
            "protocol_version": 1,
            "residency": "isolate",
            "object": "shard-0/1",
            "loads": 0,
            "age_ms": 1234,
            "replicas": 1,
            "manifest": null,
        })
    );
    let public = serde_json::to_value(shard.public_health_report(0.0)).unwrap();
    assert_eq!(public, json!({ "state": "empty" }));
}

#[test]
fn a_loaded_shard_reports_its_slice() {
    let (cfg, m) = (settings(2), model(31, 2));
    let (store, shard) = loaded(&m, &cfg);
    let (passes, bodies) = (Coalescer::new(), BodyPool::default());
    store.advance(1500.0);
    let report = health(&shard, &passes, &bodies, 1500.0);
    let entry = &m.manifest.shards[0];
    assert_eq!(report["state"], "ready");
    assert_eq!(report["resident"], true);
    assert_eq!(report["checked_ms_ago"], 1500, "whole milliseconds");
    assert_eq!(report["loads"], 1);
    let slice = &report["slice"];
    assert_eq!(slice["row_start"], entry.row_start);
    assert_eq!(slice["row_count"], entry.row_count);
    assert_eq!(slice["bytes"], entry.bytes);
    assert_eq!(slice["checksum"], entry.checksum.as_str());
    assert_eq!(slice["manifest_version"], m.manifest.version.as_str());
    assert_eq!(slice["dtype"], "q6_k");
    assert_eq!(slice["layout"], "ggml");
    assert_eq!(slice["hidden"], HIDDEN);
    assert_eq!(slice["vocab"], VOCAB);
    let fields: Vec<&str> = slice
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields.len(), 13, "{fields:?}");
}

#[test]
fn the_warm_up_answers_202_while_loading_and_200_when_resident() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(2), model(32, 2));
    let warm = |shard: &Shard| shard.warm_report(&cfg, 0.0);
    assert_eq!(warm(&shard).status(), 202);
    store.upload(&m);
    store.fault(|f| f.stall_at = Some(CHUNK));
    let mut load = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(load.as_mut()).is_pending());
    let loading = warm(&shard);
    assert_eq!((loading.state, loading.status()), (State::Loading, 202));
    store.gate.set(true);
    assert_eq!(code(block_on(load)), "miss");
    let ready = serde_json::to_value(warm(&shard)).unwrap();
    assert_eq!(
        ready,
        json!({ "shard_index": 0, "shard_count": 2, "state": "ready", "loading_next": false })
    );
    assert_eq!(warm(&shard).status(), 200);
}

/// The manifest `/healthz` finds for an empty shard: the error a load would meet, or the
/// version; read once a `MANIFEST_TTL_MS`; none once a load begins.
#[test]
fn an_empty_shard_looks_at_its_manifest_once_a_ttl() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(2), model(33, 2));
    let look = || block_on(shard.look_at_manifest(&cfg, &store)).expect("nothing resident");
    let missing = look();
    assert_eq!(missing.version, None);
    let why = missing.error.expect("no manifest");
    assert!(why.contains("manifest_missing"), "{why}");
    store.upload(&m);
    store.advance(cfg.manifest_ttl_ms / 2.0);
    let cached = look();
    assert!(cached.error.is_some(), "read once a TTL: {cached:?}");
    assert_eq!(cached.age_ms, cfg.manifest_ttl_ms / 2.0);
    store.advance(cfg.manifest_ttl_ms / 2.0);
    let found = look();
    assert_eq!(
        (found.version.as_deref(), found.error, found.age_ms),
        (Some(m.manifest.version.as_str()), None, 0.0)
    );
    assert_eq!(
        shard.health(store.now_ms()).state,
        State::Empty,
        "nothing loaded"
    );
    // A manifest for another number of shards is what a load would refuse too.
    let four = settings(4);
    store.advance(cfg.manifest_ttl_ms);
    let wrong = block_on(shard.look_at_manifest(&four, &store)).unwrap();
    assert!(wrong.error.unwrap().contains("SHARD_COUNT 4"));
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(block_on(shard.look_at_manifest(&cfg, &store)), None);
}
