//! `wait_resident`: a request that finds another request loading the slice waits for that load
//! on its own timer (here the fake store's clock), takes over a loader that stalled, and gives up
//! with `503 slice_loading` only after `LOAD_POLLS` asks.

mod common;

use std::cell::Cell;
use std::future::ready;
use std::pin::pin;

use cobordism_shard::{wait_resident, Host, Settings, Shard, LOAD_POLLS, LOAD_POLL_MS};
use common::*;

/// Runs `wait_resident` over `shard` and `store`, each sleep moving the store's clock; the
/// outcome and the number of sleeps.
fn wait(shard: &Shard, cfg: &Settings, store: &Store) -> (&'static str, u32) {
    let sleeps = Cell::new(0);
    let sleep = |ms: f64| {
        sleeps.set(sleeps.get() + 1);
        store.advance(ms);
        ready(())
    };
    let r = block_on(wait_resident(|| shard.ensure(cfg, store), sleep));
    (code(r), sleeps.get())
}

/// A store holding model `seed` whose reads stall after two chunks, an empty shard, and settings
/// that take over a load after `load_stall_ms` without progress.
fn stalling(seed: u64, load_stall_ms: f64) -> (Store, Shard, Settings, Model) {
    let (store, m) = (Store::default(), model(seed, 2));
    store.upload(&m);
    store.fault(|f| f.stall_at = Some(2 * CHUNK));
    let cfg = Settings {
        load_stall_ms,
        ..settings(2)
    };
    (store, Shard::new(), cfg, m)
}

#[test]
fn a_request_that_finds_the_slice_loading_waits_for_that_load() {
    let (store, shard, cfg, a) = stalling(21, 200.0);
    let mut first = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(first.as_mut()).is_pending());
    store.fault(|f| f.stall_at = None);
    // The first loader never resumes (its client went away): after LOAD_STALL_MS of waiting the
    // waiting request takes the load over and answers with the model's bits.
    let (outcome, sleeps) = wait(&shard, &cfg, &store);
    assert_eq!(outcome, "miss");
    let stall_polls = (cfg.load_stall_ms / LOAD_POLL_MS) as u32;
    assert!(
        (stall_polls..=stall_polls + 1).contains(&sleeps),
        "{sleeps} sleeps"
    );
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
}

#[test]
fn a_request_gives_up_with_slice_loading_after_its_polls() {
    let (store, shard, cfg, _) = stalling(22, 1e9);
    let mut first = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(first.as_mut()).is_pending());
    let start = store.now_ms();
    assert_eq!(wait(&shard, &cfg, &store), ("slice_loading", LOAD_POLLS));
    assert_eq!(store.now_ms() - start, 10_000.0, "ten seconds of waiting");
}

#[test]
fn any_other_answer_is_given_at_once() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(23, 2));
    assert_eq!(wait(&shard, &cfg, &store), ("manifest_missing", 0));
    store.upload(&a);
    store.advance(cfg.load_retry_ms);
    assert_eq!(wait(&shard, &cfg, &store), ("miss", 0));
    assert_eq!(wait(&shard, &cfg, &store), ("hit", 0));
}

#[test]
fn a_request_that_waited_for_another_load_says_so() {
    let (store, shard, cfg, a) = stalling(24, 1e9);
    let first = std::cell::RefCell::new(Box::pin(shard.ensure(&cfg, &store)));
    assert!(poll_once(first.borrow_mut().as_mut()).is_pending());
    // While the waiting request sleeps, the first one's load goes on to its end.
    let sleep = |_| {
        store.gate.set(true);
        assert_eq!(code(block_on(first.borrow_mut().as_mut())), "miss");
        ready(())
    };
    let waited = block_on(wait_resident(|| shard.ensure(&cfg, &store), sleep)).unwrap();
    assert!(waited.hit, "the slice was loaded by the other request");
    assert_eq!(waited.waited_ms, LOAD_POLL_MS, "one poll");
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
}
