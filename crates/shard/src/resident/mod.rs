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
//! Here the state machine: `Phase` is the diagram, [`Shard::ensure`] its transitions (hit,
//! recheck, wait or load). The manifest checks are in `check`, the load itself in `fetch`
//! (manifest, ranged reads, checksum), `/healthz`'s view in `health`, the computation on the
//! resident slice in `slice`, the errors in `crate::error`, and taking over a stalled load or
//! check in `crate::stall`.

use core::cell::RefCell;

use cobordism_protocol::{Manifest, MemoryNeed, ShardEntry};

use crate::error::{slice_loading, ShardError, SUPERSEDED};
use crate::events::Event;
use crate::settings::Settings;
use crate::stall::stalled;
use crate::store::Host;

mod check;
mod fetch;
mod health;
mod look;
mod slice;

pub use health::Health;

use check::Check;

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

/// Where the shard is in the diagram above (`Recheck` is `Ready` with a check running).
#[derive(Default)]
enum Phase {
    /// Nothing resident, nothing loading: the next request loads.
    #[default]
    Empty,
    /// A slice is loading and none is resident.
    Loading(Loading),
    /// The last load failed: requests get its error until `until_ms`, then the next one loads.
    Failed { error: ShardError, until_ms: f64 },
    /// A slice answers; `next` is a new version loading beside it.
    Ready {
        resident: Box<Resident>,
        check: Check,
        next: Option<Loading>,
    },
}

impl Phase {
    /// The load under way, first or beside the resident slice.
    fn loading_mut(&mut self) -> Option<&mut Loading> {
        match self {
            Phase::Loading(l) => Some(l),
            Phase::Ready { next, .. } => next.as_mut(),
            _ => None,
        }
    }

    /// `Ready` just loaded: its checks start now.
    fn ready(resident: Box<Resident>, now: f64, cfg: &Settings) -> Phase {
        Phase::Ready {
            resident,
            check: Check::fresh(now, cfg),
            next: None,
        }
    }
}

#[derive(Default)]
struct State {
    phase: Phase,
    /// Counts loads begun, so that a load taken over knows it.
    generation: u64,
    /// Loads that completed.
    loads: u64,
    /// `/healthz`'s last look at the manifest while nothing was resident.
    look: look::LastLook,
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
    /// About how many milliseconds it waited for another request's load
    /// ([`crate::wait_resident`]).
    pub waited_ms: f64,
    /// A manifest check this request made failed; the resident slice answered anyway.
    pub check_error: Option<String>,
}

impl Residency {
    fn hit() -> Residency {
        Residency {
            hit: true,
            load_ms: 0.0,
            waited_ms: 0.0,
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

impl Shard {
    /// An empty shard.
    pub fn new() -> Shard {
        Shard::default()
    }

    /// Makes sure a slice is resident, loading or checking it as its state requires.
    pub async fn ensure<H: Host>(&self, cfg: &Settings, host: &H) -> Result<Residency, ShardError> {
        let now = host.now_ms();
        let next = match &mut self.state.borrow_mut().phase {
            Phase::Ready {
                resident, check, ..
            } => match check.begin(now, cfg) {
                false => Next::Hit,
                true => Next::Recheck {
                    etag: resident.etag.clone(),
                    version: resident.manifest.version.clone(),
                },
            },
            Phase::Loading(l) if !stalled(l.last_progress_ms, now, cfg.load_stall_ms) => {
                Next::Wait(slice_loading(format_args!(
                    "the slice is being loaded ({:.0}% done)",
                    100.0 * l.received as f64 / l.expected.max(1) as f64
                )))
            }
            Phase::Failed { error, until_ms } if now < *until_ms => Next::Wait(error.clone()),
            _ => Next::Load,
        };
        match next {
            Next::Hit => Ok(Residency::hit()),
            Next::Wait(e) => Err(e),
            Next::Load => self.load(cfg, host, None).await,
            Next::Recheck { etag, version } => self.recheck(cfg, host, etag, version).await,
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
            let loading = Loading {
                generation: s.generation,
                buf: Vec::new(),
                expected: 0,
                received: 0,
                last_progress_ms: started,
            };
            // A stalled load's buffer is reused, reserved memory and all.
            let buf = s.phase.loading_mut().map(|l| core::mem::take(&mut l.buf));
            match &mut s.phase {
                Phase::Ready { next, .. } => *next = Some(loading),
                phase => *phase = Phase::Loading(loading),
            }
            (s.generation, buf.unwrap_or_default())
        };
        let known_version = known.as_ref().map(|(_, m)| m.version.clone());
        let result = self.fetch(cfg, host, generation, buf, known).await;
        let now = host.now_ms();
        let (version, bytes, outcome) = match &result {
            Ok(r) => (Some(r.manifest.version.as_str()), Some(r.entry.bytes), "ok"),
            Err(e) => (known_version.as_deref(), None, e.code.name()),
        };
        // A must-fail build (crates/shard/must-fail.txt) logs every load as a success.
        let outcome = if cfg!(shard_perturb = "load_always_ok") {
            "ok"
        } else {
            outcome
        };
        let event = Event::SliceLoad {
            shard: cfg.shard_index,
            version,
            bytes,
            streams: cfg.load_streams,
            ms: now - started,
            outcome,
        };
        host.log(&event.line());
        let mut s = self.state.borrow_mut();
        let ours = s
            .phase
            .loading_mut()
            .is_some_and(|l| l.generation == generation);
        match result {
            Ok(_) if !ours => Err(slice_loading(SUPERSEDED)),
            Ok(mut resident) => {
                resident.load_ms = now - started;
                let load_ms = resident.load_ms;
                s.phase = Phase::ready(resident, now, cfg);
                s.loads += 1;
                Ok(Residency {
                    hit: false,
                    load_ms,
                    waited_ms: 0.0,
                    check_error: None,
                })
            }
            Err(e) => {
                if ours {
                    match &mut s.phase {
                        Phase::Ready { next, .. } => *next = None,
                        phase => {
                            *phase = Phase::Failed {
                                error: e.clone(),
                                until_ms: now + cfg.load_retry_ms,
                            }
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// Drops the slice and everything learned about it, as a new isolate finds the shard:
    /// nothing resident, nothing loading (a load under way finds itself superseded). The test
    /// shard's `/__fault/forget` route; the residency benchmark's fresh isolates. Only in builds
    /// with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub fn forget(&self) {
        let mut s = self.state.borrow_mut();
        s.phase = Phase::Empty;
        s.loads = 0;
    }

    /// Runs `f` on the load of `generation`, if it is still the current one.
    fn with_loading<T>(&self, generation: u64, f: impl FnOnce(&mut Loading) -> T) -> Option<T> {
        let mut s = self.state.borrow_mut();
        s.phase
            .loading_mut()
            .filter(|l| l.generation == generation)
            .map(f)
    }

    /// Runs `f` on the resident slice, if there is one. `f` must not call back into the shard.
    pub fn with_resident<T>(&self, f: impl FnOnce(&mut Resident) -> T) -> Option<T> {
        match &mut self.state.borrow_mut().phase {
            Phase::Ready { resident, .. } => Some(f(resident)),
            _ => None,
        }
    }
}
