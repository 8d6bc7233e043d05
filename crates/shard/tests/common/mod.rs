//! The harness the shard's integration tests share: synthetic models, an object store that
//! fails, stalls, truncates and changes objects on demand with a clock the test moves, and a
//! single-threaded executor that polls requests by hand.
#![allow(dead_code)] // each test binary uses its own subset

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use cobordism_protocol::{
    slice_key, Checksum, Manifest, Precision, ShardEntry, FORMAT, FORMAT_VERSION,
};
use cobordism_shard::{Host, ObjectBody, Settings, Shard, ShardError, StoreError, StoredObject};
use kquant::synth::{random_blocks, SplitMix64};
use kquant::{QMatrix, QuantType};

pub const HIDDEN: usize = 256;
pub const VOCAB: usize = 96;
pub const CHUNK: usize = 1000;

/// A model: its manifest and each shard's slice bytes.
pub struct Model {
    pub manifest: Manifest,
    pub slices: Vec<Vec<u8>>,
}

pub fn model(seed: u64, shards: usize) -> Model {
    model_of(seed, shards, VOCAB)
}

/// A model of `vocab` rows (`model` has [`VOCAB`]: one range per slice).
pub fn model_of(seed: u64, shards: usize, vocab: usize) -> Model {
    let ty = QuantType::Q6K;
    let mut rng = SplitMix64::new(seed);
    let rows = vocab / shards;
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
        dtype: kquant::QuantType::Q6K,
        hidden: HIDDEN,
        vocab,
        shard_count: shards,
        softcap: None,
        source_dtype: None,
        layout: kquant::Layout::Ggml,
        shards: entries,
    }
    .with_content_version();
    manifest.validate().unwrap();
    Model { manifest, slices }
}

/// How the store misbehaves.
#[derive(Clone, Copy, Default)]
pub struct Faults {
    pub etag_fails: bool,
    pub get_fails: bool,
    /// Bodies end early after this many bytes (the size still says the full length).
    pub truncate_at: Option<usize>,
    /// Bodies stop yielding after this many bytes until `gate` opens.
    pub stall_at: Option<usize>,
}

/// What the store does to one ranged read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum RangeFault {
    #[default]
    None,
    /// The read fails.
    Fail,
    /// The body ends after this many bytes.
    Truncate(usize),
    /// The body is pending for this many polls before its first chunk.
    Delay(u32),
    /// The object is written again (same bytes, new etag) just before this read.
    Rewrite,
}

/// Decides each ranged read's fault from its start, its length and the reads before it.
pub type RangeHook = Box<dyn FnMut(u64, u64, usize) -> RangeFault>;

#[derive(Default)]
pub struct Store {
    pub objects: RefCell<HashMap<String, (String, Vec<u8>)>>,
    pub writes: Cell<u64>,
    pub clock: Cell<f64>,
    pub faults: Cell<Faults>,
    pub gate: Rc<Cell<bool>>,
    pub etag_calls: Cell<u32>,
    pub range_hook: RefCell<Option<RangeHook>>,
    /// Every ranged read asked for: (start, length).
    pub range_reads: RefCell<Vec<(u64, u64)>>,
    /// The start of each ranged read whose body reached its end, in the order they did.
    pub ranges_done: Rc<RefCell<Vec<u64>>>,
    /// The lines the shard logged.
    pub logged: RefCell<Vec<String>>,
}

impl Store {
    pub fn put(&self, key: &str, bytes: Vec<u8>) {
        self.writes.set(self.writes.get() + 1);
        let etag = format!("etag-{}", self.writes.get());
        self.objects.borrow_mut().insert(key.into(), (etag, bytes));
    }

    pub fn upload(&self, m: &Model) {
        for (entry, bytes) in m.manifest.shards.iter().zip(&m.slices) {
            self.put(&format!("model/{}", entry.key), bytes.clone());
        }
        self.put("model/manifest.json", m.manifest.to_json().into_bytes());
    }

    pub fn fault(&self, f: impl FnOnce(&mut Faults)) {
        let mut faults = self.faults.get();
        f(&mut faults);
        self.faults.set(faults);
    }

    pub fn advance(&self, ms: f64) {
        self.clock.set(self.clock.get() + ms);
    }

    pub fn on_range(&self, hook: impl FnMut(u64, u64, usize) -> RangeFault + 'static) {
        *self.range_hook.borrow_mut() = Some(Box::new(hook));
    }

    fn body(&self, data: Vec<u8>) -> Body {
        Body {
            data,
            at: 0,
            faults: self.faults.get(),
            gate: self.gate.clone(),
            delay: 0,
            done: None,
        }
    }
}

pub struct Body {
    pub data: Vec<u8>,
    pub at: usize,
    pub faults: Faults,
    pub gate: Rc<Cell<bool>>,
    /// Polls left before the first chunk.
    pub delay: u32,
    /// Where to note this range's start when the body reaches its end.
    pub done: Option<(u64, Rc<RefCell<Vec<u64>>>)>,
}

impl ObjectBody for Body {
    type Chunk = Vec<u8>;

    async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, StoreError> {
        while self.delay > 0 {
            self.delay -= 1;
            let mut yielded = false;
            std::future::poll_fn(|cx| {
                if yielded {
                    Poll::Ready(())
                } else {
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
        }
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
            if let Some((start, log)) = self.done.take().filter(|_| end == self.data.len()) {
                log.borrow_mut().push(start);
            }
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

    async fn get(&self, key: &str) -> Result<Option<StoredObject<Body>>, StoreError> {
        if self.faults.get().get_fails {
            return Err(StoreError("get: internal error".into()));
        }
        Ok(self
            .objects
            .borrow()
            .get(key)
            .map(|(etag, data)| StoredObject {
                etag: etag.clone(),
                size: data.len() as u64,
                body: self.body(data.clone()),
            }))
    }

    async fn get_range(
        &self,
        key: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<StoredObject<Body>>, StoreError> {
        if self.faults.get().get_fails {
            return Err(StoreError("get: internal error".into()));
        }
        let before = self.range_reads.borrow().len();
        self.range_reads.borrow_mut().push((start, len));
        let fault = match &mut *self.range_hook.borrow_mut() {
            Some(hook) => hook(start, len, before),
            None => RangeFault::None,
        };
        if fault == RangeFault::Rewrite {
            let data = self.objects.borrow().get(key).map(|(_, d)| d.clone());
            if let Some(data) = data {
                self.put(key, data);
            }
        }
        if fault == RangeFault::Fail {
            return Err(StoreError("get: injected range failure".into()));
        }
        let objects = self.objects.borrow();
        let Some((etag, data)) = objects.get(key) else {
            return Ok(None);
        };
        // As HTTP ranges: one past the end is refused, one reaching past it is cut at the end.
        let Some(bytes) = data.get(start as usize..) else {
            return Err(StoreError("get: range not satisfiable".into()));
        };
        let mut body = self.body(bytes[..bytes.len().min(len as usize)].to_vec());
        body.done = Some((start, self.ranges_done.clone()));
        match fault {
            RangeFault::Truncate(n) => body.faults.truncate_at = Some(n),
            RangeFault::Delay(polls) => body.delay = polls,
            _ => {}
        }
        Ok(Some(StoredObject {
            etag: etag.clone(),
            size: data.len() as u64,
            body,
        }))
    }

    fn now_ms(&self) -> f64 {
        self.clock.get()
    }

    fn log(&self, line: &str) {
        self.logged.borrow_mut().push(line.to_string());
    }
}

pub fn settings(shards: usize) -> Settings {
    Settings {
        shard_index: 0,
        shard_count: shards,
        prefix: "model".into(),
        budget_bytes: 100 << 20,
        manifest_ttl_ms: 5000.0,
        load_retry_ms: 2000.0,
        load_stall_ms: 15000.0,
        load_streams: 4,
        coalesce: true,
        residency: cobordism_shard::ResidencyMode::Isolate,
        replicas: 1,
        keep_warm_ms: 0.0,
    }
}

/// A store holding `m` and a shard that has loaded it.
pub fn loaded(m: &Model, cfg: &Settings) -> (Store, Shard) {
    let (store, shard) = (Store::default(), Shard::new());
    store.upload(m);
    assert_eq!(code(block_on(shard.ensure(cfg, &store))), "miss");
    (store, shard)
}

/// The version the resident slice answers with.
pub fn answer(shard: &Shard) -> Option<String> {
    shard.with_resident(|r| r.manifest.version.clone())
}

/// kquant's logits of shard `shard` of `m` for the fixed x, as bits.
pub fn logits_of(m: &Model, shard: usize) -> Vec<u32> {
    let x: Vec<f32> = (0..HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    let rows = m.manifest.shards[shard].row_count;
    let q = QMatrix::new(QuantType::Q6K, &m.slices[shard], rows, HIDDEN).unwrap();
    let mut out = vec![0.0; rows];
    q.mat_vec(&x, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

pub fn resident_logits(shard: &Shard) -> Vec<u32> {
    let x: Vec<f32> = (0..HIDDEN).map(|i| (i as f32 * 0.37).sin()).collect();
    shard
        .with_resident(|r| r.logits(&x, 1, Precision::Exact).unwrap())
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

pub fn code(r: Result<cobordism_shard::Residency, ShardError>) -> &'static str {
    match r {
        Ok(r) if r.hit => "hit",
        Ok(_) => "miss",
        Err(e) => e.code.name(),
    }
}

/// Polls `f` once (a request that got as far as its first pending await).
pub fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// Runs a request to its end. The store answers at once unless a stall holds it, so a request
/// still pending after many polls hangs: that fails the test instead of hanging it.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    for _ in 0..10_000 {
        if let Poll::Ready(v) = poll_once(f.as_mut()) {
            return v;
        }
    }
    panic!("the request never completes")
}
