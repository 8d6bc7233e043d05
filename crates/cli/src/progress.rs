//! Byte progress bars on stderr for long jobs. Small jobs get a hidden bar, and indicatif draws
//! nothing when stderr is not a terminal, so logs and tests stay clean.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Jobs smaller than this get no bar.
const MIN_BYTES: u64 = 32 << 20;

/// A bar over `total` bytes, labelled `message`.
pub fn bytes(total: u64, message: &str) -> ProgressBar {
    if total < MIN_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{msg:>10} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(message.to_string());
    bar
}
