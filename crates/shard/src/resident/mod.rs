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
//!
//! Here the state machine ([`Shard::ensure`]: hit, recheck, wait or load); the load itself in
//! `fetch` (manifest, ranged reads, checksum), `/healthz`'s view in `health`, the computation
//! on the resident slice in `slice`, and the errors in `crate::error`.

use core::cell::RefCell;

use cobordism_protocol::{Manifest, MemoryNeed, ShardEntry};

use crate::error::{self, superseded, ShardError};
use crate::settings::Settings;
use crate::store::Host;

mod fetch;
mod health;
mod slice;

pub use health::Health;

use fetch::read_manifest;

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

/// The wait before check number `failures + 1` after `failures` failed ones.
fn backoff_ms(failures: u32) -> f64 {
    (1000.0 * 2f64.powi(failures.saturating_sub(1).min(16) as i32)).min(MAX_BACKOFF_MS)
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
                Next::Wait(error::loading(l.received, l.expected))
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
}
