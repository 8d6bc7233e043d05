//! The resident slice: loaded once per isolate from R2, kept for all later requests.
//!
//! ```text
//!            first request            all bytes in, checksum ok
//!   Empty ───────────────▶ Loading ──────────────────────────▶ Ready ──┐
//!     ▲                      │ │ missing / corrupt / over budget   ▲     │ manifest version
//!     │    retry time over   │ └───────────────▶ Failed            │     │ changed (checked
//!     └──────────────────────┼───────────────────── ┘              │     │ every TTL)
//!                            └ stalled: the next request takes over ┘     ▼ dropped, reloaded
//! ```
//!
//! * The slice is streamed chunk by chunk into one buffer reserved at its final size, so the
//!   isolate's peak is one copy of the slice plus one chunk, never two copies.
//! * The buffer lives in the state, not in the loading request: requests arriving meanwhile get
//!   503 + `Retry-After` instead of awaiting the loader's promise (Workers cancel that), and a
//!   stalled loader (its client gone) is taken over by the next request, reusing the buffer.
//! * Nothing is kept unless the whole object arrived and its checksum matches the manifest.
//! * A panic or an out-of-memory trap resets the wasm instance, and with it this state: the
//!   next request starts from `Empty` and reloads.

use std::cell::RefCell;

use cobordism_protocol::{Checksum, Manifest, MemoryNeed, Precision, ShardEntry, MAX_BATCH};
use futures_util::StreamExt;
use kquant::{Backend, QMatrix};
use worker::{Bucket, Env};

use crate::config::{Config, BUCKET_BINDING};
use crate::error::ApiError;

/// A slice in memory, ready to answer.
pub struct Resident {
    /// The manifest it was loaded from.
    pub manifest: Manifest,
    /// This shard's entry in it.
    pub entry: ShardEntry,
    /// The wasm memory it needs, by part.
    pub need: MemoryNeed,
    /// R2 etag of the manifest object, to notice a new upload.
    etag: String,
    /// When the manifest was last compared with R2.
    checked_ms: f64,
    /// The raw blocks.
    slice: Vec<u8>,
    /// Prepared activations for the kernels, room for a full batch.
    scratch: Vec<f32>,
    /// How long the load took.
    pub load_ms: f64,
}

enum State {
    Empty,
    Loading {
        generation: u64,
        buf: Vec<u8>,
        expected: u64,
        last_progress_ms: f64,
    },
    Ready(Box<Resident>),
    Failed {
        error: ApiError,
        until_ms: f64,
    },
}

thread_local! {
    static STATE: RefCell<State> = const { RefCell::new(State::Empty) };
    static GENERATION: RefCell<u64> = const { RefCell::new(0) };
}

/// How a request found the slice.
pub struct Residency {
    /// `true` when it was already resident.
    pub hit: bool,
    /// Milliseconds this request spent loading.
    pub load_ms: f64,
}

fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Bytes of wasm linear memory in use by the instance.
pub fn wasm_memory_bytes() -> u64 {
    core::arch::wasm32::memory_size(0) as u64 * 65536
}

/// `len` zeros, or `503 out_of_memory` if wasm memory cannot grow that far (an infallible
/// allocation would abort the instance instead).
pub fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>, ApiError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        ApiError::unavailable(
            "out_of_memory",
            "the shard could not reserve the memory it needs; retry shortly",
            30,
        )
        .logging(format!("{len} elements for {what}"))
    })?;
    v.resize(len, T::default());
    Ok(v)
}

/// Makes sure the slice is resident, loading it when needed.
pub async fn ensure(cfg: &Config, env: &Env) -> Result<Residency, ApiError> {
    let bucket = env
        .bucket(BUCKET_BINDING)
        .map_err(|_| ApiError::config(format!("the R2 binding {BUCKET_BINDING} is missing")))?;
    let now = now_ms();
    const HIT: Residency = Residency {
        hit: true,
        load_ms: 0.0,
    };
    enum Next {
        Hit,
        /// Resident, but the manifest is due for a look: is its etag still this one?
        Recheck {
            etag: String,
        },
        Wait(ApiError),
        Load,
    }
    let next = STATE.with_borrow(|s| match s {
        State::Ready(r) if now - r.checked_ms < cfg.manifest_ttl_ms => Next::Hit,
        State::Ready(r) => Next::Recheck {
            etag: r.etag.clone(),
        },
        State::Loading {
            buf,
            expected,
            last_progress_ms,
            ..
        } if now - last_progress_ms < cfg.load_stall_ms => Next::Wait(ApiError::unavailable(
            "slice_loading",
            format!(
                "the slice is being loaded ({:.0}% done); retry shortly",
                100.0 * buf.len() as f64 / (*expected).max(1) as f64
            ),
            1,
        )),
        State::Failed { error, until_ms } if now < *until_ms => Next::Wait(error.clone()),
        _ => Next::Load,
    });
    match next {
        Next::Wait(e) => Err(e),
        Next::Hit => Ok(HIT),
        Next::Recheck { etag } => {
            let current = bucket.head(cfg.manifest_key()).await?.map(|o| o.etag());
            if current.as_deref() == Some(etag.as_str()) {
                STATE.with_borrow_mut(|s| {
                    if let State::Ready(r) = s {
                        r.checked_ms = now;
                    }
                });
                return Ok(HIT);
            }
            // A new manifest (or none): drop the old slice, unless another request already did.
            let still_old = STATE.with_borrow(|s| matches!(s, State::Ready(r) if r.etag == etag));
            if !still_old {
                return Err(ApiError::unavailable(
                    "slice_loading",
                    "a new manifest version is being loaded; retry shortly",
                    1,
                ));
            }
            load(cfg, &bucket).await
        }
        Next::Load => load(cfg, &bucket).await,
    }
}

/// Loads the slice; this request becomes the loader.
async fn load(cfg: &Config, bucket: &Bucket) -> Result<Residency, ApiError> {
    let started = now_ms();
    let generation = GENERATION.with_borrow_mut(|g| {
        *g += 1;
        *g
    });
    // Take over the state (dropping an old slice or reusing a stalled loader's buffer).
    let buf = STATE.with_borrow_mut(|s| {
        let old = std::mem::replace(s, State::Empty);
        let mut buf = match old {
            State::Loading { buf, .. } => buf,
            _ => Vec::new(),
        };
        buf.clear();
        *s = State::Loading {
            generation,
            buf: Vec::new(),
            expected: 0,
            last_progress_ms: started,
        };
        buf
    });
    match fetch(cfg, bucket, generation, buf).await {
        Ok(resident) => {
            let load_ms = resident.load_ms;
            let installed = STATE.with_borrow_mut(|s| match s {
                State::Loading { generation: g, .. } if *g == generation => {
                    *s = State::Ready(resident);
                    true
                }
                _ => false,
            });
            if !installed {
                return Err(superseded());
            }
            worker::console_log!("slice resident after {load_ms:.0} ms");
            Ok(Residency {
                hit: false,
                load_ms,
            })
        }
        Err(error) => {
            STATE.with_borrow_mut(|s| {
                if matches!(s, State::Loading { generation: g, .. } if *g == generation) {
                    *s = State::Failed {
                        error: error.clone(),
                        until_ms: now_ms() + cfg.load_retry_ms,
                    };
                }
            });
            Err(error)
        }
    }
}

fn superseded() -> ApiError {
    ApiError::unavailable(
        "slice_loading",
        "another request took over loading the slice; retry shortly",
        1,
    )
}

/// Reads the manifest and streams this shard's slice into `buf`.
async fn fetch(
    cfg: &Config,
    bucket: &Bucket,
    generation: u64,
    mut buf: Vec<u8>,
) -> Result<Box<Resident>, ApiError> {
    let started = now_ms();
    let manifest_key = cfg.manifest_key();
    let object = bucket.get(&manifest_key).execute().await?.ok_or_else(|| {
        ApiError::unavailable(
            "manifest_missing",
            "the model's manifest is not in the bucket (yet); retry later",
            5,
        )
        .logging(format!("no object {manifest_key}"))
    })?;
    let etag = object.etag();
    let json = match object.body() {
        Some(body) => body.bytes().await?,
        None => Vec::new(),
    };
    let manifest = Manifest::parse(&json).map_err(|e| {
        ApiError::unavailable(
            "manifest_invalid",
            "the model's manifest is invalid; its operator finds why in the Worker's log",
            5,
        )
        .logging(format!("{manifest_key}: {e}"))
    })?;
    if manifest.shard_count != cfg.shard_count {
        return Err(ApiError::config(format!(
            "the manifest has {} shards, this worker is configured for SHARD_COUNT {}",
            manifest.shard_count, cfg.shard_count
        )));
    }
    let entry = manifest.shards[cfg.shard_index].clone();
    let need = MemoryNeed::of_shard(&manifest, &entry);
    if !need.fits(cfg.budget_bytes) {
        return Err(ApiError::unavailable(
            "over_budget",
            format!(
                "this shard's slice needs {:.1} MiB of wasm memory with its buffers, more than \
                 MEMORY_BUDGET_MIB allows; cut the model into more shards (cobordism plan)",
                need.least_budget() as f64 / 1048576.0,
            ),
            60,
        )
        .logging(format!(
            "{}: needs {} bytes, budget {} bytes",
            entry.key,
            need.least_budget(),
            cfg.budget_bytes
        )));
    }
    let key = cfg.object_key(&entry.key);
    let object = bucket.get(&key).execute().await?.ok_or_else(|| {
        ApiError::unavailable(
            "slice_missing",
            "this shard's slice is not in the bucket (yet); retry later",
            5,
        )
        .logging(format!("no object {key}"))
    })?;
    if object.size() != entry.bytes {
        return Err(corrupt(
            &key,
            "size",
            format!("{} bytes, manifest says {}", object.size(), entry.bytes),
        ));
    }
    let expected = entry.bytes;
    let size = usize::try_from(expected).map_err(|_| corrupt(&key, "size", "too large".into()))?;
    buf.try_reserve_exact(size).map_err(|_| {
        ApiError::unavailable(
            "out_of_memory",
            "the shard could not reserve the memory for its slice; retry later",
            30,
        )
        .logging(format!("{size} bytes for {key}"))
    })?;
    let scratch = zeroed(
        MAX_BATCH * manifest.quant_type().scratch_len(manifest.hidden),
        "the kernels' scratch",
    )?;
    // Hand the reserved buffer to the state, so that it is never held by a request alone.
    STATE.with_borrow_mut(|s| {
        if let State::Loading {
            generation: g,
            buf: b,
            expected: e,
            ..
        } = s
        {
            if *g == generation {
                *b = std::mem::take(&mut buf);
                *e = expected;
            }
        }
    });
    let mut checksum = Checksum::new();
    let mut stream = object
        .body()
        .ok_or_else(|| corrupt(&key, "size", "no body".into()))?
        .stream()?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        checksum.update(&chunk);
        let accepted = STATE.with_borrow_mut(|s| match s {
            State::Loading {
                generation: g,
                buf,
                last_progress_ms,
                ..
            } if *g == generation => {
                if buf.len() + chunk.len() > size {
                    return Some(false);
                }
                buf.extend_from_slice(&chunk);
                *last_progress_ms = now_ms();
                Some(true)
            }
            _ => None,
        });
        match accepted {
            None => return Err(superseded()),
            Some(false) => return Err(corrupt(&key, "size", "longer than its size".into())),
            Some(true) => {}
        }
    }
    let slice = STATE.with_borrow_mut(|s| match s {
        State::Loading {
            generation: g, buf, ..
        } if *g == generation => Some(std::mem::take(buf)),
        _ => None,
    });
    let slice = slice.ok_or_else(superseded)?;
    if slice.len() != size {
        return Err(corrupt(
            &key,
            "size",
            format!("stream ended after {} of {size} bytes", slice.len()),
        ));
    }
    let sum = checksum.finish();
    if sum != entry.checksum {
        return Err(corrupt(
            &key,
            "checksum",
            format!("checksum {sum}, manifest says {}", entry.checksum),
        ));
    }
    Ok(Box::new(Resident {
        manifest,
        entry,
        need,
        etag,
        checked_ms: now_ms(),
        slice,
        scratch,
        load_ms: now_ms() - started,
    }))
}

/// `503 slice_corrupt`: the object does not match the manifest in `aspect` (size or checksum).
fn corrupt(key: &str, aspect: &str, what: String) -> ApiError {
    ApiError::unavailable(
        "slice_corrupt",
        format!("this shard's slice does not match its manifest ({aspect}); retry later"),
        5,
    )
    .logging(format!("{key}: {what}"))
}

/// Runs `f` on the resident slice, if there is one.
pub fn with_resident<T>(f: impl FnOnce(&mut Resident) -> T) -> Option<T> {
    STATE.with_borrow_mut(|s| match s {
        State::Ready(r) => Some(f(r)),
        _ => None,
    })
}

/// What `/healthz` reports about the state.
pub fn state_name() -> &'static str {
    STATE.with_borrow(|s| match s {
        State::Empty => "empty",
        State::Loading { .. } => "loading",
        State::Ready(_) => "ready",
        State::Failed { .. } => "failed",
    })
}

impl Resident {
    /// `n` hidden vectors (concatenated) → `n · row_count` logits, soft-capped as the manifest says.
    pub fn logits(
        &mut self,
        hidden: &[f32],
        n: usize,
        precision: Precision,
    ) -> Result<Vec<f32>, ApiError> {
        let rows = self.entry.row_count;
        let m = QMatrix::new(
            self.manifest.quant_type(),
            &self.slice,
            rows,
            self.manifest.hidden,
        )
        .map_err(|e| internal(format!("slice does not match its shape: {e}")))?;
        let mut out = zeroed(n * rows, "the logits")?;
        // The exact mode's scratch is the larger of the two, and is what `fetch` reserved.
        match precision {
            Precision::Exact => {
                let scratch = &mut self.scratch[..n * m.scratch_len()];
                m.mat_mat_with(Backend::best(), hidden, &mut out, scratch)
            }
            Precision::Int8 => {
                let scratch = &mut self.scratch[..n * m.int8_scratch_len()];
                m.mat_mat_int8_with(Backend::best(), hidden, &mut out, scratch)
            }
        }
        .map_err(|e| internal(e.to_string()))?;
        cobordism_protocol::softcap(&mut out, self.manifest.softcap);
        Ok(out)
    }
}

/// `500 internal`: a bug, described in the log.
fn internal(what: String) -> ApiError {
    ApiError::new(
        500,
        "internal",
        "the shard failed; this is a bug worth reporting",
    )
    .logging(what)
}
