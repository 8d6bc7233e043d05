//! What the benchmarks share: real lm-head slice shapes filled with seeded, valid blocks, the
//! memory floor, the median timer and the command line of the timing binaries.

use std::time::Instant;

use kquant::{synth, QuantType};

/// Median of `runs` timed calls of `f` in milliseconds, after one untimed warm-up call.
pub fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The memory floor: reads every 64-byte line of `bytes` once (one u64 plus the last byte).
pub fn sequential_read(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(64)
        .map(|c| u64::from_le_bytes(c[..8].try_into().expect("8 bytes")) ^ u64::from(c[63]))
        .fold(0, |a, b| a.wrapping_add(b))
}

/// The command line of the timing binaries: `[RUNS] [--json FILE]`.
pub struct TimingArgs {
    /// Timed runs per measurement (default 7).
    pub runs: usize,
    /// Where to write JSON lines for `benches/chart.mjs`.
    pub json: Option<String>,
}

impl TimingArgs {
    /// Parses `std::env::args()`; exits with a usage message on bad input.
    pub fn from_env() -> TimingArgs {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let usage = || -> ! {
            eprintln!("usage: [RUNS] [--json FILE]");
            std::process::exit(2)
        };
        let runs = match args.first().filter(|a| !a.starts_with("--")) {
            Some(a) => a.parse().unwrap_or_else(|_| usage()),
            None => 7,
        };
        let json = args
            .iter()
            .position(|a| a == "--json")
            .map(|i| args.get(i + 1).cloned().unwrap_or_else(|| usage()));
        TimingArgs { runs, json }
    }
}

/// One benchmark case: a format and a `rows × cols` slice.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The format.
    pub ty: QuantType,
    /// Rows of the slice (vocabulary entries).
    pub rows: usize,
    /// Columns (hidden size).
    pub cols: usize,
}

/// The shapes the issues name: one eighth of gemma-3-27b's vocabulary (5376 hidden), and of
/// qwen2.5-7b's (3584 hidden).
pub const CASES: [Case; 3] = [
    Case {
        ty: QuantType::Q6K,
        rows: 32768,
        cols: 5376,
    },
    Case {
        ty: QuantType::Q4K,
        rows: 32768,
        cols: 5376,
    },
    Case {
        ty: QuantType::Q4K,
        rows: 19008,
        cols: 3584,
    },
];

impl Case {
    /// `q6_k 32768×5376`.
    pub fn label(&self) -> String {
        format!("{} {}×{}", self.ty.name(), self.rows, self.cols)
    }

    /// Bytes of weights streamed by one mat-vec.
    pub fn weight_bytes(&self) -> usize {
        self.rows * self.ty.row_bytes(self.cols).expect("valid shape")
    }

    /// Seeded weights and activations for this case.
    pub fn data(&self, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut rng = synth::SplitMix64::new(seed);
        let mut w = vec![0u8; self.weight_bytes()];
        synth::random_blocks(&mut rng, self.ty, &mut w).expect("whole blocks");
        let x = (0..self.cols).map(|_| rng.normal()).collect();
        (w, x)
    }
}
