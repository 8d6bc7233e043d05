//! The warm-up (`Shard::warm`) and loads kept alive past their request (`ensure_kept_alive`),
//! over the fake store: what the Worker's `POST …/warm` and `ctx.waitUntil` do, run natively.

mod common;

use std::cell::RefCell;
use std::pin::pin;
use std::rc::Rc;

use cobordism_protocol::health::{State, WarmReport};
use cobordism_protocol::Query;
use cobordism_shard::{ensure_kept_alive, Ensure, Settings, Shard, ShardError};
use common::*;
use futures_util::future::LocalBoxFuture;
use futures_util::FutureExt;

type Kept<'a> = RefCell<Option<LocalBoxFuture<'a, Result<(), ShardError>>>>;

/// A store holding `m` whose reads wait for storage (one turn each), as R2's do.
fn slow_store(m: &Model) -> Store {
    let store = Store::default();
    store.upload(m);
    store.on_range(|_, _, _| RangeFault::Delay(1));
    store
}

fn query(pairs: &[(&str, &str)]) -> Query {
    Query::parse(pairs.iter().copied()).unwrap()
}

fn ensure<'a>(shard: &Rc<Shard>, cfg: &'a Settings, store: &'a Store) -> Ensure<'a> {
    let shard = Rc::clone(shard);
    async move { shard.ensure(cfg, store).await }.boxed_local()
}

/// `POST …/warm` with `query`: its answer, the work it left for `waitUntil` in `kept`.
fn warm<'a>(
    shard: &Rc<Shard>,
    cfg: &'a Settings,
    store: &'a Store,
    query: &Query,
    kept: &Kept<'a>,
) -> Result<WarmReport, ShardError> {
    let keep_alive = |work| assert!(kept.borrow_mut().replace(work).is_none());
    let warming = Rc::clone(shard).warm(cfg, query, ensure(shard, cfg, store), keep_alive, || 0.0);
    block_on(warming)
}

#[test]
fn the_warm_up_answers_202_and_its_load_goes_on_after_the_answer() {
    let (shard, cfg, m) = (Rc::new(Shard::new()), settings(2), model(41, 2));
    let store = slow_store(&m);
    let kept = Kept::default();
    let report = warm(
        &shard,
        &cfg,
        &store,
        &query(&[("precision", "int8")]),
        &kept,
    )
    .unwrap();
    assert_eq!((report.state, report.status()), (State::Loading, 202));
    let load = kept
        .borrow_mut()
        .take()
        .expect("the load was handed to waitUntil");
    block_on(load).unwrap(); // loads, then primes the int8 kernels
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
    let report = warm(&shard, &cfg, &store, &query(&[]), &kept).unwrap();
    assert_eq!((report.state, report.status()), (State::Ready, 200));
    assert!(kept.borrow().is_none(), "nothing left to do once resident");
}

#[test]
fn the_warm_up_takes_only_a_precision() {
    let (store, shard, cfg) = (Store::default(), Rc::new(Shard::new()), settings(2));
    let kept = Kept::default();
    let e = warm(&shard, &cfg, &store, &query(&[("top_k", "4")]), &kept).unwrap_err();
    assert_eq!(e.code.name(), "bad_query");
    assert_eq!(shard.health(0.0).state, State::Empty, "nothing was loaded");
}

#[test]
fn a_load_found_under_way_is_not_an_error() {
    let (store, shard, cfg, m) = (
        Store::default(),
        Rc::new(Shard::new()),
        settings(2),
        model(42, 2),
    );
    store.upload(&m);
    store.fault(|f| f.stall_at = Some(CHUNK));
    let mut first = pin!(shard.ensure(&cfg, &store));
    assert!(poll_once(first.as_mut()).is_pending());
    let kept = Kept::default();
    let report = warm(&shard, &cfg, &store, &query(&[]), &kept).unwrap();
    assert_eq!((report.state, report.status()), (State::Loading, 202));
    assert!(
        kept.borrow().is_none(),
        "the load under way is not begun twice"
    );
}

#[test]
fn a_load_that_cannot_succeed_is_the_warm_ups_answer_or_its_log_line() {
    let (store, shard, cfg) = (Store::default(), Rc::new(Shard::new()), settings(2));
    let kept = Kept::default();
    let answer = warm(&shard, &cfg, &store, &query(&[]), &kept);
    let e = match (answer, kept.borrow_mut().take()) {
        (Err(e), None) => e,
        (Ok(report), Some(load)) => {
            assert_eq!(report.status(), 202);
            block_on(load).unwrap_err()
        }
        (answer, load) => panic!("{answer:?} with work left: {}", load.is_some()),
    };
    assert_eq!(e.code.name(), "manifest_missing");
}

#[test]
fn a_load_kept_alive_finishes_after_its_request_is_dropped() {
    let (shard, cfg, m) = (Rc::new(Shard::new()), settings(2), model(43, 2));
    let store = slow_store(&m);
    store.fault(|f| f.stall_at = Some(CHUNK)); // until the gate opens
    let kept = RefCell::new(None);
    {
        let keep_alive = |work| *kept.borrow_mut() = Some(work);
        let mut request = pin!(ensure_kept_alive(ensure(&shard, &cfg, &store), keep_alive));
        assert!(poll_once(request.as_mut()).is_pending());
    } // the client went away: the request is never polled again
    store.gate.set(true);
    block_on(kept.borrow_mut().take().expect("handed to waitUntil"));
    assert_eq!(resident_logits(&shard), logits_of(&m, 0));
    let again = ensure_kept_alive(ensure(&shard, &cfg, &store), |_| panic!("resident: no I/O"));
    assert_eq!(code(block_on(again)), "hit");
}
