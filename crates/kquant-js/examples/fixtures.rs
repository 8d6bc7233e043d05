//! Writes what the JS tests and benchmark compare against: seeded random valid blocks
//! (`kquant::synth`), an activation vector, and what native kquant computes from them, all as
//! little-endian files.
//!
//! ```text
//! cargo run --release -p kquant-js --example fixtures -- \
//!     OUTDIR [--rows N] [--cols N] [--seed N] [--no-dequantize]
//! ```
//!
//! Writes into OUTDIR: `fixtures.json` (`{"rows", "cols", "seed", "backend"}`), `x.f32` (`cols`
//! floats) and, for each of `q4_k` and `q6_k`: `{dtype}.weights` (`rows × cols` weights as
//! blocks), `{dtype}.matvec.f32` (`rows` floats, `W·x`), `{dtype}.matvec-int8.f32` (the same
//! in the int8 fast mode) and, unless `--no-dequantize`,
//! `{dtype}.dequant.f32` (`rows × cols` floats).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kquant::synth::{random_blocks, SplitMix64};
use kquant::{dequantize, repack, Backend, Layout, QMatrix, QuantType, QK_K};

const USAGE: &str =
    "usage: fixtures OUTDIR [--rows N] [--cols N (multiple of 256)] [--seed N] [--no-dequantize]";

struct Args {
    out: PathBuf,
    rows: usize,
    cols: usize,
    seed: u64,
    dequantize: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        out: args.next().ok_or(USAGE)?.into(),
        rows: 1000,
        cols: 768,
        seed: 6,
        dequantize: true,
    };
    while let Some(flag) = args.next() {
        if flag == "--no-dequantize" {
            parsed.dequantize = false;
            continue;
        }
        let value = args
            .next()
            .ok_or(format!("{flag} needs a value\n{USAGE}"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--rows" => parsed.rows = number(&value)? as usize,
            "--cols" => parsed.cols = number(&value)? as usize,
            "--seed" => parsed.seed = number(&value)?,
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn run(a: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let mut rng = SplitMix64::new(a.seed);
    let x: Vec<f32> = (0..a.cols).map(|_| rng.normal() * 2.0).collect();
    write(&a.out, "x.f32", &f32_bytes(&x))?;
    for ty in QuantType::ALL {
        let name = ty.name();
        let row_bytes = ty.row_bytes(a.cols).map_err(|e| e.to_string())?;
        let mut weights = vec![0u8; a.rows * row_bytes];
        random_blocks(&mut rng, ty, &mut weights).map_err(|e| e.to_string())?;
        let (mut out, mut out_int8) = (vec![0.0f32; a.rows], vec![0.0f32; a.rows]);
        QMatrix::new(ty, &weights, a.rows, a.cols)
            .and_then(|m| {
                m.mat_vec(&x, &mut out)?;
                m.mat_vec_int8(&x, &mut out_int8)
            })
            .map_err(|e| e.to_string())?;
        write(&a.out, &format!("{name}.weights"), &weights)?;
        for layout in Layout::ALL
            .into_iter()
            .filter(|l| *l != Layout::Ggml && l.supports(ty))
        {
            let mut packed = weights.clone();
            repack(ty, Layout::Ggml, layout, &mut packed).map_err(|e| e.to_string())?;
            write(
                &a.out,
                &format!("{name}.{}.weights", layout.name()),
                &packed,
            )?;
        }
        write(&a.out, &format!("{name}.matvec.f32"), &f32_bytes(&out))?;
        write(
            &a.out,
            &format!("{name}.matvec-int8.f32"),
            &f32_bytes(&out_int8),
        )?;
        if a.dequantize {
            let mut floats = vec![0.0f32; weights.len() / ty.block_bytes() * QK_K];
            dequantize(ty, &weights, &mut floats).map_err(|e| e.to_string())?;
            write(&a.out, &format!("{name}.dequant.f32"), &f32_bytes(&floats))?;
        }
    }
    let meta = format!(
        "{{\"rows\": {}, \"cols\": {}, \"seed\": {}, \"backend\": \"{}\"}}\n",
        a.rows,
        a.cols,
        a.seed,
        Backend::best()
    );
    write(&a.out, "fixtures.json", meta.as_bytes())
}

fn main() -> ExitCode {
    match parse_args().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fixtures: {e}");
            ExitCode::FAILURE
        }
    }
}
