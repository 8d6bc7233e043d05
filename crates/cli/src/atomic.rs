//! Files written whole or not at all: the bytes go to a temporary file in the destination's
//! folder (`.<name>.<random>.partial`), which is renamed over the destination once complete and
//! flushed to disk. A failure anywhere before — a write error, a refused input, a panic — drops
//! the temporary file, so the folder is left as it was before the command.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// Writes `path` with `write` (buffered), atomically.
pub fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or("out".into(), |n| n.to_string_lossy());
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    let mut w = BufWriter::with_capacity(1 << 20, temp.as_file());
    write(&mut w)?;
    w.flush()
        .and_then(|()| temp.as_file().sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    drop(w);
    temp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
