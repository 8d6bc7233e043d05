//! The slice read as concurrent ranges (`cobordism_shard::ranges`), over a store that delays,
//! fails, truncates and rewrites single ranged reads: whatever happens to the reads, the shard
//! keeps either every byte of one version of the object, checked, or nothing.

mod common;

use std::pin::pin;

use cobordism_protocol::health::State;
use cobordism_shard::ranges::{split, RANGE_ATTEMPTS};
use cobordism_shard::{Host, Settings, Shard};

use common::*;

/// One shard of 2048 rows (430 080 bytes): four ranges at `load_streams` 4.
fn big() -> Model {
    model_of(21, 1, 2048)
}

fn starts(m: &Model) -> Vec<u64> {
    split(m.manifest.shards[0].bytes, 4)
        .iter()
        .map(|r| r.start)
        .collect()
}

/// A hook that gives every read starting at `at` the fault `fault`.
fn at_start(at: u64, fault: RangeFault) -> impl FnMut(u64, u64, usize) -> RangeFault {
    move |start, _, _| if start == at { fault } else { RangeFault::None }
}

/// The load fails retryably, `why` in its log line, keeps nothing; once the store heals, the
/// next load gives the model's bits.
fn fails_then_recovers(store: &Store, shard: &Shard, cfg: &Settings, m: &Model, why: &str) {
    let e = block_on(shard.ensure(cfg, store)).unwrap_err();
    assert_eq!(
        (e.code.name(), e.retry_after().is_some()),
        ("storage_unavailable", true)
    );
    let internal = e.internal.unwrap();
    assert!(internal.contains(why), "{internal}");
    assert_eq!(shard.with_resident(|_| ()), None, "nothing is kept");
    assert_eq!(shard.health(store.now_ms()).state, State::Failed);
    store.range_hook.take();
    store.advance(cfg.load_retry_ms);
    assert_eq!(code(block_on(shard.ensure(cfg, store))), "miss");
    assert_eq!(resident_logits(shard), logits_of(m, 0));
}

#[test]
fn ranges_arriving_out_of_order_give_the_models_bits() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    store.on_range(at_start(0, RangeFault::Delay(50)));
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    let s = starts(&m);
    assert_eq!(s.len(), 4);
    assert_eq!(*store.ranges_done.borrow(), vec![s[1], s[2], s[3], 0]);
    assert_eq!(store.range_reads.borrow().len(), 4, "one read per range");
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}

#[test]
fn one_stream_reads_the_slice_in_one_range() {
    let (store, shard, m) = (Store::default(), Shard::new(), big());
    let cfg = Settings {
        load_streams: 1,
        ..settings(1)
    };
    store.upload(&m);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    let bytes = m.manifest.shards[0].bytes;
    assert_eq!(*store.range_reads.borrow(), vec![(0, bytes)]);
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}

#[test]
fn a_failed_range_is_read_again_alone() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    let s = starts(&m);
    let (second, mut failed) = (s[1], false);
    store.on_range(move |start, _, _| {
        if start == second && !failed {
            failed = true;
            RangeFault::Fail
        } else {
            RangeFault::None
        }
    });
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    let reads = store.range_reads.borrow();
    assert_eq!(
        reads.len(),
        5,
        "the four ranges and the failed one again: {reads:?}"
    );
    assert_eq!(reads.iter().filter(|r| r.0 == second).count(), 2);
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}

#[test]
fn a_truncated_range_resumes_at_its_first_missing_byte() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    let s = starts(&m);
    let (third, len) = (s[2], s[3] - s[2]);
    store.on_range(at_start(third, RangeFault::Truncate(3 * CHUNK)));
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    let reads = store.range_reads.borrow();
    assert_eq!(reads.len(), 5, "{reads:?}");
    let cut = 3 * CHUNK as u64;
    assert!(reads.contains(&(third + cut, len - cut)), "{reads:?}");
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}

#[test]
fn a_range_that_keeps_failing_fails_the_load_and_keeps_nothing() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    let last = *starts(&m).last().unwrap();
    store.on_range(at_start(last, RangeFault::Fail));
    let why = format!("failed {RANGE_ATTEMPTS} times");
    fails_then_recovers(&store, &shard, &cfg, &m, &why);
    let reads = store.range_reads.borrow();
    let at_last = reads.iter().filter(|r| r.0 == last).count();
    assert_eq!(
        at_last,
        RANGE_ATTEMPTS as usize + 1,
        "and once in the load that succeeded"
    );
}

#[test]
fn an_object_written_between_two_reads_is_never_kept() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    // The slice is written again (same bytes, new etag) before the third range is read.
    store.on_range(|_, _, before| {
        if before == 2 {
            RangeFault::Rewrite
        } else {
            RangeFault::None
        }
    });
    fails_then_recovers(&store, &shard, &cfg, &m, "written while it was read");
}

#[test]
fn a_requester_gone_mid_load_leaves_no_partial_slice() {
    let (store, shard, cfg, m) = (Store::default(), Shard::new(), settings(1), big());
    store.upload(&m);
    store.on_range(at_start(0, RangeFault::Delay(1000)));
    {
        let mut gone = pin!(shard.ensure(&cfg, &store));
        for _ in 0..10 {
            assert!(poll_once(gone.as_mut()).is_pending());
        }
        assert_eq!(
            store.ranges_done.borrow().len(),
            3,
            "three of four ranges in"
        );
    } // the request is dropped here, its reads with it
    assert_eq!(shard.with_resident(|_| ()), None);
    assert_eq!(shard.health(store.now_ms()).state, State::Loading);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!(e.code.name(), "slice_loading");
    assert!(e.detail.contains("75% done"), "{}", e.detail);
    store.range_hook.take();
    store.advance(cfg.load_stall_ms);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
}
