//! `check-wasm [--max-memory BYTES] FILE.wasm…`: validates each module with every proposal
//! wasmparser enables by default except relaxed SIMD, whose instructions give
//! implementation-defined results (rustc 1.95 has been seen to emit
//! `i16x8.relaxed_dot_i8x16_i7x16_s` with only `+simd128`; Workers' V8 computes other sums with
//! it than our canonical order). With `--max-memory`, each module's memory must declare exactly
//! that maximum (the test shard's build caps it). Exit status 1 names the first failure.

use std::process::ExitCode;

use wasmparser::{Parser, Payload, Validator, WasmFeatures};

const PAGE: u64 = 64 * 1024;

/// The declared maximum of the module's first memory, in bytes (None: unbounded or no memory).
fn max_memory(bytes: &[u8]) -> Result<Option<u64>, String> {
    for payload in Parser::new(0).parse_all(bytes) {
        if let Payload::MemorySection(memories) = payload.map_err(|e| e.to_string())? {
            if let Some(memory) = memories.into_iter().next() {
                let memory = memory.map_err(|e| e.to_string())?;
                return Ok(memory.maximum.map(|pages| pages * PAGE));
            }
        }
    }
    Ok(None)
}

fn check(path: &str, cap: Option<u64>) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let features = WasmFeatures::default().difference(WasmFeatures::RELAXED_SIMD);
    Validator::new_with_features(features)
        .validate_all(&bytes)
        .map_err(|e| format!("{path}: invalid without relaxed SIMD: {e}"))?;
    if let Some(cap) = cap {
        let max = max_memory(&bytes).map_err(|e| format!("{path}: {e}"))?;
        if max != Some(cap) {
            return Err(format!(
                "{path}: memory maximum is {max:?} bytes, not capped at {cap}"
            ));
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    let mut cap = None;
    if args.peek().map(String::as_str) == Some("--max-memory") {
        args.next();
        match args.next().and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => cap = Some(v),
            None => {
                eprintln!("check-wasm: --max-memory takes a number of bytes");
                return ExitCode::from(2);
            }
        }
    }
    let files: Vec<String> = args.collect();
    if files.is_empty() {
        eprintln!("usage: check-wasm [--max-memory BYTES] FILE.wasm…");
        return ExitCode::from(2);
    }
    for f in &files {
        match check(f, cap) {
            Ok(()) => println!("ok (valid, no relaxed SIMD): {f}"),
            Err(e) => {
                eprintln!("check-wasm: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
