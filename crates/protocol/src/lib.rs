//! What the `cobordism` CLI and the shard worker agree on.
//!
//! * [`Manifest`]: `manifest.json`, describing a model's lm-head cut into shard slices.
//! * [`Checksum`]: the streaming XXH3-64 checksum of a slice, `"xxh3-64:<16 hex digits>"`.
//! * [`TopK`]: a section of the binary answers; [`Form`]: which answer a query asks for, and its
//!   encoding; [`sampling`]: exact sampling, top-K merges and log-probabilities across shards.
//! * [`decode_hidden`]: the request body (`n · hidden` little-endian f32) and its checks;
//!   [`Query`], [`parse_top_k`], [`Access`] and [`bearer_matches`]: the query and who may call.
//! * [`softcap`]: the final-logit soft cap `c · tanh(z / c)`; [`answer`]: kernel + soft cap, the
//!   one computation of logits for the shard and the CLI.
//! * [`MemoryNeed`]: the wasm memory a shard's slice needs, for the shard and `cobordism plan`.
//! * [`check_tiling`]: whether the shards' answers make up the whole vocabulary;
//!   [`worth_retrying`]: which failed requests a client sends again, [`retry_wait`] when.
//! * [`ROUTE`]: where a client sends; [`top_k_ladder`]: the top-K a filtered draw asks for.
//! * [`wire`]: the answer's HTTP headers, named once; [`ErrorCode`]: every error answer's code,
//!   status and `Retry-After`.
//! * [`health`]: what `/healthz` and the warm-up answer, as types.
//! * [`adjust`]: the allowed set, logit bias and penalties applied to logits before sampling,
//!   their order and their wire layout.

pub mod adjust;
pub mod answer;
mod ask;
mod budget;
mod checksum;
mod error_code;
mod form;
pub mod health;
mod hidden;
mod manifest;
mod request;
mod retry;
pub mod sampling;
mod tiling;
mod topk;
pub mod wire;

/// The version of the wire contract (docs/API.md): raised by a change an older client or
/// shard would misread. `/healthz` names it.
pub const PROTOCOL_VERSION: u32 = 1;

pub use ask::{top_k_ladder, ROUTE, WARM_ROUTE};
pub use budget::{
    max_rows, mib_to_bytes, MemoryNeed, DEFAULT_BUDGET_MIB, MAX_BODIES_IN_FLIGHT,
    MIN_BODIES_IN_FLIGHT,
};
pub use checksum::Checksum;
pub use error_code::ErrorCode;
pub use form::{Form, FormError, Noise, Query};
pub use hidden::{
    check_hidden, decode_hidden, decode_hidden_into, encode_f32, max_body_bytes, HiddenError,
    MAX_BATCH,
};
pub use manifest::{
    slice_key, Manifest, ManifestError, ShardEntry, FORMAT, FORMAT_VERSION, MAX_HIDDEN,
    MAX_MANIFEST_BYTES, MAX_SHARDS, MAX_VOCAB,
};
pub use request::{
    bearer_matches, parse_top_k, Access, Precision, PREVIOUS_TOKEN_SECRET, TOKEN_SECRET,
};
pub use retry::{retry_after, retry_wait, worth_retrying, DEFAULT_RETRIES, MAX_RETRY_AFTER};
pub use tiling::{check_tiling, Tile, TilingError};
pub use topk::{TopK, TopKError, MAX_TOP_K};

/// The final-logit soft cap: `c · tanh(z / c)` in place (gemma-2/3 style); `None` leaves `z`.
///
/// `tanh` comes from the `libm` crate, not the platform's C library, so the shard (wasm) and
/// the CLI (native) give the same bits.
pub fn softcap(logits: &mut [f32], cap: Option<f32>) {
    if let Some(c) = cap {
        for z in logits {
            *z = c * libm::tanhf(*z / c);
        }
    }
}
