//! `cobordism-bindgen`: writes the JS glue and the processed module for one of the project's
//! wasm artifacts, with `wasm-bindgen-cli-support` — the library behind the `wasm-bindgen` CLI,
//! at the version the wasm crates pin. It takes the subset of that CLI's flags the build scripts
//! use, with the CLI's defaults, so that the output is what `wasm-bindgen` would write.
//!
//! Why not the CLI itself: `cargo install wasm-bindgen-cli` also compiles its test runner (an
//! HTTP server, a TLS stack, compression), about four times the work of this binary, and it was
//! the longest part of a fresh machine's first build. This binary builds with the rest of the
//! workspace, and `Cargo.toml` compiles the wasm libraries below it without optimization (they
//! process a module of about a megabyte, well under a second either way).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use wasm_bindgen_cli_support::Bindgen;

/// The JS module format of the glue.
#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// An ES module whose init functions take the module or its bytes (the JS packages).
    Web,
    /// An ES module that imports the .wasm as a module (the shard Worker).
    Module,
}

#[derive(Parser)]
#[command(
    version,
    about = "wasm-bindgen's output for a module, as the `wasm-bindgen` CLI of the same version \
             writes it"
)]
struct Args {
    /// The module rustc wrote.
    input: PathBuf,
    #[arg(long, value_enum)]
    target: Target,
    /// Where the glue and the processed module go (created if missing).
    #[arg(long)]
    out_dir: PathBuf,
    /// The files' stem (default: the input's).
    #[arg(long)]
    out_name: Option<String>,
    /// No TypeScript declarations.
    #[arg(long)]
    no_typescript: bool,
    /// Export a function that resets the instance's state (workers-rs calls it after a panic).
    #[arg(long)]
    experimental_reset_state_function: bool,
    /// Install the abort handler even without panic=unwind.
    #[arg(long)]
    force_enable_abort_handler: bool,
}

fn generate(args: &Args) -> Result<()> {
    let mut b = Bindgen::new();
    match args.target {
        Target::Web => b.web(true)?,
        Target::Module => b.module(true)?,
    };
    b.input_path(&args.input)
        .typescript(!args.no_typescript)
        .omit_default_module_path(false)
        .reset_state_function(args.experimental_reset_state_function)
        .force_enable_abort_handler(args.force_enable_abort_handler);
    if let Some(name) = &args.out_name {
        b.out_name(name);
    }
    b.generate(&args.out_dir)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match generate(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cobordism-bindgen: {}: {e:#}", args.input.display());
            ExitCode::FAILURE
        }
    }
}
