//! The shard's settings, read by the Worker from its variables.

/// Settings of one shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// This shard's position (`SHARD_INDEX`).
    pub shard_index: usize,
    /// Shards in the deployment (`SHARD_COUNT`); must match the manifest.
    pub shard_count: usize,
    /// Key prefix of the model (`MODEL_PREFIX`): `<prefix>/manifest.json`.
    pub prefix: String,
    /// Most bytes of wasm memory the slice, its buffers and the request bodies in flight may
    /// take (`MEMORY_BUDGET_MIB`; counted by `cobordism_protocol::MemoryNeed`).
    pub budget_bytes: u64,
    /// How often a resident shard looks for a new manifest version (`MANIFEST_TTL_MS`).
    pub manifest_ttl_ms: f64,
    /// Wait after a failed load before the next try (`LOAD_RETRY_MS`).
    pub load_retry_ms: f64,
    /// A load or check that made no progress for this long is taken over (`LOAD_STALL_MS`).
    pub load_stall_ms: f64,
    /// Concurrent ranged reads of the slice (`LOAD_STREAMS`, 1 ..= [`crate::MAX_LOAD_STREAMS`]).
    pub load_streams: usize,
    /// Whether concurrent requests share passes (`COALESCE`, default on; `"0"` turns it off:
    /// each request then computes alone, as soon as its body is in).
    pub coalesce: bool,
}

impl Settings {
    /// Key of the manifest.
    pub fn manifest_key(&self) -> String {
        format!("{}/manifest.json", self.prefix)
    }

    /// Key of an object named in the manifest.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }
}
