//! The strict GGUF reader on arbitrary bytes: errors, never panics, never huge allocations
//! (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch those).
#![no_main]

use std::path::Path;

use cobordism::gguf::Gguf;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Read as a whole file, and as the header of a larger (truncated) one.
    for len in [data.len() as u64, (data.len() as u64).saturating_mul(3)] {
        if let Ok(g) = Gguf::from_bytes(data, len, Path::new("fuzz.gguf")) {
            for t in &g.tensors {
                let _ = g.tensor(&t.name);
            }
            let _ = g.get("general.architecture");
        }
    }
});
