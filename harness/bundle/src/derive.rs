//! What a manifest claims, derived again from the bundle's evidence alone.
//!
//! The manifest says what the job is (its id, name and sink family), what
//! was selected (the rule, the participants, the RESTORED record), what the
//! sinks guarantee, what the bundle contains, which epochs were captured and
//! within which bounds. Each of these is also said by the evidence: the
//! markers and the RESTORED record, the job graph the selected marker names
//! and the job manifest, the artifacts' own paths. The rules here compute
//! each field from that evidence; the collector writes its manifest with the
//! same rules ([`family`], [`rule_name`], [`delivery`], [`contents`]), and
//! the verifier compares every field with them ([`disagreements`]) before any
//! check reads the manifest, so a manifest edited by hand is caught here,
//! never taken as a fact.
//!
//! This module finds disagreements; it never judges the job. The fields a
//! check recomputes and fails on by the seed's rule (the marker's generation
//! and participants, the engine's restore choice) are left to those checks.

use std::collections::BTreeSet;

use clink_engine::checkpoint::RestoreRule;
use clink_engine::job::JobGraph;
use clink_engine::job_manifest::JobManifest;

use crate::graph::GraphProblem;
use crate::manifest::{Artifact, Bundle, Contents, SinkDelivery};
use crate::paths::{kind_of, ArtifactKind};

/// The path of the job manifest in a bundle.
pub const JOB_MANIFEST_PATH: &str = "job/manifest.json";

/// One field on which the manifest and the evidence disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The manifest's field, as a JSON pointer (`/job/requires_commit_confirmation`).
    pub field: String,
    /// What the manifest says.
    pub manifest: String,
    /// What the evidence says, and which evidence.
    pub evidence: String,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: the manifest says {}, the evidence says {}", self.field, self.manifest, self.evidence)
    }
}

/// Whether the job's sinks need commit confirmation, from every source that
/// says: the job graph (its sinks' family), the job manifest, and a flag the
/// collector was given. Two that disagree: `Err` names them.
pub fn family(
    graph: Option<&JobGraph>,
    job_manifest: Option<&JobManifest>,
    flag: Option<(&str, bool)>,
) -> Result<Option<bool>, String> {
    let said: Vec<(&str, bool)> = [
        graph.map(|g| ("the job graph", g.requires_commit_confirmation())),
        job_manifest.map(|m| ("the job manifest", m.requires_commit_confirmation)),
        flag,
    ]
    .into_iter()
    .flatten()
    .collect();
    if let [(first, a), rest @ ..] = said.as_slice() {
        if let Some((other, b)) = rest.iter().find(|(_, b)| b != a) {
            return Err(format!("{first} says commit confirmation is {a}, {other} says {b}"));
        }
    }
    Ok(said.first().map(|(_, v)| *v))
}

/// The restore rule's name for a family, or `unknown` when none is known.
pub fn rule_name(requires_commit_confirmation: Option<bool>) -> String {
    requires_commit_confirmation.map_or("unknown".to_string(), |c| RestoreRule::for_confirmation(c).name().to_string())
}

/// The sinks of a job graph and the guarantee each gives.
pub fn delivery(graph: &JobGraph) -> Vec<SinkDelivery> {
    graph
        .operators
        .iter()
        .filter_map(|o| {
            // The sink says its family; the type's name says nothing.
            let family = o.spec.descriptor.sink_family()?;
            Some(SinkDelivery {
                operator: o.spec.id.to_string(),
                uid: o.spec.uid.clone(),
                type_name: o.spec.type_name.clone(),
                family: family.as_str().into(),
                guarantee: family.guarantee().into(),
            })
        })
        .collect()
}

/// What a list of artifacts contains: state when every participant's
/// snapshot of the selected checkpoint is there, captures when a captured
/// epoch is, traces when a trace file is, the job manifest when its file
/// is, and the job graph when the file the selected marker names is. A part
/// asked for and left out (under a bound, or never there) is not contained.
pub fn contents(
    artifacts: &[Artifact],
    job: &str,
    generation: u32,
    checkpoint: u64,
    participants: &[String],
    graph_file: Option<&str>,
) -> Contents {
    let listed: BTreeSet<&str> = artifacts.iter().map(|a| a.path.as_str()).collect();
    let kinds: Vec<ArtifactKind> = artifacts.iter().filter_map(|a| kind_of(&a.path)).collect();
    let snapshot = |p: &String| format!("checkpoint/_state/{job}/v{generation}/{p}/checkpoint-{checkpoint}.snap");
    Contents {
        state: !participants.is_empty() && participants.iter().all(|p| listed.contains(snapshot(p).as_str())),
        captures: kinds.iter().any(|k| matches!(k, ArtifactKind::Capture { .. })),
        traces: kinds.iter().any(|k| matches!(k, ArtifactKind::Trace { .. })),
        job_manifest: listed.contains(JOB_MANIFEST_PATH),
        job_graph: graph_file.is_some_and(|f| listed.contains(format!("checkpoint/_jobs/{job}/{f}").as_str())),
    }
}

/// Every field of the manifest's job, selection, delivery, contents, epochs
/// and bounds that the evidence contradicts. Reads vouched bytes only; call
/// it once bundle.artifacts has passed. `Err` when evidence a field is
/// derived from does not read (the checks report that evidence themselves).
pub fn disagreements(bundle: &Bundle) -> Result<Vec<Disagreement>, String> {
    let m = &bundle.manifest;
    let sel = &m.selection;
    let mut out = Vec::new();
    let mut differ = |field: &str, manifest: String, evidence: String| {
        out.push(Disagreement { field: field.to_string(), manifest, evidence });
    };

    // The job's id: every artifact whose path names a job names this one.
    for a in &m.artifacts {
        if let Some(job) = kind_of(&a.path).and_then(|k| k.job()) {
            if job.to_string() != m.job.id {
                differ("/job/id", format!("{:?}", m.job.id), format!("{} is job {job}'s", a.path));
            }
        }
    }

    let marker = bundle.completed_marker(sel.checkpoint).map_err(|e| e.to_string())?;
    let job_manifest = read_job_manifest(bundle)?;
    let graph = match bundle.job_graph() {
        Ok(known) => Some(known.graph),
        Err(GraphProblem::Absent(_)) => None,
        // checkpoint.marker fails on it: nothing here is derived from a graph that does not hold.
        Err(GraphProblem::Broken(why)) => return Err(why),
    };

    // The job's name: the job manifest's, the graph's too where both are there.
    let named = job_manifest.as_ref().map(|j| j.name.clone());
    if m.job.name != named {
        differ("/job/name", format!("{:?}", m.job.name), format!("{named:?} (the job manifest's name)"));
    }
    if let (Some(claimed), Some(g)) = (&m.job.name, &graph) {
        if *claimed != g.name {
            differ("/job/name", format!("{claimed:?}"), format!("{:?} (the job graph's name)", g.name));
        }
    }

    // The family, the rule, and the engine's choice's existence.
    let family = match family(graph.as_ref(), job_manifest.as_ref(), None) {
        Ok(f) => f,
        Err(why) => return Err(format!("the job's sink family: {why}")),
    };
    match (family, m.job.requires_commit_confirmation) {
        (Some(derived), Some(claimed)) if derived != claimed => differ(
            "/job/requires_commit_confirmation",
            claimed.to_string(),
            format!("{derived} (the sinks of the job graph and the job manifest)"),
        ),
        (Some(derived), None) => differ(
            "/job/requires_commit_confirmation",
            "null".into(),
            format!("{derived} (the sinks of the job graph and the job manifest)"),
        ),
        _ => {}
    }
    let rule = rule_name(m.job.requires_commit_confirmation);
    if sel.rule != rule {
        differ("/selection/rule", format!("{:?}", sel.rule), format!("{rule:?} (the rule of the job's family)"));
    }
    if m.job.requires_commit_confirmation.is_none() && sel.engine_choice.is_some() {
        differ(
            "/selection/engine_choice",
            format!("{:?}", sel.engine_choice),
            "null (no family is known, so no rule chose)".into(),
        );
    }
    // A selection is the checkpoint named, or else the engine's choice
    // (which checkpoint.restore_rule recomputes over the markers, and fails
    // on when the selection is not it).
    match (sel.named, sel.engine_choice) {
        (Some(named), _) if named != sel.checkpoint => {
            differ("/selection/checkpoint", sel.checkpoint.to_string(), format!("{named} (the checkpoint named)"))
        }
        (None, None) => differ(
            "/selection/checkpoint",
            sel.checkpoint.to_string(),
            "no checkpoint named and no engine choice: nothing selected it".into(),
        ),
        _ => {}
    }

    // The RESTORED record the selection names is the bundle's.
    let restored = bundle.markers().map_err(|e| e.to_string())?.restored;
    let from_disk = restored.as_ref().map(|r| (r.restored_from, r.next));
    let claimed = sel.restored.map(|r| (r.restored_from, r.next));
    if from_disk != claimed {
        differ(
            "/selection/restored",
            format!("{claimed:?}"),
            format!("{from_disk:?} (the bundle's RESTORED record, as (restored_from, next))"),
        );
    }
    if sel.participant_state != "file" {
        differ(
            "/selection/participant_state",
            format!("{:?}", sel.participant_state),
            "\"file\" (sidecars and snapshots)".into(),
        );
    }

    // Delivery: the graph's sinks. With no graph (absent, not broken: that
    // returned above) no sink is known, and a manifest naming one differs.
    let sinks = graph.as_ref().map(delivery).unwrap_or_default();
    if m.delivery != sinks {
        let show = |d: &[SinkDelivery]| {
            d.iter()
                .map(|s| format!("{} {} {} {} {}", s.operator, s.uid, s.type_name, s.family, s.guarantee))
                .collect::<Vec<_>>()
        };
        differ("/delivery", format!("{:?}", show(&m.delivery)), format!("{:?} (the job graph's sinks)", show(&sinks)));
    }

    // Contents: what the artifacts hold.
    let graph_file = marker.graph.as_ref().map(|g| g.file.as_str());
    // From the selected marker's own generation and participants, not the
    // manifest's (checkpoint.marker holds those two to the marker).
    let held = contents(&m.artifacts, &m.job.id, marker.generation, sel.checkpoint, &marker.participants, graph_file);
    for (name, claimed, derived) in [
        ("state", m.contents.state, held.state),
        ("captures", m.contents.captures, held.captures),
        ("traces", m.contents.traces, held.traces),
        ("job_manifest", m.contents.job_manifest, held.job_manifest),
        ("job_graph", m.contents.job_graph, held.job_graph),
    ] {
        if claimed != derived {
            differ(&format!("/contents/{name}"), claimed.to_string(), format!("{derived} (the artifacts listed)"));
        }
    }

    // The epoch index is exactly the captured epochs listed.
    let indexed: BTreeSet<&str> = m.epochs.iter().map(|e| e.path.as_str()).collect();
    for (a, _) in bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::Capture { .. })) {
        if !indexed.contains(a.path.as_str()) {
            differ("/epochs", "no entry".into(), format!("{} is a captured epoch the bundle lists", a.path));
        }
    }

    // Each entry's role is what the job graph says its operator is (the
    // role decides which checks read the epoch).
    if let Err(why) = bundle.check_epoch_roles(graph.as_ref()) {
        differ("/epochs", "the roles it gives".into(), why);
    }

    // The bounds held what was collected.
    let files = m.artifacts.len() as u64 + 1;
    let bytes: u64 = m.artifacts.iter().map(|a| a.size).sum();
    if files > m.bounds.max_files {
        differ(
            "/bounds/max_files",
            m.bounds.max_files.to_string(),
            format!("{files} files collected (the manifest too)"),
        );
    }
    if bytes > m.bounds.max_bytes {
        differ("/bounds/max_bytes", m.bounds.max_bytes.to_string(), format!("{bytes} bytes of artifacts collected"));
    }
    Ok(out)
}

/// The job manifest the bundle holds, read from vouched bytes; `None` when
/// it holds none.
pub fn read_job_manifest(bundle: &Bundle) -> Result<Option<JobManifest>, String> {
    if bundle.artifact(JOB_MANIFEST_PATH).is_none() {
        return Ok(None);
    }
    let bytes = bundle
        .read_vouched(JOB_MANIFEST_PATH, clink_engine::job_manifest::MAX_MANIFEST_BYTES)
        .map_err(|e| e.to_string())?;
    clink_engine::job_manifest::parse(&bundle.root.join(JOB_MANIFEST_PATH), &bytes)
        .map(Some)
        .map_err(|e| format!("{JOB_MANIFEST_PATH}: {e}"))
}
