//! The two output formats of `kernel-timing`: Markdown rows
//! `| case | kernel | ms | GB/s |` and JSON lines `{"case","kernel","ms","gbps"}` for
//! `benches/chart.mjs`.

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
