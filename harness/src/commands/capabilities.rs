//! `clink capabilities`: what this build can do, for a gate that must know
//! before it runs anything (the upgrade check's builds.capabilities).

use clap::Args;
use clink_basics::exit::Exit;
use serde_json::json;

use super::Output;

/// Report what this build supports, by name.
///
/// A gate reads it (`--json`, format clink-capabilities version 1) instead
/// of guessing from --help. Exit 0.
#[derive(Args, Debug)]
pub struct CapabilitiesArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Every capability this build reports, with what it means.
pub const CAPABILITIES: &[(&str, &str)] = &[
    ("job.run", "clink run: runs a clink-job version 1 file over segment files"),
    ("input.generate", "clink gen-input: the seeded input generator"),
    ("input.follow", "clink run --follow-input: waits for new segments until END or a stop"),
    (
        "savepoint.stop",
        "a savepoint that stops the job with its state kept (--stop-with-savepoint-at, the end of the available input, clink stop)",
    ),
    ("savepoint.request", "clink savepoint: a savepoint of a running job on request; the job runs on"),
    ("stop.request", "clink stop: stops a running job with a savepoint"),
    ("restore.resume", "clink run over a checkpoint directory resumes from its restore point"),
    (
        "restore.dataset",
        "clink run --restore-from-dir --restore-from-checkpoint-id: restores a new run from a dataset",
    ),
    (
        "restore.refuses_unmapped_state",
        "a restore that would leave an operator's state behind is refused, naming it (--allow-non-restored-state drops it)",
    ),
    ("dataset.export", "clink checkpoint export: a completed checkpoint as a dataset with a digest index"),
    ("dataset.verify", "clink checkpoint verify: a dataset against its digest and index"),
    ("state.cat", "clink state-cat --json: a dataset's state as typed rows in the documented encodings"),
    ("state.diff", "clink state-diff: two datasets' state compared byte for byte"),
    ("schema.check_savepoint", "clink check-savepoint --expected=<job>: a job's restore paths against a dataset"),
    ("state.backend.file", "the file state backend (the only one)"),
    (
        clink_replay::ab::EPOCH_OUT_CAPABILITY,
        "clink replay epoch --out: one captured epoch's emissions as an emission dump (the A/B candidate's side)",
    ),
    ("replay.ab", "clink replay ab: this build's emissions against a candidate build's, epoch by epoch"),
];

/// The state encodings this build reads and writes: (slot, version).
const ENCODINGS: &[(&str, u32)] = {
    use clink_engine::operators::{driver, idle, segment_source, staged_sink, window};
    &[
        (segment_source::POSITION_SLOT, segment_source::POSITION_VERSION),
        (window::WINDOWS_SLOT, window::WINDOWS_VERSION),
        (idle::LAST_SEEN_SLOT, idle::SLOT_VERSION),
        (idle::IDLE_COUNT_SLOT, idle::SLOT_VERSION),
        (driver::TIMERS_SLOT, driver::TIMERS_SLOT_VERSION),
        (staged_sink::HANDLES_SLOT, staged_sink::HANDLES_VERSION),
    ]
};

/// The capture format versions this build's replay reads.
const CAPTURE_FORMATS: &[u32] = {
    use clink_engine::capture::format::{
        CAPTURE_VERSION, CAPTURE_VERSION_CANONICAL, CAPTURE_VERSION_COMPACT, CAPTURE_VERSION_RECORDS_ONLY,
    };
    &[CAPTURE_VERSION_RECORDS_ONLY, CAPTURE_VERSION_CANONICAL, CAPTURE_VERSION_COMPACT, CAPTURE_VERSION]
};

pub fn main(args: CapabilitiesArgs) -> Exit {
    let out = Output::new("capabilities", args.json);
    let doc = json!({
        "format": "clink-capabilities",
        "version": 1,
        "build": clink_engine::defects::build_description(),
        "defect_variant": clink_engine::defects::variant_features(),
        "capabilities": CAPABILITIES.iter().map(|(name, what)| json!({"name": name, "description": what})).collect::<Vec<_>>(),
        "state_encodings": ENCODINGS.iter().map(|(slot, v)| json!({"slot": slot, "version": v})).collect::<Vec<_>>(),
        "capture_formats": CAPTURE_FORMATS,
        "emission_dump": {"writes": clink_replay::emissions::EMIT_VERSION, "reads": clink_replay::emissions::EMIT_READ_VERSIONS},
        "operator_types": clink_engine::registry::type_names().into_iter()
            .map(|name| json!({"name": name, "kind": clink_engine::registry::kind_of(name).map(|k| format!("{k:?}").to_lowercase())}))
            .collect::<Vec<_>>(),
    });
    let text = || {
        let mut lines = vec![format!("clink {}", clink_engine::defects::build_description())];
        lines.extend(CAPABILITIES.iter().map(|(name, what)| format!("  {name:<32} {what}")));
        lines.join("\n")
    };
    out.report(doc, text, Exit::Passed)
}
