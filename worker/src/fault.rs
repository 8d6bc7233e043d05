//! Test-only routes that crash the instance, compiled only with the `fault-injection` feature
//! (which `scripts/build-worker.sh --test` enables and no deployment does): they prove that an
//! instance reset is followed by a clean reload, one that empties an isolate the way a new
//! one is (the residency benchmark's fresh isolates), and one that shows an object's keep-warm
//! alarm.

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

/// `POST /__fault/forget`: the isolate the request reaches drops its slice, as a new isolate
/// has none (`cobordism_shard::Shard::forget`); its next request loads the slice again.
pub fn forget() -> Result<worker::Response, crate::error::ApiError> {
    crate::handlers::forget();
    Ok(worker::Response::from_json(
        &serde_json::json!({ "state": "empty" }),
    )?)
}

/// `POST /__fault/alarm`, answered by the shard's object (object residency): when its keep-warm
/// alarm is due, as the platform's storage holds it (`{"alarm_ms": ms since the epoch}`, `null`
/// for none). The request is not one the keep-warm schedule counts.
pub async fn alarm(state: &worker::State) -> Result<worker::Response, crate::error::ApiError> {
    let alarm_ms = state.storage().get_alarm().await?;
    Ok(worker::Response::from_json(
        &serde_json::json!({ "alarm_ms": alarm_ms }),
    )?)
}

/// `POST /__fault/alarm` without object residency: no object, no alarm.
pub fn no_alarm() -> Result<worker::Response, crate::error::ApiError> {
    Err(crate::error::ApiError::new(
        cobordism_protocol::ErrorCode::NotFound,
        "only a shard's Durable Object (RESIDENCY = \"object\") has an alarm",
    ))
}
