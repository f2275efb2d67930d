//! How far a run's checkpoints piled up, read from its protocol trace: the
//! positive evidence a progress trial needs that the in-flight bound was
//! reached, not merely that the run finished.

use std::collections::BTreeSet;
use std::path::Path;

/// The most checkpoints in flight at once (triggered, not yet decided) over
/// every coordinator trace file in `traces`.
pub fn most_in_flight(traces: &Path) -> Result<usize, String> {
    let mut most = 0;
    let mut files = 0;
    for entry in std::fs::read_dir(traces).map_err(|e| format!("{}: {e}", traces.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("coordinator-")) {
            continue;
        }
        files += 1;
        let lines =
            clink_basics::ndjson::read_objects(&path, 1 << 30).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut in_flight = BTreeSet::new();
        for (at, v) in lines {
            let ckpt = || v["ckpt"].as_u64().ok_or_else(|| format!("{}: line {at}: no ckpt", path.display()));
            match v["event"].as_str() {
                Some("Trigger") => {
                    in_flight.insert(ckpt()?);
                }
                Some("CoordComplete") => {
                    in_flight.remove(&ckpt()?);
                }
                _ => {}
            }
            most = most.max(in_flight.len());
        }
    }
    if files == 0 {
        return Err(format!("{} holds no coordinator trace file", traces.display()));
    }
    Ok(most)
}
