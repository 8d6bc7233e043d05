//! `SHARD_PERTURB=…` → `--cfg shard_perturb="…"`: the must-fail builds of scripts/must-fail.sh
//! (crates/perturb). For the coalescer, "pass_slices": each request of a pass gets the pass's first
//! vectors' logits; "mixed_precision": requests of both precisions share a pass; for ranged loads,
//! "any_etag": reads of different versions of the object are kept together; "unordered_hash": the
//! checksum runs past the gaps in front of a range; "wait_gives_up": a request that finds the
//! slice loading gives up at once instead of waiting for that load; "any_streams": the settings
//! take a `LOAD_STREAMS` outside 1…6; "body_first": a request's body is read before its declared
//! length is checked against the slice's cap.
fn main() {
    cobordism_perturb::cfg_from_env(
        "SHARD_PERTURB",
        "shard_perturb",
        &[
            "pass_slices",
            "mixed_precision",
            "any_etag",
            "unordered_hash",
            "wait_gives_up",
            "any_streams",
            "body_first",
        ],
    );
}
