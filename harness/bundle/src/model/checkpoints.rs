//! The checkpoints' own records: every COMPLETED and CONFIRMED marker, the
//! RESTORED and IMPORTED records, the receipts and unresolved markers, the
//! job graph each marker names and the job manifest; the job's sink family
//! from every source that says it, and the evidence a family must not have.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use clink_engine::checkpoint::commits::MAX_COMMITS_BYTES;
use clink_engine::checkpoint::dataset::{parse_imported_bytes, MAX_IMPORTED_BYTES};
use clink_engine::checkpoint::layout::participant_name;
use clink_engine::checkpoint::markers::{parse_restored_bytes, MAX_MARKER_BYTES};
use clink_engine::job::JobGraph;

use super::{Evidence, Fact};
use crate::manifest::Bundle;
use crate::paths::ArtifactKind;

/// Reads every marker, record, receipt and graph, and the job manifest.
pub(super) fn read(bundle: &Bundle, e: &mut Evidence) {
    // Each graph reference (file and hash together) read and checked once.
    let mut graphs: BTreeMap<(String, String), Arc<JobGraph>> = BTreeMap::new();
    for (a, kind) in bundle.artifacts_of_kind(|_| true) {
        match kind {
            ArtifactKind::CompletedMarker { checkpoint, .. } => match bundle.completed_marker(checkpoint) {
                Ok(m) => {
                    e.completed.insert(checkpoint, m);
                }
                Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
            },
            ArtifactKind::ConfirmedMarker { checkpoint, .. } => match bundle.confirmed_marker(checkpoint) {
                Ok(m) => {
                    e.confirmed.insert(checkpoint, m);
                }
                Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
            },
            ArtifactKind::CommitReceipt { participant, checkpoint, .. } => {
                match bundle.receipt(&participant, checkpoint) {
                    Ok(r) => {
                        e.receipts.insert((participant, checkpoint), r);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::UnresolvedMarker { participant, checkpoint, .. } => {
                let read =
                    bundle.read_vouched(&a.path, MAX_COMMITS_BYTES).map_err(|w| w.to_string()).and_then(|bytes| {
                        clink_engine::checkpoint::commits::parse_unresolved_bytes(
                            &bundle.root.join(&a.path),
                            &bytes,
                            e.job,
                            &participant,
                            checkpoint,
                        )
                        .map_err(|w| w.to_string())
                    });
                match read {
                    Ok(m) => {
                        e.unresolved.insert((participant, checkpoint), m);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::RestoredRecord { .. } => {
                let read =
                    bundle.read_vouched(&a.path, MAX_MARKER_BYTES).map_err(|w| w.to_string()).and_then(|bytes| {
                        parse_restored_bytes(&bundle.root.join(&a.path), &bytes, e.job).map_err(|w| w.to_string())
                    });
                match read {
                    Ok(r) => e.restored = Some(r),
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::ImportedRecord { .. } => {
                let read =
                    bundle.read_vouched(&a.path, MAX_IMPORTED_BYTES).map_err(|w| w.to_string()).and_then(|bytes| {
                        parse_imported_bytes(&bundle.root.join(&a.path), &bytes, e.job).map_err(|w| w.to_string())
                    });
                match read {
                    Ok(r) => e.imported = Some(r),
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::JobManifest => match crate::derive::read_job_manifest(bundle) {
                Ok(m) => e.job_manifest = m,
                Err(why) => e.find(Fact::Unread, why),
            },
            _ => {}
        }
    }
    // The graph each marker names, each file read (and hash-checked) once.
    for (c, m) in &e.completed {
        let Some(named) = &m.graph else { continue };
        let key = (named.file.clone(), named.sha256.clone());
        if let Some(g) = graphs.get(&key) {
            e.graphs.insert(*c, Arc::clone(g));
            continue;
        }
        match bundle.graph_of_marker(*c) {
            Ok(Some(g)) => {
                let g = Arc::new(g);
                graphs.insert(key, Arc::clone(&g));
                e.graphs.insert(*c, g);
            }
            Ok(None) => {}
            Err(why) => e.findings.push(super::Finding { fact: Fact::Unread, detail: why.to_string() }),
        }
    }
    // A graph file no marker names is read too: it must at least be a job.
    let named: BTreeSet<String> =
        e.completed.values().filter_map(|m| m.graph.as_ref()).map(|g| g.file.clone()).collect();
    for (a, kind) in bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::JobGraph { .. })) {
        let ArtifactKind::JobGraph { sha256, .. } = kind else { continue };
        let file = a.path.rsplit('/').next().unwrap_or_default().to_string();
        if !named.contains(&file) {
            let graph = clink_engine::checkpoint::graph::GraphRef { file: file.clone(), sha256 };
            if let Err(why) = bundle.graph_bytes(&graph) {
                e.find(Fact::Unread, why.to_string());
            }
            e.find(Fact::Marker, format!("{}: a job graph no COMPLETED marker of the bundle names", a.path));
        }
    }
}

/// The participants a graph deploys: every operator at its parallelism.
pub(super) fn deployed(graph: &JobGraph) -> BTreeSet<String> {
    graph.operators.iter().flat_map(|o| (0..o.spec.parallelism).map(move |s| participant_name(o.spec.id, s))).collect()
}

/// The commit-confirmed sink subtasks a graph deploys.
pub(super) fn confirmed_sinks(graph: &JobGraph) -> BTreeSet<String> {
    graph
        .operators
        .iter()
        .filter(|o| o.spec.descriptor.confirmation.is_some())
        .flat_map(|o| (0..o.spec.parallelism).map(move |s| participant_name(o.spec.id, s)))
        .collect()
}

pub(super) fn compare(bundle: &Bundle, e: &mut Evidence) {
    let mut found = Vec::new();
    family(e, &mut found);
    markers_agree(e, &mut found);
    restore_records_agree(e, &mut found);
    commit_evidence_agrees(e, &mut found);
    if let Err(why) = bundle.job_graph() {
        if matches!(why, crate::graph::GraphProblem::Broken(_)) {
            found.push((Fact::Marker, format!("the job graph does not hold: {why}")));
        }
    }
    for (fact, detail) in found {
        e.find(fact, detail);
    }
}

/// The family from every source that says it; sources that disagree are a finding.
fn family(e: &mut Evidence, found: &mut Vec<(Fact, String)>) {
    if let Some(m) = &e.job_manifest {
        if m.job != e.job.to_string() {
            found.push((Fact::Marker, format!("the job manifest is of job {}; the bundle is of job {}", m.job, e.job)));
        }
    }
    let mut said: Vec<(String, bool)> = Vec::new();
    for (c, g) in &e.graphs {
        said.push((format!("the job graph COMPLETED-{c} names"), g.requires_commit_confirmation()));
    }
    if let Some(m) = &e.job_manifest {
        said.push(("the job manifest".into(), m.requires_commit_confirmation));
        if let Ok(g) = clink_engine::job::parse_job(&m.graph.to_string()) {
            said.push(("the job manifest's graph".into(), g.requires_commit_confirmation()));
        }
    }
    for ((op, s, n), doc) in &e.sink_evidence {
        if let Some(f) = doc.sink.get("family").and_then(|f| f.as_str()) {
            said.push((
                format!("the sink evidence of operator {op} subtask {s} epoch {n} (family {f})"),
                f == "confirmed",
            ));
        }
    }
    e.family = said.first().map(|(_, v)| *v);
    if let Some((first, a)) = said.first() {
        if let Some((other, b)) = said.iter().find(|(_, b)| b != a) {
            found.push((
                Fact::Restore,
                format!("the job's sink family: {first} says commit confirmation is {a}, {other} says {b}"),
            ));
            e.family = None;
        }
    }
    // Evidence the job's family cannot have.
    if e.family == Some(false) {
        let stray: Vec<String> = e
            .confirmed
            .keys()
            .map(|c| format!("CONFIRMED-{c}"))
            .chain(e.receipts.keys().map(|(p, c)| format!("{p}'s receipt of checkpoint {c}")))
            .chain(e.unresolved.keys().map(|(p, c)| format!("{p}'s unresolved marker of checkpoint {c}")))
            .collect();
        for s in stray {
            found.push((
                Fact::Restore,
                format!("{s}: the job's sinks need no commit confirmation, so no run of it writes one"),
            ));
        }
    }
}

/// Each COMPLETED marker against itself, its graph and the other markers.
fn markers_agree(e: &Evidence, found: &mut Vec<(Fact, String)>) {
    // A generation changes only at a restore at another parallelism.
    for problem in super::rescale::generation_problems(e) {
        found.push((Fact::Participants, problem));
    }
    for (c, m) in &e.completed {
        let mut seen = BTreeSet::new();
        for p in &m.participants {
            if !seen.insert(p) {
                found.push((Fact::Participants, format!("COMPLETED-{c} lists {p} twice: a participant acks once")));
            }
        }
        if let Some(g) = e.graphs.get(c) {
            if g.job_id != e.job {
                found.push((
                    Fact::Marker,
                    format!("COMPLETED-{c} names the graph of job {}, the bundle is of job {}", g.job_id, e.job),
                ));
            }
            let deployed = deployed(g);
            for missing in deployed.difference(&seen.iter().map(|p| (*p).clone()).collect()) {
                found.push((
                    Fact::Participants,
                    format!("COMPLETED-{c}: its job graph deploys {missing}, the marker records no ack of it"),
                ));
            }
            for extra in seen.iter().filter(|p| !deployed.contains(**p)) {
                found.push((
                    Fact::Participants,
                    format!("COMPLETED-{c} records {extra}, which its job graph deploys no such subtask"),
                ));
            }
        }
    }
}

/// The RESTORED and IMPORTED records against the markers.
fn restore_records_agree(e: &mut Evidence, found: &mut Vec<(Fact, String)>) {
    if let Some(r) = &e.restored {
        e.restores.insert((r.restored_from, r.next));
        // The confirmed family restores from a confirmed checkpoint only.
        let imported = e.imported.as_ref().map(|i| i.checkpoint);
        if e.family == Some(true)
            && r.restored_from > 0
            && !e.confirmed.contains_key(&r.restored_from)
            && imported != Some(r.restored_from)
        {
            found.push((Fact::Restore, format!("the RESTORED record says checkpoint {} was restored from; the job's sinks confirm their commits, and the bundle holds no CONFIRMED-{}", r.restored_from, r.restored_from)));
        }
        if r.restored_from > 0 && !e.completed.contains_key(&r.restored_from) {
            found.push((Fact::Restore, format!("the RESTORED record says checkpoint {} was restored from; the bundle holds no COMPLETED marker of it", r.restored_from)));
        }
    }
    if let Some(i) = &e.imported {
        // An import brings another lineage's checkpoint into a fresh directory.
        if let (Some(from), Some(lineage)) = (&i.from, &e.lineage) {
            if &from.lineage == lineage {
                found.push((Fact::Restore, format!("the IMPORTED record says checkpoint {}'s files are this lineage's own ({from}): an import brings another lineage's", i.checkpoint)));
            }
        }
        match e.completed.get(&i.checkpoint) {
            None => found.push((
                Fact::Restore,
                format!(
                    "the IMPORTED record names checkpoint {}, which no COMPLETED marker of the bundle records",
                    i.checkpoint
                ),
            )),
            Some(m) if m.run != i.from => found.push((
                Fact::Restore,
                format!(
                    "the IMPORTED record says checkpoint {}'s files are {}'s; its COMPLETED marker names {}",
                    i.checkpoint,
                    super::show_run(i.from.as_ref()),
                    super::show_run(m.run.as_ref())
                ),
            )),
            Some(_) => {}
        }
    }
}

/// CONFIRMED markers and receipts against the markers, the graphs and the
/// sinks' snapshots and evidence.
fn commit_evidence_agrees(e: &Evidence, found: &mut Vec<(Fact, String)>) {
    for (c, m) in &e.confirmed {
        let Some(completed) = e.completed.get(c) else {
            found.push((
                Fact::Restore,
                format!("CONFIRMED-{c} confirms a checkpoint no COMPLETED marker of the bundle records"),
            ));
            continue;
        };
        if m.graph != completed.graph {
            found.push((Fact::Restore, format!("CONFIRMED-{c} names another job graph than COMPLETED-{c}")));
        }
        let mut seen = BTreeSet::new();
        for s in &m.sinks {
            if !seen.insert(s.clone()) {
                found.push((Fact::Restore, format!("CONFIRMED-{c} lists {s} twice")));
            }
            if !completed.participants.contains(s) {
                found.push((Fact::Restore, format!("CONFIRMED-{c} names {s}, which COMPLETED-{c} does not")));
            }
        }
        if let Some(g) = e.graphs.get(c) {
            let sinks = confirmed_sinks(g);
            if seen != sinks {
                found.push((Fact::Restore, format!("CONFIRMED-{c} names sinks {seen:?}; the job graph's commit-confirmed sink subtasks are {sinks:?}")));
            }
        }
        match m.confirmed_by.as_str() {
            "import" if e.imported.as_ref().map(|i| i.checkpoint) != Some(*c) => found.push((
                Fact::Restore,
                format!(
                    "CONFIRMED-{c} says a dataset import confirmed it, and the bundle's IMPORTED record names {}",
                    e.imported
                        .as_ref()
                        .map_or("nothing (there is none)".to_string(), |i| format!("checkpoint {}", i.checkpoint))
                ),
            )),
            "import" => {}
            "sinks" | "walk" => {
                for s in &m.sinks {
                    if !e.receipts.contains_key(&(s.clone(), *c)) {
                        found.push((Fact::Restore, format!("CONFIRMED-{c} names {s}, and its receipt of checkpoint {c} is not there to vouch for it")));
                    }
                }
            }
            other => found
                .push((Fact::Restore, format!("CONFIRMED-{c} says it was confirmed by {other:?}: no run confirms so"))),
        }
    }
    let mut ids: BTreeMap<&str, &str> = BTreeMap::new();
    let mut producers: BTreeMap<(&str, u64), i64> = BTreeMap::new();
    for ((p, c), r) in &e.receipts {
        let completing = e.completed.get(c).and_then(|m| m.run.as_ref()).map(|r| r.incarnation);
        let wrote = r.run.as_ref().map(|r| r.incarnation);
        match (r.proven_by.as_str(), completing, wrote) {
            ("sink", Some(a), Some(b)) if a != b => found.push((Fact::Restore, format!("{p}'s receipt of checkpoint {c} says its sink proved the commit, as incarnation {b}; the checkpoint is incarnation {a}'s"))),
            ("sink" | "walk" | "open", _, _) => {}
            (other, _, _) => found.push((Fact::Restore, format!("{p}'s receipt of checkpoint {c} says it was proven by {other:?}: no run proves a commit so"))),
        }
        // One transactional id per sink subtask; one producer per run of it.
        if let Some(id) = ids.insert(p.as_str(), r.handle.transactional_id.as_str()) {
            if id != r.handle.transactional_id {
                found.push((
                    Fact::Restore,
                    format!("{p}'s receipts name transactional ids {id:?} and {:?}", r.handle.transactional_id),
                ));
            }
        }
        if let (Some(run), "sink") = (wrote, r.proven_by.as_str()) {
            if let Some(id) = producers.insert((p.as_str(), run), r.handle.producer_id) {
                if id != r.handle.producer_id {
                    found.push((
                        Fact::Restore,
                        format!("{p}'s receipts of incarnation {run} name producers {id} and {}", r.handle.producer_id),
                    ));
                }
            }
        }
        // A producer's epoch only grows: each run's init fences the one before.
        let earlier = e.receipts.range(..(p.clone(), *c)).rev().find(|((q, _), _)| q == p).map(|(_, r)| r);
        if let Some(before) = earlier.filter(|b| b.proven_by == "sink" && r.proven_by == "sink") {
            let new_run = before.run.as_ref().map(|x| x.incarnation) != wrote;
            let grows =
                if new_run { r.handle.epoch > before.handle.epoch } else { r.handle.epoch >= before.handle.epoch };
            if !grows {
                found.push((
                    Fact::Restore,
                    format!(
                        "{p}'s receipt of checkpoint {c} names producer epoch {}, after {} of an earlier checkpoint{}",
                        r.handle.epoch,
                        before.handle.epoch,
                        if new_run { " by an earlier run (a new run's init raises it)" } else { "" }
                    ),
                ));
            }
        }
        if let Some(g) = e.graphs.get(c) {
            if !confirmed_sinks(g).contains(p) {
                found.push((Fact::Restore, format!("{p}'s receipt of checkpoint {c}: the job graph of checkpoint {c} has no commit-confirmed sink subtask {p}")));
            }
        } else if !e.completed.contains_key(c) {
            found.push((
                Fact::Restore,
                format!("{p}'s receipt of checkpoint {c} names a checkpoint no COMPLETED marker of the bundle records"),
            ));
        }
        let _ = r;
    }
    for (p, c) in e.unresolved.keys() {
        if let Some(g) = e.graphs.get(c) {
            if !confirmed_sinks(g).contains(p) {
                found.push((Fact::Restore, format!("{p}'s unresolved marker of checkpoint {c}: no commit-confirmed sink subtask {p} in the job graph")));
            }
        }
    }
}
