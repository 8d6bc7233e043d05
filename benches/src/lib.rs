//! What the benchmarks share: real lm-head slice shapes filled with seeded, valid blocks, the
//! memory floor, the median timer and the command line of the timing binaries.

use std::time::Instant;

use kquant::{synth, QuantType};

/// Median of `runs` timed runs of `calls` calls of `f`, in milliseconds per call, after one
/// untimed warm-up call.
pub fn median_ms(runs: usize, calls: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls.max(1) {
                f();
            }
            start.elapsed().as_secs_f64() * 1e3 / calls.max(1) as f64
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

/// The command line of the timing binaries: `[RUNS] [--json FILE] [--case TYPE:ROWSxCOLS]…
/// [--calls N]`.
pub struct TimingArgs {
    /// Timed runs per measurement (default 7).
    pub runs: usize,
    /// Where to write JSON lines for `benches/chart.mjs`.
    pub json: Option<String>,
    /// The shapes to time: each `--case` (for example `q4_k:2048x3584`), or [`CASES`].
    pub cases: Vec<Case>,
    /// Calls per timed run (default 1): more for a shape that fits in cache, whose one call is
    /// too short to time alone.
    pub calls: usize,
}

impl TimingArgs {
    /// Parses `std::env::args()`; exits with a usage message on bad input.
    pub fn from_env() -> TimingArgs {
        let args: Vec<String> = std::env::args().skip(1).collect();
        TimingArgs::parse(&args).unwrap_or_else(|e| {
            eprintln!("{e}\nusage: [RUNS] [--json FILE] [--case TYPE:ROWSxCOLS]… [--calls N]");
            std::process::exit(2)
        })
    }

    /// [`TimingArgs::from_env`] of `args`, or what is wrong with them.
    pub fn parse(args: &[String]) -> Result<TimingArgs, String> {
        let mut parsed = TimingArgs {
            runs: 7,
            json: None,
            cases: Vec::new(),
            calls: 1,
        };
        let count = |v: Option<&String>, what: &str| match v.map(|v| v.parse::<usize>()) {
            Some(Ok(n)) if n > 0 => Ok(n),
            _ => Err(format!("{what}: a whole number above 0")),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.as_str() {
                "--json" => parsed.json = Some(rest.next().ok_or("--json: a file")?.clone()),
                "--case" => parsed
                    .cases
                    .push(Case::parse(rest.next().ok_or("--case: a shape")?)?),
                "--calls" => parsed.calls = count(rest.next(), "--calls")?,
                runs if !runs.starts_with("--") => parsed.runs = count(Some(arg), "RUNS")?,
                other => return Err(format!("unknown option {other}")),
            }
        }
        if parsed.cases.is_empty() {
            parsed.cases = CASES.to_vec();
        }
        Ok(parsed)
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

impl Case {
    /// `TYPE:ROWSxCOLS` (`q6_k:1024x5376`): COLS a multiple of 256, ROWS above 0.
    pub fn parse(spec: &str) -> Result<Case, String> {
        let bad =
            || format!("--case {spec}: TYPE:ROWSxCOLS, TYPE q4_k or q6_k, COLS a multiple of 256");
        let (ty, shape) = spec.split_once(':').ok_or_else(bad)?;
        let (rows, cols) = shape.split_once('x').ok_or_else(bad)?;
        let ty = QuantType::from_name(ty).ok_or_else(bad)?;
        let (rows, cols) = (
            rows.parse().map_err(|_| bad())?,
            cols.parse().map_err(|_| bad())?,
        );
        if rows == 0 || cols == 0 || cols % 256 != 0 {
            return Err(bad());
        }
        Ok(Case { ty, rows, cols })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<TimingArgs, String> {
        TimingArgs::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn the_command_line_takes_runs_cases_and_calls_and_refuses_the_rest() {
        let a = parse(&[
            "9",
            "--case",
            "q4_k:2048x3584",
            "--calls",
            "20",
            "--json",
            "f",
        ])
        .unwrap();
        assert_eq!((a.runs, a.calls, a.json.as_deref()), (9, 20, Some("f")));
        assert_eq!(a.cases.len(), 1);
        assert_eq!(
            (a.cases[0].ty, a.cases[0].rows, a.cases[0].cols),
            (QuantType::Q4K, 2048, 3584)
        );
        let d = parse(&[]).unwrap();
        assert_eq!((d.runs, d.calls, d.cases.len()), (7, 1, CASES.len()));
        for bad in [
            &["0"][..],
            &["--calls", "0"],
            &["--case", "q4_k:8x100"],
            &["--case", "q5_k:8x256"],
            &["--case", "q4_k:0x256"],
            &["--json"],
            &["--bogus"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
