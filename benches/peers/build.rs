//! With `GGML_SRC` set (the `ggml` directory of a llama.cpp source tree, as
//! `scripts/fetch-ggml.sh` prints it) and an x86_64 target, compiles ggml's CPU quantization
//! kernels (`quants.c`, its x86 `arch/x86/quants.c`, `ggml-quants.c`) with the host's C
//! compiler at `-O3 -march=native` — what llama.cpp's default `GGML_NATIVE` build does — and
//! sets `cfg(ggml)`, which adds ggml to `peer-timing`. Without it the peer is left out and
//! `peer-timing` says so.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ggml)");
    println!("cargo::rerun-if-env-changed=GGML_SRC");
    println!("cargo::rerun-if-changed=ggml/harness.c");
    let target = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let src = env::var_os("GGML_SRC").filter(|s| !s.is_empty());
    let Some(src) = src.map(PathBuf::from) else {
        return;
    };
    if target != "x86_64" {
        return;
    }
    let files = [
        "src/ggml-cpu/quants.c",
        "src/ggml-cpu/arch/x86/quants.c",
        "src/ggml-quants.c",
    ];
    let mut build = cc::Build::new();
    build
        .include(src.join("include"))
        .include(src.join("src"))
        .include(src.join("src/ggml-cpu"))
        .define("_GNU_SOURCE", None)
        .flag("-std=c11")
        .flag("-march=native")
        .opt_level(3)
        .warnings(false)
        .file("ggml/harness.c");
    for f in files {
        build.file(src.join(f));
        println!("cargo::rerun-if-changed={}", src.join(f).display());
    }
    build.compile("ggml_quants");
    println!("cargo::rustc-link-lib=m");
    println!("cargo::rustc-cfg=ggml");
}
