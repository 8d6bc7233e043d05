//! The shard's logic without HTTP, so that it is tested natively and the Worker stays a thin
//! shell over it:
//!
//! * [`Shard`]: the resident slice's life cycle (load, check, replace, fail, recover) over a
//!   [`Host`] (the object store, the clock and the operator's log: R2 in the Worker, a store that
//!   fails on demand in the tests), and [`Resident::logits`], the answer's computation; the
//!   slice is read as concurrent ranges ([`ranges`]);
//! * [`Coalescer`]: concurrent requests computed as one batch (a *pass*), each answered with the
//!   bits it would get alone;
//! * [`BodyPool`]: request bodies held in a bounded pool of buffers; [`declared_length`]: how
//!   their headers frame them, judged before they are read;
//! * [`Isolate::lm_head`]: one request from its headers to its answer, in the order that keeps a
//!   wrong or oversized one from costing memory or a load;
//! * [`wait_resident`]: a request that finds the slice loading waits for that load;
//! * [`Shard::warm`]: the warm-up; [`ensure_kept_alive`]: a load that outlives its request;
//! * [`object`]: object residency (a shard's slice in its Durable Object), its replicas and
//!   keep-warm;
//! * [`Settings::from_vars`]: the Worker's variables, their defaults and ranges;
//! * [`Isolate::health_report`] and [`Shard::warm_report`]: what `/healthz` and the warm-up
//!   answer (`cobordism_protocol::health`'s types);
//! * [`ShardError`]: every error answer, with what is for the caller and what for the log;
//! * [`events`]: the operator's log lines and metrics, one shape each.

mod bodies;
mod coalesce;
mod error;
pub mod events;
mod framing;
mod isolate;
pub mod object;
mod pipeline;
pub mod ranges;
mod report;
mod resident;
mod settings;
mod stall;
mod store;
mod waiting;
mod warming;

pub use bodies::{too_large, Body, BodyPool};
pub use coalesce::{Answer, Arrival, Coalescer, PassStats, MAX_TURNS};
pub use error::ShardError;
pub use events::{Event, MetricPoint, PassSummary};
pub use framing::{declared_length, unreadable};
pub use isolate::Isolate;
pub use object::{object_name, KeepWarm, ResidencyMode};
pub use pipeline::{Framing, Served, MAX_BODY_BYTES};
pub use ranges::{DEFAULT_LOAD_STREAMS, MAX_LOAD_STREAMS};
pub use report::Runtime;
pub use resident::{Health, Residency, Resident, Shard};
pub use settings::Settings;
pub use store::{Chunk, Host, ObjectBody, StoreError, StoredObject};
pub use waiting::{wait_resident, LOAD_POLLS, LOAD_POLL_MS};
pub use warming::{ensure_kept_alive, Ensure};
