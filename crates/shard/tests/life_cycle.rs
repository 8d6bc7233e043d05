//! The resident slice's life cycle driven through every transition natively, with an object
//! store that fails, stalls, truncates and changes objects on demand and a clock the test moves.

mod common;

use std::pin::pin;

use cobordism_protocol::health::State;
use cobordism_protocol::{MemoryNeed, Precision};
use cobordism_shard::ranges::RANGE_ATTEMPTS;
use cobordism_shard::{Host, Settings, Shard};

use common::*;

#[test]
fn cold_load_then_hits_with_the_models_bits() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(1, 2));
    assert_eq!(shard.health(0.0).state, State::Empty);
    store.upload(&a);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    assert_eq!(answer(&shard), Some(a.manifest.version.clone()));
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
    let health = shard.health(store.now_ms());
    assert_eq!((health.state, health.last_error), (State::Ready, None));
}

#[test]
fn missing_corrupt_truncated_and_unreadable_slices_are_refused_and_retried() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(2, 2));
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!((e.code.name(), e.retry_after()), ("manifest_missing", None));
    assert!(
        e.detail.contains("\"model/manifest.json\""),
        "names the key it looked for: {}",
        e.detail
    );
    store.upload(&a);
    // The failure is remembered until LOAD_RETRY_MS passes.
    assert_eq!(
        code(block_on(shard.ensure(&cfg, &store))),
        "manifest_missing"
    );
    let health = shard.health(store.now_ms());
    assert_eq!(health.state, State::Failed);
    assert!(
        health
            .last_error
            .is_some_and(|e| e.contains("manifest_missing") && e.contains("model/manifest.json")),
        "/healthz says why it failed"
    );
    let key = format!("model/{}", a.manifest.shards[0].key);
    let mut bad = a.slices[0].clone();
    bad[100] ^= 1;
    store.put(&key, bad);
    store.advance(2000.0);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!(
        (
            e.code.name(),
            e.detail.contains("checksum"),
            e.retry_after()
        ),
        ("slice_corrupt", true, None),
        "the same bytes fail the same way: not worth a retry"
    );
    assert!(
        e.internal.unwrap().contains(&key),
        "the key goes to the log"
    );
    assert!(!e.detail.contains(&key), "not to the caller");
    store.put(&key, a.slices[0][..a.slices[0].len() - 1].to_vec());
    store.advance(2000.0);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "slice_corrupt");
    store.put(&key, a.slices[0].clone());
    // Every read cut after one chunk: the range is resumed twice, then the load gives up.
    store.on_range(|_, _, _| RangeFault::Truncate(CHUNK));
    store.range_reads.borrow_mut().clear();
    store.advance(2000.0);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!(
        (e.code.name(), e.retry_after().is_some()),
        ("storage_unavailable", true),
        "a stream cut short is worth a retry"
    );
    assert_eq!(
        store.range_reads.borrow().len(),
        3,
        "{RANGE_ATTEMPTS} reads"
    );
    store.range_hook.take();
    store.fault(|f| {
        *f = Faults {
            get_fails: true,
            ..Faults::default()
        }
    });
    store.advance(2000.0);
    assert_eq!(
        code(block_on(shard.ensure(&cfg, &store))),
        "storage_unavailable"
    );
    store.objects.borrow_mut().remove(&key);
    store.fault(|f| *f = Faults::default());
    store.advance(2000.0);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "slice_missing");
    assert_eq!(shard.with_resident(|_| ()), None, "nothing is kept");
    store.put(&key, a.slices[0].clone());
    store.advance(2000.0);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
}

#[test]
fn a_failed_manifest_check_keeps_serving_and_backs_off() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(3, 2));
    store.upload(&a);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    store.fault(|f| f.etag_fails = true);
    store.advance(5000.0);
    let r = block_on(shard.ensure(&cfg, &store)).unwrap();
    assert!(r.hit && r.check_error.unwrap().contains("internal error"));
    let calls = store.etag_calls.get();
    // Backoff: 1 s, then 2 s, 4 s … no check before it is due; every request is served.
    for (wait, checks) in [
        (999.0, 0),
        (1.0, 1),
        (1999.0, 0),
        (1.0, 1),
        (3999.0, 0),
        (1.0, 1),
    ] {
        store.advance(wait);
        let before = store.etag_calls.get();
        assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
        assert_eq!(store.etag_calls.get() - before, checks, "after {wait} ms");
    }
    assert!(store.etag_calls.get() > calls);
    let health = shard.health(store.now_ms());
    assert!(health.last_error.is_some());
    assert!(health.checked_ms_ago.unwrap() >= 12000.0);
    // A manifest that disappears is a failed check too, not a reason to drop the slice.
    store.fault(|f| *f = Faults::default());
    store.objects.borrow_mut().remove("model/manifest.json");
    store.advance(60_000.0);
    let r = block_on(shard.ensure(&cfg, &store)).unwrap();
    assert!(r.check_error.unwrap().contains("gone"));
    store.put("model/manifest.json", a.manifest.to_json().into_bytes());
    store.advance(60_000.0);
    // A new etag with the same version (a re-upload): checked, no reload.
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    let health = shard.health(store.now_ms());
    assert_eq!(
        (health.last_error, health.checked_ms_ago),
        (None, Some(0.0))
    );
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
}

#[test]
fn a_new_version_loads_beside_the_old_one_when_both_fit() {
    let (cfg, a, b) = (settings(2), model(4, 2), model(5, 2));
    let (store, shard) = loaded(&a, &cfg);
    store.upload(&b);
    store.advance(5000.0);
    store.fault(|f| f.stall_at = Some(3 * CHUNK));
    let mut loader = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(loader.as_mut()).is_pending());
    let health = shard.health(store.now_ms());
    assert_eq!((health.state, health.loading_next), (State::Ready, true));
    // Meanwhile every request is answered by version A, whole (within LOAD_STALL_MS: after it,
    // the next request would take the stalled load over).
    for _ in 0..3 {
        store.advance(4000.0);
        assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
        assert_eq!(answer(&shard), Some(a.manifest.version.clone()));
        assert_eq!(resident_logits(&shard), logits_of(&a, 0));
    }
    store.gate.set(true);
    assert_eq!(code(block_on(loader)), "miss");
    assert_eq!(answer(&shard), Some(b.manifest.version.clone()));
    assert_eq!(resident_logits(&shard), logits_of(&b, 0));
    assert!(!shard.health(store.now_ms()).loading_next);
}

#[test]
fn a_new_version_replaces_the_old_one_first_when_both_do_not_fit() {
    let (store, shard, a, b) = (Store::default(), Shard::new(), model(6, 2), model(7, 2));
    let need = MemoryNeed::of_shard(&a.manifest, &a.manifest.shards[0]);
    let cfg = Settings {
        budget_bytes: need.least_budget() + need.least_budget() / 2,
        ..settings(2)
    };
    store.upload(&a);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    store.upload(&b);
    store.advance(5000.0);
    store.fault(|f| f.stall_at = Some(3 * CHUNK));
    let mut loader = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(loader.as_mut()).is_pending());
    assert_eq!(shard.health(store.now_ms()).state, State::Loading);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!((e.code.name(), e.retry_after()), ("slice_loading", Some(1)));
    assert_eq!(answer(&shard), None, "no request mixes versions");
    store.gate.set(true);
    assert_eq!(code(block_on(loader)), "miss");
    assert_eq!(resident_logits(&shard), logits_of(&b, 0));
}

#[test]
fn a_new_version_that_fails_to_load_leaves_the_old_one_serving() {
    let (cfg, a, b) = (settings(2), model(8, 2), model(9, 2));
    let (store, shard) = loaded(&a, &cfg);
    // B's manifest arrives before its slices (a broken upload): A keeps answering.
    store.put("model/manifest.json", b.manifest.to_json().into_bytes());
    store.advance(5000.0);
    let r = block_on(shard.ensure(&cfg, &store)).unwrap();
    assert!(r.hit && r.check_error.unwrap().contains("new version"));
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
    store.upload(&b);
    store.advance(1000.0);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(resident_logits(&shard), logits_of(&b, 0));
}

#[test]
fn a_stalled_loader_is_taken_over_and_finds_itself_superseded() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(10, 2));
    store.upload(&a);
    store.fault(|f| f.stall_at = Some(2 * CHUNK));
    let mut first = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(first.as_mut()).is_pending());
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!(e.code.name(), "slice_loading");
    assert!(e.detail.contains("% done"));
    store.advance(15000.0);
    store.fault(|f| f.stall_at = None);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    store.gate.set(true);
    assert_eq!(code(block_on(first)), "slice_loading");
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
}

#[test]
fn a_slice_over_the_budget_is_refused_before_it_is_read() {
    let (store, shard, a) = (Store::default(), Shard::new(), model(11, 2));
    let need = MemoryNeed::of_shard(&a.manifest, &a.manifest.shards[0]);
    let cfg = Settings {
        budget_bytes: need.least_budget() - 1,
        ..settings(2)
    };
    store.upload(&a);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!((e.code.name(), e.retry_after()), ("over_budget", None));
    let cfg = Settings {
        shard_count: 3,
        ..settings(2)
    };
    store.advance(2000.0);
    assert_eq!(
        code(block_on(Shard::new().ensure(&cfg, &store))),
        "misconfigured"
    );
}

#[test]
fn priming_the_kernels_leaves_the_answers_as_they_were() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(2), model(12, 2));
    store.upload(&m);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    for precision in [Precision::Exact, Precision::Int8] {
        assert_eq!(shard.with_resident(|r| r.prime(precision)), Some(Ok(())));
    }
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}

#[test]
fn a_forgotten_slice_is_loaded_again_as_by_a_new_isolate() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(2), model(13, 2));
    store.upload(&m);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    shard.forget();
    assert_eq!(shard.health(store.now_ms()).state, State::Empty);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
    // A load under way when the slice is forgotten keeps nothing.
    shard.forget();
    store.fault(|f| f.stall_at = Some(CHUNK));
    let mut load = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(load.as_mut()).is_pending());
    shard.forget();
    store.gate.set(true);
    assert_eq!(code(block_on(load)), "slice_loading", "superseded");
    assert_eq!(shard.health(store.now_ms()).state, State::Empty);
}
