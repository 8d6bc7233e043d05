//! Test-only routes that crash the instance, compiled only with the `fault-injection` feature
//! (which `scripts/build-worker.sh --test` enables and no deployment does): they prove that an
//! instance reset is followed by a clean reload.

/// `POST /__fault/panic` (with object residency, in the shard's object) and `POST
/// /__fault/panic-here` (in the isolate the request reaches: a front's, with object residency).
pub fn panic() -> ! {
    panic!("fault injection: panic")
}

/// `POST /__fault/oom`: grows wasm memory until the allocator fails, which aborts the instance.
pub fn exhaust_memory() -> ! {
    let mut hog: Vec<Vec<u8>> = Vec::new();
    loop {
        hog.push(vec![1u8; 64 << 20]);
    }
}
