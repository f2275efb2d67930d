//! Merging a run's lines into one job's sequence of events, ordered by
//! timestamp.

use std::collections::BTreeSet;

use super::read::TraceLine;
use super::Malformed;

/// A merged trace of one job.
#[derive(Debug, Clone)]
pub struct MergedTrace {
    pub job: u64,
    pub events: Vec<TraceLine>,
    /// Lines of different processes stamped with the same `ts`: their order
    /// (by file name) is not the clock's.
    pub ties: Vec<String>,
}

/// Keeps one job's events (`job`, or the only job present) and orders them by
/// timestamp. A process stamps strictly increasing timestamps across its
/// files, so two of its lines sharing one is malformed; lines of two
/// processes sharing one are put in file-name order and reported as a tie.
pub fn merge(mut lines: Vec<TraceLine>, job: Option<u64>) -> Result<MergedTrace, Malformed> {
    let jobs: BTreeSet<u64> = lines.iter().filter_map(|l| l.u64("job")).collect();
    let job = match job {
        Some(j) if jobs.contains(&j) => j,
        Some(j) => return Err(Malformed(format!("the trace holds no event of job {j} (jobs {jobs:?})"))),
        None => match jobs.iter().collect::<Vec<_>>().as_slice() {
            [only] => **only,
            [] => return Err(Malformed("the trace names no job".into())),
            many => return Err(Malformed(format!("the trace holds jobs {many:?}; name one"))),
        },
    };
    lines.sort_by(|a, b| (a.ts, &a.file, a.seq).cmp(&(b.ts, &b.file, b.seq)));
    let mut ties = Vec::new();
    for pair in lines.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.ts == b.ts {
            if a.process == b.process {
                return Err(Malformed(format!(
                    "{}:{} and {}:{} share ts {}, but one process never stamps two lines alike",
                    a.file, a.seq, b.file, b.seq, a.ts
                )));
            }
            ties.push(format!("{}:{} and {}:{} share ts {}", a.file, a.seq, b.file, b.seq, a.ts));
        }
    }
    lines.retain(|l| l.u64("job") == Some(job));
    Ok(MergedTrace { job, events: lines, ties })
}
