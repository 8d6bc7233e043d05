//! The `cobordism` command-line tool, as a library: one module per subcommand plus the GGUF
//! reader/writer and the helpers they share. `src/main.rs` only parses the arguments.
//!
//! * [`synth`]: write a GGUF file with a seeded random lm-head.
//! * [`plan`]: show how a GGUF file's lm-head splits into shard slices and whether they fit.
//! * [`slice`](mod@slice): cut the lm-head into slice files plus `manifest.json`.
//! * [`upload`]: put the slices and the manifest into R2 with wrangler.
//! * [`logits`]: compute logits from shard endpoints or locally, and compare the two.
//! * [`sample`](mod@sample): draw a token exactly, or score given tokens, across the shards.
//! * [`warm`]: ask every shard to load its slice before the first token.
//! * [`tokens`]: the vocabulary's text next to the slices, for printing tokens.
//! * [`deploy`]: the shard Workers on a Cloudflare account, and the deployment's record.
//! * [`shard_settings`]: a shard's variables checked as the shard reads them.
//! * [`demo`]: all of the above against eight local shards in workerd.
//!
//! Files are written whole or not at all (`atomic`, and `slice`'s own commit of many files).

pub mod adjust_flags;
mod atomic;
pub mod demo;
pub mod deploy;
pub mod gguf;
pub mod lm_head;
pub mod logits;
pub mod plan;
mod progress;
pub mod sample;
pub mod shard_settings;
pub mod slice;
pub mod slices;
pub mod source;
pub mod status;
pub mod synth;
pub mod tokens;
pub mod upload;
pub mod warm;
mod wrangler;

use std::fmt;

/// Exit code when a shard does not fit in the budget (`plan`, `slice`).
pub const EXIT_DOES_NOT_FIT: u8 = 3;
/// Exit code when `logits --verify` finds a difference.
pub const EXIT_VERIFY_FAILED: u8 = 4;
/// Exit code when `status` finds a shard unreachable, refusing the token, failed, or out of
/// step with the others.
pub const EXIT_UNHEALTHY: u8 = 5;

/// A failure with its own exit code; every other error exits with 1.
#[derive(Debug)]
pub struct ExitError {
    /// The process exit code.
    pub code: u8,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for ExitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}
