//! Which run wrote each artifact: the lineage every artifact names, the
//! records each run of it left, and the incarnation every artifact names
//! against the runs the other evidence says wrote it.
//!
//! A bundle holds one lineage's evidence. An artifact naming another lineage
//! is another run's file of the same job id (or the checkpoint a dataset
//! import brought in, which the IMPORTED record names): a mix the verifier
//! refuses. Within the lineage, an incarnation must be one a run record
//! vouches for, and it must be the run that the rest of the evidence says
//! wrote the artifact: a checkpoint's sidecars, snapshots and captured epoch
//! are its COMPLETED marker's run's; a run restored from a checkpoint wrote
//! every marker from its `next` on and none before; the job manifest is the
//! newest run's.

use std::collections::BTreeMap;

use clink_engine::checkpoint::lineage::{parse_run_record_bytes, LineageId, RunIdentity, MAX_RUN_RECORD_BYTES};

use super::{show_run, Evidence, Fact, Refused};
use crate::manifest::Bundle;
use crate::paths::ArtifactKind;

/// Reads the LINEAGE record and every run record.
pub(super) fn read(bundle: &Bundle, e: &mut Evidence) {
    for (a, kind) in
        bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::LineageRecord { .. } | ArtifactKind::RunRecord { .. }))
    {
        let bytes = match bundle.read_vouched(&a.path, MAX_RUN_RECORD_BYTES) {
            Ok(bytes) => bytes,
            Err(why) => {
                e.find(Fact::Unread, why.to_string());
                continue;
            }
        };
        match kind {
            ArtifactKind::LineageRecord { .. } => {
                let text = String::from_utf8_lossy(&bytes);
                match LineageId::parse(text.trim_end_matches('\n')) {
                    Some(id) if text.ends_with('\n') && text.matches('\n').count() == 1 => e.lineage = Some(id),
                    _ => e.find(Fact::Unread, format!("{}: {:?} is not a lineage id", a.path, text)),
                }
            }
            ArtifactKind::RunRecord { incarnation, .. } => {
                match parse_run_record_bytes(&bundle.root.join(&a.path), &bytes, e.job, incarnation) {
                    Ok(record) => {
                        e.runs.insert(incarnation, record);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            _ => {}
        }
    }
}

/// Every artifact the model read that names (or, by its version, should
/// name) a run: `(place, run, of the imported checkpoint)`.
fn writers(e: &Evidence) -> Vec<(String, Option<RunIdentity>, bool)> {
    let imported = e.imported.as_ref().map(|i| i.checkpoint);
    let of_import = |c: u64| imported == Some(c);
    let mut out = Vec::new();
    for (c, m) in &e.completed {
        out.push((format!("COMPLETED-{c}"), m.run.clone(), of_import(*c)));
    }
    for (c, m) in &e.confirmed {
        out.push((format!("CONFIRMED-{c}"), m.run.clone(), false));
    }
    for ((p, c), r) in &e.receipts {
        out.push((format!("{p}'s receipt of checkpoint {c}"), r.run.clone(), false));
    }
    for ((p, c), r) in &e.unresolved {
        out.push((format!("{p}'s unresolved marker of checkpoint {c}"), r.run.clone(), false));
    }
    if let Some(r) = &e.restored {
        out.push(("the RESTORED record".into(), r.run.clone(), false));
    }
    if let Some(i) = &e.imported {
        out.push(("the IMPORTED record".into(), i.run.clone(), false));
    }
    for ((g, p, c), m) in &e.sidecars {
        out.push((format!("{p}'s sidecar of checkpoint {c} (v{g})"), m.run.clone(), of_import(*c)));
    }
    for ((g, p, c), s) in &e.snapshots {
        out.push((format!("{p}'s snapshot of checkpoint {c} (v{g})"), s.run.clone(), of_import(*c)));
    }
    for ((op, s), spec) in &e.op_specs {
        out.push((format!("the op.json of operator {op} subtask {s}"), spec.run.clone(), false));
    }
    for ((op, s, n), shape) in &e.captures {
        out.push((format!("the capture of operator {op} subtask {s} epoch {n}"), shape.header.run.clone(), false));
    }
    for ((op, s, n), doc) in &e.sink_evidence {
        out.push((format!("the sink evidence of operator {op} subtask {s} epoch {n}"), doc.run.clone(), false));
    }
    if let Some(m) = &e.job_manifest {
        out.push(("the job manifest".into(), m.run.clone(), false));
    }
    out
}

/// Compares every artifact's writer with the lineage and the runs; a mix of
/// lineages is refused, a wrong incarnation is a finding.
pub(super) fn compare(bundle: &Bundle, e: &mut Evidence) -> Result<(), Refused> {
    let writers = writers(e);
    let named: Vec<&(String, Option<RunIdentity>, bool)> = writers.iter().filter(|w| w.1.is_some()).collect();
    if named.is_empty() && e.lineage.is_none() && e.runs.is_empty() {
        // A bundle of a build before run identities: nothing names a run,
        // so which run wrote what is not established (never assumed).
        e.identified = false;
        return Ok(());
    }
    e.identified = true;
    let lineage = match (&e.lineage, named.first()) {
        (Some(l), _) => l.clone(),
        (None, Some((_, Some(run), _))) => {
            e.find(Fact::Unread, "the bundle holds no LINEAGE record, and its artifacts name runs");
            run.lineage.clone()
        }
        _ => {
            e.find(Fact::Unread, "the bundle holds no LINEAGE record");
            return Ok(());
        }
    };
    let foreign = e.imported.as_ref().and_then(|i| i.from.clone());
    for (place, run, of_import) in &writers {
        let Some(run) = run else {
            e.find(
                Fact::Writer,
                format!(
                    "{place} names no run, where the bundle's other artifacts do: nothing ties it to lineage {lineage}"
                ),
            );
            continue;
        };
        let expected = if *of_import { foreign.as_ref().map(|f| &f.lineage) } else { Some(&lineage) };
        if expected != Some(&run.lineage) {
            return Err(Refused(format!(
                "the bundle mixes evidence of two lineages: {place} was written by {run}; {}",
                match (of_import, &foreign) {
                    (true, Some(f)) => format!("the IMPORTED record says checkpoint's files are {f}'s"),
                    (true, None) => "the IMPORTED record names no run for the imported checkpoint".to_string(),
                    (false, _) => format!("the bundle is of lineage {lineage} (its LINEAGE record and run records)"),
                }
            )));
        }
        if !*of_import && !e.runs.contains_key(&run.incarnation) {
            e.find(
                Fact::Writer,
                format!(
                    "{place} was written by incarnation {}, which no run record of the bundle vouches for",
                    run.incarnation
                ),
            );
        }
    }
    for (n, record) in &e.runs {
        if record.run.lineage != lineage {
            return Err(Refused(format!(
                "the bundle mixes evidence of two lineages: RUN-{n} is of lineage {}, the bundle's LINEAGE record says {lineage}",
                record.run.lineage
            )));
        }
    }
    runs_are_consecutive(e);
    incarnations_agree(bundle, e);
    Ok(())
}

/// Every run since the first that recorded itself left a record.
fn runs_are_consecutive(e: &mut Evidence) {
    let (Some(&first), Some(&last)) = (e.runs.keys().next(), e.runs.keys().next_back()) else {
        e.find(Fact::Unread, "the bundle holds no run record: which run wrote its evidence is not vouched for");
        return;
    };
    for n in first..=last {
        if !e.runs.contains_key(&n) {
            e.find(
                Fact::Unread,
                format!("RUN-{n} is missing: runs {first} and {last} recorded themselves, every run between did too"),
            );
        }
    }
}

/// The incarnation of a COMPLETED marker, where it names one.
fn incarnation_of(e: &Evidence, checkpoint: u64) -> Option<u64> {
    e.completed.get(&checkpoint)?.run.as_ref().map(|r| r.incarnation)
}

/// Each artifact's incarnation against the run the other evidence says wrote it.
fn incarnations_agree(bundle: &Bundle, e: &mut Evidence) {
    let imported = e.imported.as_ref().map(|i| i.checkpoint);
    let mut found = Vec::new();
    // COMPLETED markers: a later checkpoint by the same or a later run.
    let by_checkpoint: BTreeMap<u64, u64> = e
        .completed
        .iter()
        .filter(|(c, _)| Some(**c) != imported)
        .filter_map(|(c, m)| Some((*c, m.run.as_ref()?.incarnation)))
        .collect();
    for (a, b) in by_checkpoint.iter().zip(by_checkpoint.iter().skip(1)) {
        if b.1 < a.1 {
            found.push((Fact::Writer, format!("COMPLETED-{} is incarnation {}'s, COMPLETED-{} incarnation {}'s: a later checkpoint by an earlier run", b.0, b.1, a.0, a.1)));
        }
    }
    // The RESTORED record: the restoring run wrote every marker from `next`
    // on and none below it.
    if let Some(r) = &e.restored {
        if let Some(run) = &r.run {
            for (c, inc) in &by_checkpoint {
                let (ok, side) =
                    if *c >= r.next { (*inc >= run.incarnation, "from") } else { (*inc < run.incarnation, "below") };
                if !ok {
                    found.push((Fact::Writer, format!(
                        "COMPLETED-{c} is incarnation {inc}'s; the RESTORED record says incarnation {} restored and numbered from {}, so checkpoints {side} {} are {} runs'",
                        run.incarnation, r.next, r.next, if side == "from" { "its or later" } else { "earlier" }
                    )));
                }
            }
        }
    }
    // A checkpoint's state is its marker's run's.
    for ((_, p, c), meta) in &e.sidecars {
        if let (Some(inc), Some(run)) = (incarnation_of(e, *c), &meta.run) {
            if Some(*c) != imported && run.incarnation != inc {
                found.push((
                    Fact::State,
                    format!(
                        "{p}'s sidecar of checkpoint {c} is incarnation {}'s; COMPLETED-{c} is incarnation {inc}'s",
                        run.incarnation
                    ),
                ));
            }
        }
    }
    // Commit evidence: by the completing run or a later one (a walk, an open).
    for (what, c, run) in
        e.confirmed.iter().map(|(c, m)| (format!("CONFIRMED-{c}"), *c, m.run.as_ref())).chain(
            e.receipts.iter().map(|((p, c), r)| (format!("{p}'s receipt of checkpoint {c}"), *c, r.run.as_ref())),
        )
    {
        if let (Some(inc), Some(run)) = (incarnation_of(e, c), run) {
            if Some(c) != imported && run.incarnation < inc {
                found.push((
                    Fact::Restore,
                    format!(
                        "{what} is incarnation {}'s, before the run that completed checkpoint {c} (incarnation {inc})",
                        run.incarnation
                    ),
                ));
            }
        }
    }
    // A captured epoch is the run's that closed it: the completing run's,
    // or (not completed) a run on the side of the restore its epoch is.
    for ((op, s, n), shape) in &e.captures {
        let Some(run) = &shape.header.run else { continue };
        let place = format!("the capture of operator {op} subtask {s} epoch {n}");
        if let Some(inc) = incarnation_of(e, *n) {
            if run.incarnation != inc {
                found.push((
                    Fact::Writer,
                    format!("{place} is incarnation {}'s; COMPLETED-{n} is incarnation {inc}'s", run.incarnation),
                ));
            }
        } else if let Some(r) = e.restored.as_ref().and_then(|r| Some((r.next, r.run.as_ref()?.incarnation))) {
            if (*n >= r.0) != (run.incarnation >= r.1) {
                found.push((
                    Fact::Writer,
                    format!(
                        "{place} is incarnation {}'s; the RESTORED record says incarnation {} numbered from {}",
                        run.incarnation, r.1, r.0
                    ),
                ));
            }
        }
        if let Some(doc) = e.sink_evidence.get(&(*op, *s, *n)) {
            if doc.run.as_ref() != Some(run) {
                found.push((
                    Fact::Writer,
                    format!(
                        "the sink evidence of operator {op} subtask {s} epoch {n} is {}'s, its capture {run}'s",
                        show_run(doc.run.as_ref())
                    ),
                ));
            }
        }
    }
    // An op.json is rewritten at every deploy: the newest run that captured there, or later.
    for ((op, s), spec) in &e.op_specs {
        let Some(run) = &spec.run else { continue };
        let newest = e
            .captures
            .iter()
            .filter(|((o, t, _), _)| o == op && t == s)
            .filter_map(|(_, c)| Some(c.header.run.as_ref()?.incarnation))
            .max();
        if newest.is_some_and(|n| run.incarnation < n) {
            found.push((Fact::Writer, format!("the op.json of operator {op} subtask {s} is incarnation {}'s, older than a capture beside it (incarnation {})", run.incarnation, newest.unwrap_or_default())));
        }
    }
    // The job manifest is the running (newest) run's.
    if let (Some(run), Some(newest)) = (e.job_manifest.as_ref().and_then(|m| m.run.as_ref()), e.newest_run()) {
        if run.incarnation != newest {
            found.push((
                Fact::Writer,
                format!(
                    "the job manifest was published by incarnation {}; the newest run of the bundle is {newest}",
                    run.incarnation
                ),
            ));
        }
    }
    let _ = bundle;
    for (fact, detail) in found {
        e.find(fact, detail);
    }
}
