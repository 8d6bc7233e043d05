//! Test-only helpers shared by the workspace's crates.

use proptest::test_runner::{Config, RngSeed};

/// A proptest configuration for CI: `cases` cases from the fixed `seed`, unless
/// `PROPTEST_CASES` / `PROPTEST_RNG_SEED` say otherwise; never a regression file; a bounded
/// shrink so that a failure reports quickly.
pub fn proptest_config(cases: u32, seed: u64) -> Config {
    let env = Config::default();
    let set = |name| std::env::var_os(name).is_some();
    Config {
        cases: if set("PROPTEST_CASES") {
            env.cases
        } else {
            cases
        },
        rng_seed: if set("PROPTEST_RNG_SEED") {
            env.rng_seed
        } else {
            RngSeed::Fixed(seed)
        },
        failure_persistence: None,
        max_shrink_iters: 1024,
        ..env
    }
}
