//! The resident slice: loaded once per isolate from the object store, kept for all later
//! requests, replaced only by a version that loaded completely.
//!
//! ```text
//!          first request              all bytes in, checksum ok
//!   Empty ──────────────▶ Loading ─────────────────────────────▶ Ready ◀─────────────┐
//!     ▲                    │  │ missing / corrupt / over budget    │ every TTL:      │ same
//!     │   retry time over  │  └──────────────▶ Failed              ▼ manifest check  │ version
//!     └────────────────────┼─────────────────────┘               Recheck ────────────┤
//!                          │                                        │ check failed:  │
//!      stalled: the next   │                                        │ keep serving,  │
//!      request takes over ─┘                                        │ retry w/ backoff
//!                                                                   ▼ new version    │
//!                        budget holds both: load beside, serve the old meanwhile ────┘
//!                        it does not: drop the old, load (slice_loading meanwhile)
//! ```
//!
//! * The slice is read as several concurrent ranges ([`crate::ranges`], `LOAD_STREAMS`), each
//!   chunk written at its offset in one buffer reserved at the final size (fallibly: a failed
//!   reservation is `503 out_of_memory`, not an abort), so the peak is one copy of the slice
//!   plus a chunk per stream. Nothing is kept unless every byte arrived from one version of the
//!   object and the whole object's checksum matches the manifest.
//! * The buffer lives in the state, not in the loading request: [`Shard::ensure`] answers a
//!   request arriving meanwhile `503 slice_loading` at once instead of making it await the
//!   loader (Workers cancel a request that awaits another request's promise); the request then
//!   waits on its own timer and asks again ([`crate::wait_resident`]). A stalled loader (its
//!   client gone, its future never resumed) is taken over by the next ask, which reuses the
//!   buffer.
//! * Stale-while-revalidate: a resident slice keeps answering while its manifest is checked; a
//!   failed check (store error, manifest gone or invalid, new version failing to load) keeps
//!   it, retries after 1, 2, 4 … 60 s, and shows in [`Shard::health`]. Only a *successful* check
//!   naming a new version replaces the slice.
//! * Every answer names the manifest version it comes from: versions never mix.

use core::cell::RefCell;

use cobordism_protocol::{
    answer, Checksum, ErrorCode, Manifest, MemoryNeed, Precision, ShardEntry, MAX_BATCH,
    MAX_MANIFEST_BYTES,
};
use kquant::QMatrix;

use crate::error::{reserve, zeroed, ShardError};
use crate::ranges::{read_ranges, ReadFailure};
use crate::settings::Settings;
use crate::store::{Chunk, Host, Object, ObjectBody};

/// Longest wait between two manifest checks after failures.
const MAX_BACKOFF_MS: f64 = 60_000.0;

/// A slice in memory, ready to answer.
pub struct Resident {
    /// The manifest it was loaded from.
    pub manifest: Manifest,
    /// This shard's entry in it.
    pub entry: ShardEntry,
    /// The wasm memory it needs, by part.
    pub need: MemoryNeed,
    /// How long the load took (host clock: the I/O of loading).
    pub load_ms: f64,
    /// Etag of the manifest object it was loaded from (or last found unchanged).
    etag: String,
    slice: Vec<u8>,
    /// Prepared activations for the kernels, room for a full batch.
    scratch: Vec<f32>,
}

struct Loading {
    generation: u64,
    /// The slice's buffer: reserved at the slice's size, zeroed to it when the first bytes arrive.
    buf: Vec<u8>,
    expected: u64,
    received: u64,
    last_progress_ms: f64,
}

/// The manifest checks of the resident slice.
#[derive(Default)]
struct Check {
    due_ms: f64,
    ok_ms: f64,
    failures: u32,
    last_error: Option<String>,
    running_since: Option<f64>,
}

#[derive(Default)]
struct State {
    ready: Option<Box<Resident>>,
    check: Check,
    loading: Option<Loading>,
    failed: Option<(ShardError, f64)>,
    generation: u64,
}

/// One shard's slice and its life cycle. Single-threaded: requests interleave at `await`s.
#[derive(Default)]
pub struct Shard {
    state: RefCell<State>,
}

/// How a request found the slice.
#[derive(Clone, Debug, PartialEq)]
pub struct Residency {
    /// `true` when it was already resident.
    pub hit: bool,
    /// Milliseconds (host clock) this request spent loading.
    pub load_ms: f64,
    /// A manifest check this request made failed; the resident slice answered anyway.
    pub check_error: Option<String>,
}

impl Residency {
    fn hit() -> Residency {
        Residency {
            hit: true,
            load_ms: 0.0,
            check_error: None,
        }
    }
}

/// What `/healthz` reports about the life cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// `empty`, `loading`, `ready` or `failed`.
    pub state: &'static str,
    /// A new version is loading beside the resident one.
    pub loading_next: bool,
    /// Since the last successful manifest check (resident only).
    pub checked_ms_ago: Option<f64>,
    /// Why the last manifest check failed, while checks fail; with no slice resident, why the
    /// last load failed (state `failed`).
    pub last_check_error: Option<String>,
}

enum Next {
    Hit,
    Recheck { etag: String, version: String },
    Wait(ShardError),
    Load,
}

/// What a manifest check found.
enum Found {
    Same {
        etag: String,
    },
    New {
        etag: String,
        manifest: Box<Manifest>,
    },
}

fn loading_error(l: &Loading) -> ShardError {
    ShardError::new(
        ErrorCode::SliceLoading,
        format!(
            "the slice is being loaded ({:.0}% done); retry shortly",
            100.0 * l.received as f64 / l.expected.max(1) as f64
        ),
    )
}

/// `503 slice_loading`: the slice a request was checked against was replaced (or dropped)
/// before its answer was computed.
pub fn replaced() -> ShardError {
    ShardError::new(ErrorCode::SliceLoading, "the slice was replaced; retry")
}

fn superseded() -> ShardError {
    ShardError::new(
        ErrorCode::SliceLoading,
        "another request took over loading the slice; retry shortly",
    )
}

/// `503 slice_corrupt`: the object does not match the manifest in `aspect` (no retry: the
/// same bytes give the same mismatch until the model is uploaded again).
fn corrupt(key: &str, aspect: &str, what: impl core::fmt::Display) -> ShardError {
    ShardError::new(
        ErrorCode::SliceCorrupt,
        format!(
            "this shard's slice does not match its manifest ({aspect}); upload the model again \
             (cobordism upload)"
        ),
    )
    .with_internal(format_args!("{key}: {what}"))
}

fn store_failed(what: impl core::fmt::Display) -> ShardError {
    ShardError::new(
        ErrorCode::StorageUnavailable,
        "the shard could not read its model from storage; retry shortly",
    )
    .with_internal(what)
}

/// The wait before check number `failures + 1` after `failures` failed ones.
fn backoff_ms(failures: u32) -> f64 {
    (1000.0 * 2f64.powi(failures.saturating_sub(1).min(16) as i32)).min(MAX_BACKOFF_MS)
}

/// Reads the whole of `body`, refusing more than `cap` bytes.
async fn read_all(body: &mut impl ObjectBody, cap: u64) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next_chunk().await.map_err(|e| e.to_string())? {
        let at = out.len();
        if (at + chunk.len()) as u64 > cap {
            return Err(format!("longer than {cap} bytes"));
        }
        out.resize(at + chunk.len(), 0);
        chunk.copy_to(&mut out[at..]);
    }
    Ok(out)
}

/// The object `key`; `503 storage_unavailable` if the store fails (worth a retry), and
/// `missing` (built from the key) if there is no such object (not worth one: the bucket has to
/// change first).
async fn get_object<H: Host>(
    host: &H,
    key: &str,
    missing: impl FnOnce(&str) -> ShardError,
) -> Result<Object<H::Body>, ShardError> {
    host.get(key)
        .await
        .map_err(|e| store_failed(format_args!("reading {key}: {e}")))?
        .ok_or_else(|| missing(key))
}

/// Reads and validates the manifest: its etag and content.
async fn read_manifest<H: Host>(
    cfg: &Settings,
    host: &H,
) -> Result<(String, Manifest), ShardError> {
    let key = cfg.manifest_key();
    let missing = |key: &str| {
        ShardError::new(
            ErrorCode::ManifestMissing,
            format!(
                "no model manifest at {key:?} in the shard's bucket: upload the model under the \
                 prefix {:?} (cobordism upload --prefix), or set MODEL_PREFIX to the prefix it was \
                 uploaded under",
                cfg.prefix
            ),
        )
    };
    let object = get_object(host, &key, missing).await?;
    let invalid = |what: String| {
        ShardError::new(
            ErrorCode::ManifestInvalid,
            format!(
                "the model manifest {key:?} is invalid; upload the model again (its operator \
                 finds why in the Worker's log)"
            ),
        )
        .with_internal(format_args!("{key}: {what}"))
    };
    let mut body = object.body;
    let json = read_all(&mut body, MAX_MANIFEST_BYTES as u64)
        .await
        .map_err(invalid)?;
    let manifest = Manifest::parse(&json).map_err(|e| invalid(e.to_string()))?;
    if manifest.shard_count != cfg.shard_count {
        return Err(ShardError::config(format_args!(
            "the manifest has {} shards, this worker is configured for SHARD_COUNT {}",
            manifest.shard_count, cfg.shard_count
        )));
    }
    Ok((object.etag, manifest))
}

impl Shard {
    /// An empty shard.
    pub fn new() -> Shard {
        Shard::default()
    }

    /// Makes sure a slice is resident, loading or checking it as its state requires.
    pub async fn ensure<H: Host>(&self, cfg: &Settings, host: &H) -> Result<Residency, ShardError> {
        let now = host.now_ms();
        let next = {
            let mut s = self.state.borrow_mut();
            let State {
                ready,
                check,
                loading,
                failed,
                ..
            } = &mut *s;
            if let Some(r) = ready {
                let running = check
                    .running_since
                    .is_some_and(|t| now - t < cfg.load_stall_ms);
                if now < check.due_ms || running {
                    Next::Hit
                } else {
                    check.running_since = Some(now);
                    Next::Recheck {
                        etag: r.etag.clone(),
                        version: r.manifest.version.clone(),
                    }
                }
            } else if let Some(l) = loading
                .as_ref()
                .filter(|l| now - l.last_progress_ms < cfg.load_stall_ms)
            {
                Next::Wait(loading_error(l))
            } else if let Some((e, _)) = failed.as_ref().filter(|(_, until)| now < *until) {
                Next::Wait(e.clone())
            } else {
                Next::Load
            }
        };
        match next {
            Next::Hit => Ok(Residency::hit()),
            Next::Wait(e) => Err(e),
            Next::Load => self.load(cfg, host, None).await,
            Next::Recheck { etag, version } => self.recheck(cfg, host, etag, version).await,
        }
    }

    /// The manifest check of a resident slice (stale-while-revalidate).
    async fn recheck<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        etag: String,
        version: String,
    ) -> Result<Residency, ShardError> {
        let found = async {
            let key = cfg.manifest_key();
            match host.etag(&key).await {
                Err(e) => Err(format!("checking {key}: {e}")),
                Ok(None) => Err(format!("{key} is gone; serving the resident version")),
                Ok(Some(current)) if current == etag => Ok(Found::Same { etag }),
                Ok(Some(_)) => match read_manifest(cfg, host).await {
                    Err(e) => Err(e.internal.unwrap_or(e.detail)),
                    Ok((etag, m)) if m.version == version => Ok(Found::Same { etag }),
                    Ok((etag, manifest)) => Ok(Found::New {
                        etag,
                        manifest: Box::new(manifest),
                    }),
                },
            }
        }
        .await;
        let now = host.now_ms();
        match found {
            Ok(Found::Same { etag }) => {
                let mut s = self.state.borrow_mut();
                if let Some(r) = s.ready.as_mut().filter(|r| r.manifest.version == version) {
                    r.etag = etag;
                    s.check = Check {
                        due_ms: now + cfg.manifest_ttl_ms,
                        ok_ms: now,
                        ..Check::default()
                    };
                }
                Ok(Residency::hit())
            }
            Err(why) => Ok(self.check_failed(now, why)),
            Ok(Found::New { etag, manifest }) => {
                let both_fit = {
                    let mut s = self.state.borrow_mut();
                    let loading_it = s
                        .loading
                        .as_ref()
                        .is_some_and(|l| now - l.last_progress_ms < cfg.load_stall_ms);
                    if loading_it {
                        // Another request is loading it beside the resident one.
                        s.check.running_since = None;
                        s.check.due_ms = now + cfg.manifest_ttl_ms;
                        return Ok(Residency::hit());
                    }
                    let entry = &manifest.shards[cfg.shard_index];
                    let next = MemoryNeed::of_shard(&manifest, entry).least_budget();
                    let both = s.ready.as_ref().map_or(0, |r| r.need.least_budget());
                    let fit = both.saturating_add(next) <= cfg.budget_bytes;
                    if !fit {
                        // Both do not fit: the old slice goes first, callers wait one load.
                        s.ready = None;
                        s.check = Check::default();
                    }
                    fit
                };
                match self.load(cfg, host, Some((etag, *manifest))).await {
                    Err(e) if both_fit => {
                        let why = e.internal.clone().unwrap_or(e.detail);
                        Ok(self.check_failed(host.now_ms(), format!("the new version: {why}")))
                    }
                    other => other,
                }
            }
        }
    }

    /// Records a failed check: the resident slice keeps answering, the next check backs off.
    fn check_failed(&self, now: f64, why: String) -> Residency {
        let mut s = self.state.borrow_mut();
        let check = &mut s.check;
        check.failures += 1;
        check.due_ms = now + backoff_ms(check.failures);
        check.running_since = None;
        check.last_error = Some(why.clone());
        Residency {
            check_error: Some(why),
            ..Residency::hit()
        }
    }

    /// Loads a slice (the manifest given, or read first); this request becomes the loader. With
    /// a resident slice still in place the new one loads beside it and replaces it at the end.
    async fn load<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        known: Option<(String, Manifest)>,
    ) -> Result<Residency, ShardError> {
        let started = host.now_ms();
        let (generation, buf) = {
            let mut s = self.state.borrow_mut();
            s.generation += 1;
            let buf = s.loading.take().map(|l| l.buf).unwrap_or_default();
            s.loading = Some(Loading {
                generation: s.generation,
                buf: Vec::new(),
                expected: 0,
                received: 0,
                last_progress_ms: started,
            });
            (s.generation, buf)
        };
        let result = self.fetch(cfg, host, generation, buf, known).await;
        let now = host.now_ms();
        let mut s = self.state.borrow_mut();
        let ours = s
            .loading
            .as_ref()
            .is_some_and(|l| l.generation == generation);
        match result {
            Ok(_) if !ours => Err(superseded()),
            Ok(mut resident) => {
                resident.load_ms = now - started;
                let load_ms = resident.load_ms;
                s.ready = Some(resident);
                s.loading = None;
                s.failed = None;
                s.check = Check {
                    due_ms: now + cfg.manifest_ttl_ms,
                    ok_ms: now,
                    ..Check::default()
                };
                Ok(Residency {
                    hit: false,
                    load_ms,
                    check_error: None,
                })
            }
            Err(e) => {
                if ours {
                    s.loading = None;
                    if s.ready.is_none() {
                        s.failed = Some((e.clone(), now + cfg.load_retry_ms));
                    }
                }
                Err(e)
            }
        }
    }

    /// Reads the manifest (unless given) and streams this shard's slice into `buf`.
    async fn fetch<H: Host>(
        &self,
        cfg: &Settings,
        host: &H,
        generation: u64,
        mut buf: Vec<u8>,
        known: Option<(String, Manifest)>,
    ) -> Result<Box<Resident>, ShardError> {
        let (etag, manifest) = match known {
            Some(k) => k,
            None => read_manifest(cfg, host).await?,
        };
        let entry = manifest
            .shards
            .get(cfg.shard_index)
            .cloned()
            .ok_or_else(|| ShardError::config("SHARD_INDEX is not in the manifest"))?;
        let need = MemoryNeed::of_shard(&manifest, &entry);
        if !need.fits(cfg.budget_bytes) {
            return Err(ShardError::new(
        ErrorCode::OverBudget,
                format!(
                    "this shard's slice needs {:.1} MiB of wasm memory with its buffers, more \
                     than MEMORY_BUDGET_MIB allows; cut the model into more shards (cobordism plan)",
                    need.least_budget() as f64 / 1048576.0,
                ),
            )
            .with_internal(format_args!(
                "{}: needs {} bytes, budget {} bytes",
                entry.key,
                need.least_budget(),
                cfg.budget_bytes
            )));
        }
        let key = cfg.object_key(&entry.key);
        let size = usize::try_from(entry.bytes).map_err(|_| corrupt(&key, "size", "too large"))?;
        buf.clear();
        reserve(&mut buf, size, format_args!("{size} bytes for {key}"))?;
        let scratch = zeroed(
            MAX_BATCH * manifest.quant_type().scratch_len(manifest.hidden),
            "the kernels' scratch",
        )?;
        // Hand the reserved buffer to the state, so that it is never held by a request alone.
        self.with_loading(generation, |l| {
            l.buf = core::mem::take(&mut buf);
            l.expected = entry.bytes;
        })
        .ok_or_else(superseded)?;
        // The checksum follows the slice's filled prefix as it grows, so that a single stream
        // is hashed while it arrives and the rest once the ranges before it are in.
        let hashed = RefCell::new((Checksum::new(), 0usize));
        let write = |at: u64, chunk: &<H::Body as ObjectBody>::Chunk, prefix: u64| {
            let now = host.now_ms();
            self.with_loading(generation, |l| {
                // `read_ranges` keeps every chunk within its range, hence within the buffer,
                // and `prefix` within the object.
                let at = at as usize;
                if l.buf.len() < size {
                    // Ranges land at their offsets, in any order: zero the buffer (within its
                    // reserved capacity) once the first bytes are in, not before the reads go
                    // out, so that it overlaps the wait for them.
                    l.buf.resize(size, 0);
                }
                chunk.copy_to(&mut l.buf[at..at + chunk.len()]);
                l.received += chunk.len() as u64;
                l.last_progress_ms = now;
                let (checksum, done) = &mut *hashed.borrow_mut();
                let prefix = prefix as usize;
                if prefix > *done {
                    checksum.update(&l.buf[*done..prefix]);
                    *done = prefix;
                }
            })
            .ok_or_else(superseded)
        };
        read_ranges(host, &key, entry.bytes, cfg.load_streams, &write)
            .await
            .map_err(|failure| match failure {
                ReadFailure::Missing => ShardError::new(
                    ErrorCode::SliceMissing,
                    format!(
                        "this shard's slice {key:?}, named by the manifest, is not in the \
                         bucket: upload the model again (cobordism upload)"
                    ),
                ),
                ReadFailure::Size(n) => {
                    let what = format_args!("{n} bytes, manifest says {}", entry.bytes);
                    corrupt(&key, "size", what)
                }
                ReadFailure::Store(why) => store_failed(format_args!("reading {key}: {why}")),
                ReadFailure::Changed => store_failed(format_args!(
                    "{key} was written while it was read; the next load reads it again"
                )),
                ReadFailure::Write(e) => e,
            })?;
        let slice = self
            .with_loading(generation, |l| core::mem::take(&mut l.buf))
            .ok_or_else(superseded)?;
        let (checksum, done) = hashed.into_inner();
        if done != size {
            // `read_ranges` returned: every range is filled, so the prefix is the whole slice.
            return Err(ShardError::internal(format_args!(
                "{key}: {done} of {size} bytes hashed"
            )));
        }
        let sum = checksum.finish();
        if sum != entry.checksum {
            let what = format_args!("checksum {sum}, manifest says {}", entry.checksum);
            return Err(corrupt(&key, "checksum", what));
        }
        Ok(Box::new(Resident {
            manifest,
            entry,
            need,
            load_ms: 0.0,
            etag,
            slice,
            scratch,
        }))
    }

    /// Runs `f` on the load of `generation`, if it is still the current one.
    fn with_loading<T>(&self, generation: u64, f: impl FnOnce(&mut Loading) -> T) -> Option<T> {
        let mut s = self.state.borrow_mut();
        s.loading
            .as_mut()
            .filter(|l| l.generation == generation)
            .map(f)
    }

    /// Runs `f` on the resident slice, if there is one. `f` must not call back into the shard.
    pub fn with_resident<T>(&self, f: impl FnOnce(&mut Resident) -> T) -> Option<T> {
        self.state.borrow_mut().ready.as_deref_mut().map(f)
    }

    /// The life cycle's state at `now_ms`, for `/healthz`.
    pub fn health(&self, now_ms: f64) -> Health {
        let s = self.state.borrow();
        let state = match (&s.ready, &s.loading, &s.failed) {
            (Some(_), _, _) => "ready",
            (None, Some(_), _) => "loading",
            (None, None, Some(_)) => "failed",
            (None, None, None) => "empty",
        };
        Health {
            state,
            loading_next: s.ready.is_some() && s.loading.is_some(),
            checked_ms_ago: s.ready.as_ref().map(|_| now_ms - s.check.ok_ms),
            last_check_error: match (&s.ready, &s.failed) {
                (None, Some((e, _))) => Some(e.to_string()),
                _ => s.check.last_error.clone(),
            },
        }
    }
}

impl Resident {
    /// Runs the kernels of `precision` once on a zero vector, the answer dropped: a fresh
    /// engine compiles the wasm kernels' optimized code while they run, so that a warm-up that
    /// ends with this makes the first real request as fast as the ones after it.
    pub fn prime(&mut self, precision: Precision) -> Result<(), ShardError> {
        let zero = zeroed(self.manifest.hidden, "a zero vector")?;
        self.logits(&zero, 1, precision).map(drop)
    }

    /// `n` hidden vectors (concatenated) → `n · row_count` logits, soft-capped as the manifest
    /// says.
    pub fn logits(
        &mut self,
        hidden: &[f32],
        n: usize,
        precision: Precision,
    ) -> Result<Vec<f32>, ShardError> {
        let rows = self.entry.row_count;
        let m = QMatrix::with_layout(
            self.manifest.quant_type(),
            self.manifest.layout(),
            &self.slice,
            rows,
            self.manifest.hidden,
        )
        .map_err(|e| ShardError::internal(format_args!("slice does not match its shape: {e}")))?;
        let len = n
            .checked_mul(rows)
            .ok_or_else(|| ShardError::internal("n · rows overflows"))?;
        let mut out = zeroed(len, "the logits")?;
        let cap = self.manifest.softcap;
        answer::logits_into(&m, hidden, precision, cap, &mut out, &mut self.scratch)
            .map_err(ShardError::internal)?;
        Ok(out)
    }
}
