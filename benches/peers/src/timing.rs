//! Median wall time and the two output formats of `kernel-timing`: Markdown rows
//! `| case | kernel | ms | GB/s |` and JSON lines `{"case","kernel","ms","gbps"}` for
//! `benches/chart.mjs`.

use std::time::Instant;

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

/// One measurement: a kernel on a case, streaming `bytes` of weights in `ms`.
pub struct Row<'a> {
    /// The case label (`q6_k 32768×5376`).
    pub case: &'a str,
    /// The kernel label (`candle x86_64 avx2`).
    pub kernel: &'a str,
    /// Median milliseconds per call.
    pub ms: f64,
    /// Weight bytes read per call.
    pub bytes: usize,
}

impl Row<'_> {
    /// Weight throughput in GB/s.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / 1e9 / (self.ms / 1e3)
    }

    /// `| case | kernel | ms | GB/s |`.
    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {:.1} | {:.2} |",
            self.case,
            self.kernel,
            self.ms,
            self.gbps()
        )
    }

    /// One JSON line (with its newline) in `kernel-timing`'s schema.
    pub fn json(&self) -> String {
        format!(
            "{{\"case\":\"{}\",\"kernel\":\"{}\",\"ms\":{:.3},\"gbps\":{:.3}}}\n",
            self.case,
            self.kernel,
            self.ms,
            self.gbps()
        )
    }
}
