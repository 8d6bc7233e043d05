//! `check-wasm [--relaxed] [--max-memory BYTES] FILE.wasm…`: validates each module with every
//! proposal wasmparser enables by default except relaxed SIMD, whose instructions give
//! implementation-defined results (rustc 1.95 has been seen to emit
//! `i16x8.relaxed_dot_i8x16_i7x16_s` with only `+simd128`; Workers' V8 computes other sums with
//! it than our canonical order). With `--max-memory`, each module's memory must declare exactly
//! that maximum (the test shard's build caps it). Exit status 1 names the first failure.
//!
//! `--relaxed` checks a relaxed-SIMD build instead (kquant's feature `relaxed-simd`): it
//! validates with relaxed SIMD, and then every relaxed instruction must be one of the two 8-bit
//! dot products whose results kquant's int8 kernels make exact (`arch/wasm32/simd128.rs`), inside
//! a function the name section names as one of those kernels ([`RELAXED_KERNELS`]). Any other
//! relaxed instruction, or a dot product anywhere else, fails: LLVM applies a wasm module's
//! target features to every function in it, and chooses relaxed instructions from plain code on
//! its own (it made `f32x4.relaxed_max` of a `max` fold, and `i16x8.relaxed_dot_i8x16_i7x16_s`
//! of a signed i8 dot, whose results depend on the engine).

use std::collections::BTreeMap;
use std::process::ExitCode;

use wasmparser::{KnownCustom, Name, Operator, Parser, Payload, TypeRef, Validator, WasmFeatures};

/// The functions that may hold a relaxed dot product: the int8 passes of kquant's relaxed
/// simd128 backend, one instance per kernel and batch width, all of this name (demangled).
const RELAXED_KERNELS: &str = "kquant::arch::wasm32::simd128::relaxed_int8_pass";

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

/// The module's memory must declare exactly `cap` bytes as its maximum.
fn check_cap(path: &str, bytes: &[u8], cap: u64) -> Result<(), String> {
    let max = max_memory(bytes).map_err(|e| format!("{path}: {e}"))?;
    if max != Some(cap) {
        return Err(format!(
            "{path}: memory maximum is {max:?} bytes, not capped at {cap}"
        ));
    }
    Ok(())
}

/// Checks a plain build: valid without relaxed SIMD.
fn check(path: &str, bytes: &[u8]) -> Result<(), String> {
    let features = WasmFeatures::default().difference(WasmFeatures::RELAXED_SIMD);
    Validator::new_with_features(features)
        .validate_all(bytes)
        .map_err(|e| format!("{path}: invalid without relaxed SIMD: {e}"))?;
    Ok(())
}

/// Relaxed instructions per defined function (by function index): the two allowed dot
/// products, and any other relaxed instruction by name.
#[derive(Default)]
struct Relaxed {
    dots: BTreeMap<u32, usize>,
    others: BTreeMap<u32, String>,
}

/// Checks a relaxed build (see the module docs).
fn check_relaxed(path: &str, bytes: &[u8]) -> Result<usize, String> {
    Validator::new_with_features(WasmFeatures::default() | WasmFeatures::RELAXED_SIMD)
        .validate_all(bytes)
        .map_err(|e| format!("{path}: invalid: {e}"))?;
    let mut found = Relaxed::default();
    let mut names = BTreeMap::new();
    let mut index = 0u32; // function index: the imported functions come first
    let fail = |e: wasmparser::BinaryReaderError| format!("{path}: {e}");
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(fail)? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if matches!(import.map_err(fail)?.ty, TypeRef::Func(_)) {
                        index += 1;
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader().map_err(fail)?;
                while !ops.eof() {
                    match ops.read().map_err(fail)? {
                        Operator::I16x8RelaxedDotI8x16I7x16S
                        | Operator::I32x4RelaxedDotI8x16I7x16AddS => {
                            *found.dots.entry(index).or_default() += 1;
                        }
                        op => {
                            let name = format!("{op:?}");
                            if name.contains("Relaxed") {
                                found.others.entry(index).or_insert(name);
                            }
                        }
                    }
                }
                index += 1;
            }
            Payload::CustomSection(section) => {
                if let KnownCustom::Name(reader) = section.as_known() {
                    for name in reader {
                        if let Name::Function(map) = name.map_err(fail)? {
                            for naming in map {
                                let naming = naming.map_err(fail)?;
                                names.insert(naming.index, naming.name.to_string());
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let shown = |i: &u32| {
        names.get(i).map_or_else(
            || format!("function {i} (no name section)"),
            |n| format!("{:#}", rustc_demangle::demangle(n)),
        )
    };
    if !found.others.is_empty() {
        let list: Vec<String> = found
            .others
            .iter()
            .map(|(i, op)| format!("{op} in {}", shown(i)))
            .collect();
        return Err(format!(
            "{path}: only the two i8×i7 dot products may be relaxed; found {}",
            list.join("; ")
        ));
    }
    if found.dots.is_empty() {
        return Err(format!(
            "{path}: no relaxed dot product: not a relaxed build"
        ));
    }
    for i in found.dots.keys() {
        let name = shown(i);
        if !name.starts_with(RELAXED_KERNELS) {
            return Err(format!(
                "{path}: a relaxed dot product in {name}, which is not one of kquant's relaxed \
                 int8 kernels"
            ));
        }
    }
    Ok(found.dots.len())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1).peekable();
    let (mut cap, mut relaxed) = (None, false);
    while let Some(flag) = args.next_if(|a| a.starts_with("--")) {
        match flag.as_str() {
            "--relaxed" => relaxed = true,
            "--max-memory" => match args.next().and_then(|v| v.parse::<u64>().ok()) {
                Some(v) => cap = Some(v),
                None => {
                    eprintln!("check-wasm: --max-memory takes a number of bytes");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("check-wasm: unknown flag {flag}");
                return ExitCode::from(2);
            }
        }
    }
    let files: Vec<String> = args.collect();
    if files.is_empty() {
        eprintln!("usage: check-wasm [--relaxed] [--max-memory BYTES] FILE.wasm…");
        return ExitCode::from(2);
    }
    for f in &files {
        let checked = std::fs::read(f)
            .map_err(|e| format!("{f}: {e}"))
            .and_then(|bytes| {
                let line = if relaxed {
                    check_relaxed(f, &bytes).map(|n| {
                        format!("ok (relaxed dot products in {n} int8 kernels only): {f}")
                    })?
                } else {
                    check(f, &bytes).map(|()| format!("ok (valid, no relaxed SIMD): {f}"))?
                };
                cap.map_or(Ok(()), |cap| check_cap(f, &bytes, cap))?;
                Ok(line)
            });
        match checked {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("check-wasm: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, Module,
        NameMap, NameSection, TypeSection, ValType,
    };

    /// A module with one function `() -> v128` named `name` (or unnamed), whose body is
    /// `v128.const 0` twice and then `ops`.
    fn module(name: Option<&str>, ops: &[Instruction]) -> std::path::PathBuf {
        let mut m = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], [ValType::V128]);
        m.section(&types);
        let mut funcs = FunctionSection::new();
        funcs.function(0);
        m.section(&funcs);
        let mut exports = ExportSection::new();
        exports.export("f", ExportKind::Func, 0);
        m.section(&exports);
        let mut code = CodeSection::new();
        let mut f = Function::new([]);
        f.instruction(&Instruction::V128Const(0));
        f.instruction(&Instruction::V128Const(0));
        for op in ops {
            f.instruction(op);
        }
        f.instruction(&Instruction::End);
        code.function(&f);
        m.section(&code);
        if let Some(name) = name {
            let mut names = NameMap::new();
            names.append(0, name);
            let mut section = NameSection::new();
            section.functions(&names);
            m.section(&section);
        }
        let dir = std::env::temp_dir().join(format!("check-wasm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!("{n}.wasm"));
        std::fs::write(&path, m.finish()).unwrap();
        path
    }

    fn relaxed(path: &std::path::Path) -> Result<usize, String> {
        check_relaxed(path.to_str().unwrap(), &std::fs::read(path).unwrap())
    }

    #[test]
    fn the_dot_products_pass_only_inside_the_named_kernels() {
        let dot = Instruction::I16x8RelaxedDotI8x16I7x16S;
        let kernel = module(Some(RELAXED_KERNELS), std::slice::from_ref(&dot));
        assert_eq!(relaxed(&kernel), Ok(1));
        // The plain check refuses every relaxed build.
        assert!(check(kernel.to_str().unwrap(), &std::fs::read(&kernel).unwrap()).is_err());

        let elsewhere = module(
            Some("kquant::matrix::QMatrix::run"),
            std::slice::from_ref(&dot),
        );
        let err = relaxed(&elsewhere).unwrap_err();
        assert!(err.contains("kquant::matrix::QMatrix::run"), "{err}");
        assert!(relaxed(&module(None, &[dot]))
            .unwrap_err()
            .contains("no name section"));
    }

    #[test]
    fn any_other_relaxed_instruction_fails_even_inside_a_kernel() {
        let ops = [
            Instruction::I16x8RelaxedDotI8x16I7x16S,
            Instruction::V128Const(0),
            Instruction::F32x4RelaxedMax,
        ];
        let err = relaxed(&module(Some(RELAXED_KERNELS), &ops)).unwrap_err();
        assert!(err.contains("F32x4RelaxedMax"), "{err}");
    }

    #[test]
    fn a_module_without_relaxed_dot_products_is_not_a_relaxed_build() {
        let plain = module(Some(RELAXED_KERNELS), &[Instruction::I32x4Add]);
        assert!(relaxed(&plain).unwrap_err().contains("not a relaxed build"));
    }
}
