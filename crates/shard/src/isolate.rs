//! One isolate's state: its shard (the resident slice), the requests waiting for a pass and the
//! request bodies' buffers. The Worker keeps one of each per isolate; a request
//! ([`Isolate::lm_head`]) and a report ([`Isolate::health_report`]) read them together.

use crate::{BodyPool, Coalescer, Shard};

/// One isolate's shard, passes and bodies.
pub struct Isolate<'a> {
    /// The slice's life cycle.
    pub shard: &'a Shard,
    /// The requests waiting for a pass, and the passes' statistics.
    pub passes: &'a Coalescer,
    /// The request bodies' buffers.
    pub bodies: &'a BodyPool,
}
