//! The resident slice's life cycle driven through every transition natively, with an object
//! store that fails, stalls, truncates and changes objects on demand and a clock the test moves.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use cobordism_protocol::{
    slice_key, Checksum, Manifest, MemoryNeed, Precision, ShardEntry, FORMAT, FORMAT_VERSION,
};
use cobordism_shard::{Host, Object, ObjectBody, Settings, Shard, ShardError, StoreError};
use kquant::synth::{random_blocks, SplitMix64};
use kquant::{QMatrix, QuantType};

const HIDDEN: usize = 256;
const VOCAB: usize = 96;
const CHUNK: usize = 1000;

/// A model: its manifest and each shard's slice bytes.
struct Model {
    manifest: Manifest,
    slices: Vec<Vec<u8>>,
}

fn model(seed: u64, shards: usize) -> Model {
    let ty = QuantType::Q6K;
    let mut rng = SplitMix64::new(seed);
    let rows = VOCAB / shards;
    let mut slices = Vec::new();
    let mut entries = Vec::new();
    for index in 0..shards {
        let mut bytes = vec![0u8; rows * ty.row_bytes(HIDDEN).unwrap()];
        random_blocks(&mut rng, ty, &mut bytes).unwrap();
        let checksum = Checksum::of(&bytes);
        entries.push(ShardEntry {
            index,
            row_start: index * rows,
            row_count: rows,
            key: slice_key(index, &checksum),
            bytes: bytes.len() as u64,
            checksum,
        });
        slices.push(bytes);
    }
    let manifest = Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        version: String::new(),
        model: "test".into(),
        tensor: "output.weight".into(),
        dtype: "q6_k".into(),
        hidden: HIDDEN,
        vocab: VOCAB,
        shard_count: shards,
        softcap: None,
        source_dtype: None,
        layout: None,
        shards: entries,
    }
    .with_content_version();
    manifest.validate().unwrap();
    Model { manifest, slices }
}

/// How the store misbehaves.
#[derive(Clone, Copy, Default)]
struct Faults {
    etag_fails: bool,
    get_fails: bool,
    /// Bodies end early after this many bytes (the size still says the full length).
    truncate_at: Option<usize>,
    /// Bodies stop yielding after this many bytes until `gate` opens.
    stall_at: Option<usize>,
}

#[derive(Default)]
struct Store {
    objects: RefCell<HashMap<String, (String, Vec<u8>)>>,
    writes: Cell<u64>,
    clock: Cell<f64>,
    faults: Cell<Faults>,
    gate: Rc<Cell<bool>>,
    etag_calls: Cell<u32>,
}

impl Store {
    fn put(&self, key: &str, bytes: Vec<u8>) {
        self.writes.set(self.writes.get() + 1);
        let etag = format!("etag-{}", self.writes.get());
        self.objects.borrow_mut().insert(key.into(), (etag, bytes));
    }

    fn upload(&self, m: &Model) {
        for (entry, bytes) in m.manifest.shards.iter().zip(&m.slices) {
            self.put(&format!("model/{}", entry.key), bytes.clone());
        }
        self.put("model/manifest.json", m.manifest.to_json().into_bytes());
    }

    fn fault(&self, f: impl FnOnce(&mut Faults)) {
        let mut faults = self.faults.get();
        f(&mut faults);
        self.faults.set(faults);
    }

    fn advance(&self, ms: f64) {
        self.clock.set(self.clock.get() + ms);
    }
}

struct Body {
    data: Vec<u8>,
    at: usize,
    faults: Faults,
    gate: Rc<Cell<bool>>,
}

impl ObjectBody for Body {
    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        if self.faults.stall_at.is_some_and(|n| self.at >= n) {
            let gate = self.gate.clone();
            std::future::poll_fn(|_| {
                if gate.get() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
        let end = self
            .faults
            .truncate_at
            .unwrap_or(usize::MAX)
            .min(self.data.len());
        if self.at >= end {
            return Ok(None);
        }
        let next = (self.at + CHUNK).min(end);
        let chunk = self.data[self.at..next].to_vec();
        self.at = next;
        Ok(Some(chunk))
    }
}

impl Host for Store {
    type Body = Body;

    async fn etag(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.etag_calls.set(self.etag_calls.get() + 1);
        if self.faults.get().etag_fails {
            return Err(StoreError("head: internal error".into()));
        }
        Ok(self.objects.borrow().get(key).map(|(e, _)| e.clone()))
    }

    async fn get(&self, key: &str) -> Result<Option<Object<Body>>, StoreError> {
        if self.faults.get().get_fails {
            return Err(StoreError("get: internal error".into()));
        }
        Ok(self.objects.borrow().get(key).map(|(etag, data)| Object {
            etag: etag.clone(),
            size: data.len() as u64,
            body: Body {
                data: data.clone(),
                at: 0,
                faults: self.faults.get(),
                gate: self.gate.clone(),
            },
        }))
    }

    fn now_ms(&self) -> f64 {
        self.clock.get()
    }
}

fn settings(shards: usize) -> Settings {
    Settings {
        shard_index: 0,
        shard_count: shards,
        prefix: "model".into(),
        budget_bytes: 100 << 20,
        manifest_ttl_ms: 5000.0,
        load_retry_ms: 2000.0,
        load_stall_ms: 15000.0,
    }
}

/// A store holding `m` and a shard that has loaded it.
fn loaded(m: &Model, cfg: &Settings) -> (Store, Shard) {
    let (store, shard) = (Store::default(), Shard::new());
    store.upload(m);
    assert_eq!(code(block_on(shard.ensure(cfg, &store))), "miss");
    (store, shard)
}

/// The version the resident slice answers with.
fn answer(shard: &Shard) -> Option<String> {
    shard.with_resident(|r| r.manifest.version.clone())
}

/// kquant's logits of shard `shard` of `m` for the fixed x, as bits.
fn logits_of(m: &Model, shard: usize) -> Vec<u32> {
    let x: Vec<f32> = (0..HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    let rows = m.manifest.shards[shard].row_count;
    let q = QMatrix::new(QuantType::Q6K, &m.slices[shard], rows, HIDDEN).unwrap();
    let mut out = vec![0.0; rows];
    q.mat_vec(&x, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

fn resident_logits(shard: &Shard) -> Vec<u32> {
    let x: Vec<f32> = (0..HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    shard
        .with_resident(|r| r.logits(&x, 1, Precision::Exact).unwrap())
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn code(r: Result<cobordism_shard::Residency, ShardError>) -> &'static str {
    match r {
        Ok(r) if r.hit => "hit",
        Ok(_) => "miss",
        Err(e) => e.code,
    }
}

/// Polls `f` once (a request that got as far as its first pending await).
fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// Runs a request to its end. The store answers at once unless a stall holds it, so a request
/// still pending after many polls hangs: that fails the test instead of hanging it.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    for _ in 0..10_000 {
        if let Poll::Ready(v) = poll_once(f.as_mut()) {
            return v;
        }
    }
    panic!("the request never completes")
}

#[test]
fn cold_load_then_hits_with_the_models_bits() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(1, 2));
    assert_eq!(shard.health(0.0).state, "empty");
    store.upload(&a);
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "miss");
    assert_eq!(code(block_on(shard.ensure(&cfg, &store))), "hit");
    assert_eq!(answer(&shard), Some(a.manifest.version.clone()));
    assert_eq!(resident_logits(&shard), logits_of(&a, 0));
    let health = shard.health(store.now_ms());
    assert_eq!((health.state, health.last_check_error), ("ready", None));
}

#[test]
fn missing_corrupt_truncated_and_unreadable_slices_are_refused_and_retried() {
    let (store, shard, cfg, a) = (Store::default(), Shard::new(), settings(2), model(2, 2));
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!((e.code, e.retry_after), ("manifest_missing", None));
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
    assert_eq!(health.state, "failed");
    assert!(
        health
            .last_check_error
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
        (e.code, e.detail.contains("checksum"), e.retry_after),
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
    store.fault(|f| f.truncate_at = Some(5 * CHUNK));
    store.advance(2000.0);
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!(
        (e.code, e.retry_after.is_some()),
        ("storage_unavailable", true),
        "a stream cut short is worth a retry"
    );
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
    assert!(health.last_check_error.is_some());
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
        (health.last_check_error, health.checked_ms_ago),
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
    assert_eq!((health.state, health.loading_next), ("ready", true));
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
    assert_eq!(shard.health(store.now_ms()).state, "loading");
    let e = block_on(shard.ensure(&cfg, &store)).unwrap_err();
    assert_eq!((e.code, e.retry_after), ("slice_loading", Some(1)));
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
    assert_eq!(e.code, "slice_loading");
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
    assert_eq!((e.code, e.retry_after), ("over_budget", None));
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
