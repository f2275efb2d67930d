//! One reconciliation (and, with a reference, one audit), from the bundle's
//! integrity to the verdict.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clink_bundle::Bundle;
use clink_connectors::clickhouse::destination::{DescribeError, Destination};
use clink_connectors::clickhouse::types::ChType;
use clink_connectors::clickhouse::{Connection, Endpoint};
use clink_connectors::Known;
use clink_verify::{CheckResult, Status};
use serde_json::{json, Value as Json};
use thiserror::Error;

use crate::artifact::{parse_artifact, Artifact};
use crate::cells::{self, CellKind};
use crate::compare::{compare, explain_duplicates, Comparison, Key, Keyed, Row};
use crate::read::{by_key, Bounds, Mutation, ReadColumn, ReadFailure, Reader};
use crate::report::{conclude, Findings, Observation, Report, REPORT_FORMAT, REPORT_VERSION};
use crate::scope::{Scope, ScopeError, ScopeKind, ScopeRequest, Start};
use crate::window;

/// A request the bundle, the destination or the artifact does not fit (exit 2).
#[derive(Debug, Error)]
#[error("{0}")]
pub struct Refusal(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Only the rows of the selected keys are read.
    SelectedKeys,
    /// The whole table is read and must hold exactly the expected rows.
    CompleteTable,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub checkpoint: u64,
    /// The job the operator expects the bundle to be of.
    pub job: Option<u64>,
    pub key: Option<Vec<String>>,
    pub since: Option<u64>,
    pub from_run_start: bool,
    pub endpoint: Endpoint,
    /// The database and table the operator expects (they must be the evidence's).
    pub database: Option<String>,
    pub table: Option<String>,
    pub bounds: Bounds,
    pub reference: Option<PathBuf>,
    pub max_artifact_bytes: u64,
    pub coverage: Coverage,
    /// The operator's declaration that the table holds this one run's writes and nothing else.
    pub table_holds_only_this_run: bool,
    /// How many findings of each relationship the report lists.
    pub list: usize,
    /// Where to write the expected rows (the sink's recorded input over the
    /// scope) as canonical cells, one JSON object per line.
    pub expected_out: Option<PathBuf>,
}

impl Options {
    pub fn new(checkpoint: u64, endpoint: Endpoint) -> Options {
        Options {
            checkpoint,
            job: None,
            key: None,
            since: None,
            from_run_start: false,
            endpoint,
            database: None,
            table: None,
            bounds: Bounds::default(),
            reference: None,
            max_artifact_bytes: 1 << 30,
            coverage: Coverage::SelectedKeys,
            table_holds_only_this_run: false,
            list: 20,
            expected_out: None,
        }
    }
}

/// What a reconciliation tells a watcher while it reads.
pub trait ReconcileProgress {
    /// A read of the selected keys finished (`read` of 2); the next waits `settle_ms`.
    fn read_done(&mut self, _read: usize, _keys: usize, _settle_ms: u64) {}
}

/// Tells nothing.
pub struct Quiet;

impl ReconcileProgress for Quiet {}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A check's result when what it needs did not get that far.
fn behind(name: &'static str, status: Status, why: &str) -> CheckResult {
    CheckResult::new(name, status, why.to_string())
}

/// Reconciles (and audits) one completed checkpoint's scope with its destination.
pub fn reconcile(bundle: &Bundle, options: &Options, progress: &mut dyn ReconcileProgress) -> Result<Report, Refusal> {
    let started = Instant::now();
    let mut observation = Observation { started_at_ms: now_ms(), ..Observation::default() };
    let mut run = Run { options, checks: Vec::new(), findings: Vec::new(), report_extra: Extra::default() };

    // The bundle's integrity: when it fails, nothing else is read.
    let integrity = clink_verify::integrity_checks(bundle);
    let intact = integrity.iter().all(|c| c.status != Status::Failed);
    run.checks.extend(integrity);
    if let Some(job) = options.job {
        if job != bundle.job_id() {
            return Err(Refusal(format!("--job {job}: the bundle is of job {}", bundle.job_id())));
        }
    }
    if !intact {
        let why = "a bundle.* check failed: nothing else in the bundle is read";
        for name in ["reconcile.scope", "reconcile.destination", "reconcile.rows"] {
            run.checks.push(behind(name, Status::Unavailable, why));
        }
        return Ok(run.finish(bundle, observation, started, Json::Null));
    }

    // The scope, from the bundle alone.
    if options.coverage == Coverage::CompleteTable && options.since.is_some() {
        return Err(Refusal(
            "--coverage=complete-table is refused for an increment (--since): its scope does not span the run".into(),
        ));
    }
    let graph = bundle.job_graph().map_err(|e| Refusal(format!("the bundle names no usable job graph: {e}")))?.graph;
    let shape = crate::shape::shape(&graph);
    let windowed = shape.as_ref().is_ok_and(|s| s.windowed().is_some());
    if options.since.is_some() && !windowed {
        return Err(Refusal(
            "--since is for windowed jobs: a record-wise scope is one interval (or --from-run-start)".into(),
        ));
    }
    let kind = match options.since {
        Some(base) => ScopeKind::Increment { base },
        None if options.from_run_start
            || options.coverage == Coverage::CompleteTable
            || (windowed && options.reference.is_some()) =>
        {
            ScopeKind::Lineage
        }
        None => ScopeKind::Interval,
    };
    let scope = match Scope::compute(bundle, ScopeRequest { checkpoint: options.checkpoint, kind }) {
        Ok(s) => s,
        Err(ScopeError::Refused(why)) => return Err(Refusal(why)),
        Err(ScopeError::Unsupported(why)) => {
            for name in ["reconcile.scope", "reconcile.destination", "reconcile.rows"] {
                run.checks.push(behind(
                    name,
                    Status::Unsupported,
                    &format!("the job is not one reconciliation supports: {why}"),
                ));
            }
            return Ok(run.finish(bundle, observation, started, json!({"unsupported": why})));
        }
    };
    let key = scope.key_columns(options.key.as_deref()).map_err(|e| Refusal(e.to_string()))?;
    let scope_doc = scope.document();

    // What the operator expects must be what the evidence names.
    if let Some(db) = &options.database {
        if *db != scope.shape.database {
            return Err(Refusal(format!("--database {db:?}: the evidence names database {:?}", scope.shape.database)));
        }
    }
    if let Some(t) = &options.table {
        if *t != scope.shape.table {
            return Err(Refusal(format!("--table {t:?}: the evidence names table {:?}", scope.shape.table)));
        }
    }

    // The reference artifact, bound to this scope.
    let artifact = match &options.reference {
        None => None,
        Some(_) if scope.shape.unsupported().is_some() => None,
        Some(path) => {
            let bytes = clink_basics::files::read_bounded(path, options.max_artifact_bytes)
                .map_err(|e| Refusal(format!("--reference {}: {e}", path.display())))?;
            let identity_kinds: Vec<CellKind> = key.iter().map(|&i| scope.kinds[i]).collect();
            let identity_kinds = if windowed { identity_kinds } else { Vec::new() };
            let a = parse_artifact(&bytes, &scope_doc, &scope.kinds, &identity_kinds)
                .map_err(|e| Refusal(e.to_string()))?;
            if let ScopeKind::Increment { base } = kind {
                let state_in = a.state_in().and_then(|s| s.get("checkpoint")).and_then(Json::as_u64);
                if state_in != Some(base) {
                    return Err(Refusal(format!(
                        "the reference artifact's state_in is of checkpoint {}, not the increment's base {base}",
                        state_in.map_or("none".into(), |c| c.to_string())
                    )));
                }
            }
            Some(a)
        }
    };

    // reconcile.scope
    let expected_rows = scope.expected_rows();
    if let Some(path) = &options.expected_out {
        write_expected(path, &scope, &expected_rows)
            .map_err(|e| Refusal(format!("--expected-out {}: {e}", path.display())))?;
    }
    let key_kinds: Vec<CellKind> = key.iter().map(|&i| scope.kinds[i]).collect();
    let scope_check = scope_check(&scope, &expected_rows, &key, &key_kinds);
    let scope_ok = scope_check.status == Status::Passed;
    run.checks.push(scope_check);
    run.report_extra.scope = scope_summary(&scope, &scope_doc, &expected_rows);

    // The destination: connect, describe, the identity.
    let recorded = scope.destination.clone();
    let conn = Connection::open(&options.endpoint).map_err(|e| Refusal(format!("--host: {e}")))?;
    let mut reader = Reader {
        conn: &conn,
        bounds: options.bounds,
        database: scope.shape.database.clone(),
        table: scope.shape.table.clone(),
        statements: 0,
    };
    observation.server_time_before_s = reader.server_time().ok();
    let observed = match reader.describe() {
        Ok(d) => Some(d),
        Err(DescribeError::NoSuchTable { url, database, table }) => {
            return Err(Refusal(format!(
                "the server at {url} has no table {database}.{table}: it is not the destination the evidence names"
            )))
        }
        Err(e) => {
            run.report_extra.destination =
                json!({"recorded": recorded, "observed": Json::Null, "error": e.to_string()});
            run.checks.push(behind(
                "reconcile.destination",
                Status::Unavailable,
                &format!("the destination could not be described: {e}"),
            ));
            run.checks.push(behind("reconcile.rows", Status::Unavailable, "the destination could not be read"));
            run.reference_unavailable(&scope, artifact.as_ref(), "the destination could not be read");
            return Ok(run.finish(bundle, observation, started, scope_doc));
        }
    };
    let identity = match (&recorded, &observed) {
        (Some(r), Some(o)) => identify(r, o).map_err(Refusal)?,
        _ => "the evidence records no destination".to_string(),
    };
    run.report_extra.destination = json!({
        "recorded": recorded,
        "observed": observed,
        "identity": identity,
        "observed_table": format!("{}.{} at {}", scope.shape.database, scope.shape.table, conn.url()),
    });
    let (destination_check, columns) = destination_check(&scope, recorded.as_ref(), observed.as_ref(), &identity);
    let destination_ok = destination_check.status == Status::Passed;
    run.checks.push(destination_check);

    // The reads.
    let reference_usable = artifact.as_ref().is_some_and(|a| a.complete);
    let left_out: BTreeSet<Key> = artifact.iter().flat_map(|a| a.left_out.iter().map(|w| w.identity.clone())).collect();
    let expected = by_key(expected_rows.clone(), &key);
    let reference_rows: Vec<Row> = artifact.as_ref().map(|a| a.rows.clone()).unwrap_or_default();
    let reference = by_key(reference_rows.clone(), &key);
    let mut keys: BTreeSet<Key> = expected.keys().cloned().collect();
    if reference_usable {
        keys.extend(reference.keys().cloned());
    }
    let readable = scope_ok && destination_ok;
    let reads = if readable { Some(read_twice(&mut reader, &columns, &key, &keys, progress)) } else { None };
    let parts_and_whole = if readable && options.coverage == Coverage::CompleteTable {
        Some(read_whole(&mut reader, &columns))
    } else {
        None
    };
    observation.server_time_after_s = reader.server_time().ok();

    // reconcile.rows: the sink's input against the destination, over its own keys.
    let own_keys: BTreeSet<Key> = expected.keys().cloned().collect();
    let mut delivery: Option<Comparison> = None;
    let rows_check = match (&reads, readable) {
        (_, false) => behind(
            "reconcile.rows",
            Status::Unavailable,
            if scope_ok {
                "reconcile.destination did not pass: the rows are not compared"
            } else {
                "reconcile.scope did not pass: the rows are not compared"
            },
        ),
        (None, true) => behind("reconcile.rows", Status::Unavailable, "the destination was not read"),
        (Some(reads), true) => {
            let r = rows_check(&scope, reads, &expected, &own_keys, options);
            delivery = r.1;
            r.0
        }
    };
    run.checks.push(rows_check);
    if let Some(c) = &delivery {
        run.findings.push(findings("delivery", "the sink's recorded input against the destination", c, options.list));
    }
    if let Some(reads) = &reads {
        run.report_extra.mutations = json!({"before": reads.mutations_before, "after": reads.mutations_after});
    }

    // The reference audit.
    if options.reference.is_some() {
        if let Some(why) = scope.shape.unsupported() {
            for name in reference_checks(windowed) {
                run.checks.push(behind(
                    name,
                    Status::Unsupported,
                    &format!("the reference audit does not support this job: {why}"),
                ));
            }
        } else if let Some(a) = &artifact {
            run.reference(&scope, &scope_doc, a, &expected, &reference, &left_out, reads.as_ref(), &key);
        }
    }
    if options.coverage == Coverage::CompleteTable {
        let expected_for_coverage: Vec<Row> =
            if reference_usable { reference_rows.clone() } else { expected_rows.clone() };
        let basis = if reference_usable { "the reference's rows" } else { "the sink's recorded input" };
        let coverage = coverage_check(
            &scope,
            options,
            reads.as_ref(),
            parts_and_whole.as_ref(),
            &expected_for_coverage,
            basis,
            &key,
            &left_out,
            reference_usable || artifact.is_none(),
        );
        if let Some(c) = coverage.1 {
            run.findings.push(findings("coverage", "the whole table against the expected rows", &c, options.list));
        }
        run.checks.push(coverage.0);
    }
    run.report_extra.coverage = json!({
        "mode": match options.coverage { Coverage::SelectedKeys => "selected-keys", Coverage::CompleteTable => "complete-table" },
        "keys_selected": keys.len(),
        "statement": match options.coverage {
            Coverage::SelectedKeys => format!("for the {} selected keys; the rest of the table is not established", keys.len()),
            Coverage::CompleteTable => "the whole table, under the assumptions listed".to_string(),
        },
    });
    run.report_extra.method = json!({
        "key": key.iter().map(|&i| scope.shape.columns[i].name.clone()).collect::<Vec<_>>(),
        "keys_selected": keys.len(),
        "reads": 2,
        "bounds": options.bounds,
        "statements": reader.statements,
        "comparison": "whole rows as multisets, key by key, under clink-canonical-cells-v1",
        "settings": crate::read::read_settings(&options.bounds, options.bounds.max_rows_per_query).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
    });
    if let Some(a) = &artifact {
        run.report_extra.reference = json!({
            "verified": ["the binding to the scope (scope_sha256)", "the header, row and window hashes", "every cell's canonical form"],
            "recorded": {"implementation": a.implementation(), "end": a.end.get("recorded"), "run_start_offsets": a.header.get("run_start_offsets")},
            "writer_checks": a.end.get("verified"),
            "complete": a.complete,
            "incomplete_reason": a.incomplete_reason,
            "header_sha256": a.header_sha256,
            "state_in": a.state_in(),
            "state_out": a.state_out(),
            "rows": a.rows.len(),
            "windows_left_out": a.left_out.len(),
        });
    }
    Ok(run.finish(bundle, observation, started, scope_doc))
}

#[derive(Default)]
struct Extra {
    scope: Json,
    destination: Json,
    method: Json,
    mutations: Json,
    reference: Json,
    coverage: Json,
}

struct Run<'a> {
    options: &'a Options,
    checks: Vec<CheckResult>,
    findings: Vec<Findings>,
    report_extra: Extra,
}

fn reference_checks(windowed: bool) -> Vec<&'static str> {
    let mut names = vec!["reference.scope", "reference.capture", "reference.destination"];
    if windowed {
        names.extend(["reference.semantics", "reference.watermark", "reference.finality"]);
    }
    names
}

impl Run<'_> {
    fn reference_unavailable(&mut self, scope: &Scope, artifact: Option<&Artifact>, why: &str) {
        if artifact.is_some() {
            for name in reference_checks(scope.shape.windowed().is_some()) {
                self.checks.push(behind(name, Status::Unavailable, why));
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn reference(
        &mut self,
        scope: &Scope,
        scope_doc: &Json,
        a: &Artifact,
        expected: &Keyed,
        reference: &Keyed,
        left_out: &BTreeSet<Key>,
        reads: Option<&Reads>,
        key: &[usize],
    ) {
        let windowed = scope.shape.windowed();
        if !a.complete {
            let why = format!(
                "the reference is incomplete ({}): it is bound to the scope and never compared",
                a.incomplete_reason.clone().unwrap_or_default()
            );
            self.checks.push(behind("reference.scope", Status::Unavailable, &why));
            self.checks.push(behind("reference.capture", Status::Unavailable, &why));
            self.checks.push(behind("reference.destination", Status::Unavailable, &why));
            if let Some(_rules) = windowed {
                self.checks.push(window::semantics(scope_doc, a));
                self.checks.push(behind("reference.watermark", Status::Unavailable, &why));
                self.checks.push(behind("reference.finality", Status::Unavailable, &why));
            }
            return;
        }
        self.checks.push(
            CheckResult::new(
                "reference.scope",
                Status::Passed,
                "the artifact is bound to the audit's own scope, whole by its hashes, its cells canonical",
            )
            .evidence([
                format!("scope_sha256 {}", scope_doc.get("scope_sha256").and_then(Json::as_str).unwrap_or_default()),
                format!("implementation {}", a.implementation()),
            ]),
        );
        // Windows the reference leaves out are kept out of every comparison with it.
        let without = |k: &Keyed| -> Keyed {
            k.iter().filter(|(key, _)| !left_out.contains(*key)).map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let captured = without(expected);
        let reference = without(reference);
        let union: BTreeSet<Key> = captured.keys().chain(reference.keys()).cloned().collect();
        let mut transformation = compare(&reference, &captured, &union);
        explain_duplicates(&mut transformation, &duplicate_sources(scope));
        let check = if transformation.equal() {
            CheckResult::new(
                "reference.capture",
                Status::Passed,
                "the sink received exactly the reference's rows, each once and value for value",
            )
            .evidence([transformation.summary()])
        } else if scope.expected_rows().is_empty() && reference.is_empty() {
            CheckResult::new(
                "reference.capture",
                Status::Unavailable,
                "neither side holds a row: nothing is established",
            )
        } else {
            CheckResult::new(
                "reference.capture",
                Status::Failed,
                format!(
                    "the job computed other rows than the reference, before any write: {}",
                    transformation.summary()
                ),
            )
            .details(transformation.findings.iter().take(self.options.list).map(|f| f.describe()))
            .next("the transformation: compare the job's logic with its specification")
        };
        self.checks.push(check);
        self.findings.push(findings(
            "transformation",
            "the reference against the sink's recorded input",
            &transformation,
            self.options.list,
        ));
        // The reference against the destination, over the union of keys.
        let check = match reads {
            None => behind("reference.destination", Status::Unavailable, "the destination was not read"),
            Some(r) => match (&r.failure, &r.unstable) {
                (Some(f), _) => {
                    behind("reference.destination", Status::Unavailable, &format!("a read did not complete: {f}"))
                }
                (_, Some(why)) => behind("reference.destination", Status::Unavailable, why),
                (None, None) => {
                    let observed = without(&by_key(r.first.clone(), key));
                    let mut c = compare(&reference, &observed, &union);
                    explain_duplicates(&mut c, &duplicate_sources(scope));
                    let check = if c.equal() {
                        CheckResult::new(
                            "reference.destination",
                            Status::Passed,
                            "the destination holds exactly the reference's rows for the keys read",
                        )
                        .evidence([c.summary()])
                    } else {
                        CheckResult::new(
                            "reference.destination",
                            Status::Failed,
                            format!("the destination does not hold what the reference computes: {}", c.summary()),
                        )
                        .details(c.findings.iter().take(self.options.list).map(|f| f.describe()))
                    };
                    self.findings.push(findings(
                        "reference-destination",
                        "the reference against the destination",
                        &c,
                        self.options.list,
                    ));
                    check
                }
            },
        };
        self.checks.push(check);
        if let Some(rules) = windowed {
            let end_at = scope.shape.columns.iter().position(|c| c.name == "window_end").unwrap_or(usize::MAX);
            self.checks.push(window::semantics(scope_doc, a));
            self.checks.push(window::watermark(scope, a, end_at, rules.allowed_lateness_ms));
            self.checks.push(window::finality(scope, a, end_at, rules.allowed_lateness_ms));
        }
    }

    fn finish(mut self, bundle: &Bundle, mut observation: Observation, started: Instant, scope_doc: Json) -> Report {
        observation.finished_at_ms = now_ms();
        observation.elapsed_ms = started.elapsed().as_millis() as u64;
        let result = conclude(&self.checks);
        let mut assumptions = vec![
            "the connection named is to the server the evidence names (its identity is checked as the report says)"
                .to_string(),
            "rows of keys not selected are not read (unless --coverage=complete-table)".to_string(),
        ];
        if self.options.table_holds_only_this_run {
            assumptions
                .push("the operator declares the table holds this one bounded run's writes and nothing else".into());
        }
        let mut scope = self.report_extra.scope;
        if let Json::Object(m) = &mut scope {
            m.insert("document".into(), scope_doc);
        }
        let root = &bundle.root;
        let prefix = format!("{}/", root.display());
        for c in &mut self.checks {
            c.reason = c.reason.replace(&prefix, "");
            c.details.iter_mut().for_each(|d| *d = d.replace(&prefix, ""));
        }
        Report {
            format: REPORT_FORMAT,
            version: REPORT_VERSION,
            reconciler: format!("clink {}", clink_engine::defects::build_description()),
            bundle: root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            job: bundle.manifest.job.id.clone(),
            checkpoint: self.options.checkpoint,
            observation,
            scope,
            destination: self.report_extra.destination,
            method: self.report_extra.method,
            assumptions,
            mutations: self.report_extra.mutations,
            reference: self.report_extra.reference,
            coverage: self.report_extra.coverage,
            checks: self.checks,
            findings: self.findings,
            exit_code: result.exit_code(),
            result,
        }
    }
}

/// The expected rows as canonical cells, one JSON object per line, written
/// beside the path and renamed into place.
fn write_expected(path: &std::path::Path, scope: &Scope, rows: &[Row]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".clink-expected-").tempfile_in(&dir)?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        let names: Vec<&str> = scope.shape.columns.iter().map(|c| c.name.as_str()).collect();
        writeln!(
            w,
            "{}",
            json!({"type": "columns", "columns": names, "cells": scope.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(), "semantics": cells::SEMANTICS, "scope_sha256": scope.document().get("scope_sha256")})
        )?;
        for row in rows {
            writeln!(w, "{}", json!({"type": "row", "cells": cells::row_json(row)}))?;
        }
        w.flush()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn findings(relationship: &'static str, compares: &'static str, c: &Comparison, list: usize) -> Findings {
    Findings {
        relationship,
        compares,
        summary: c.summary(),
        count: c.findings.len(),
        first: c.findings.iter().take(list).map(|f| f.describe()).collect(),
    }
}

/// What can explain a duplicate in the scope: the rows a run discarded by a
/// restore the scope passes had sent, and the intervals whose resend may
/// have landed twice.
fn duplicate_sources(scope: &Scope) -> Vec<(String, BTreeMap<Row, usize>)> {
    let mut sources = Vec::new();
    for d in &scope.discarded {
        let mut rows: BTreeMap<Row, usize> = BTreeMap::new();
        for s in &d.subtasks {
            let sent = s.rows.as_ref().or(s.rows_without_evidence.as_ref().map(|(r, _)| r));
            for r in sent.into_iter().flatten() {
                *rows.entry(r.clone()).or_default() += 1;
            }
        }
        let restore = scope
            .crossings
            .iter()
            .find(|c| c.restored_from < d.epoch && d.epoch < c.first_epoch)
            .map_or("a restore".to_string(), |c| format!("the restore to checkpoint {}", c.restored_from));
        sources.push((format!("{restore}: interval {} of the run it discarded sent them", d.epoch), rows));
    }
    for interval in scope.intervals.iter().chain(&scope.discarded) {
        for s in interval.subtasks.iter().filter(|s| s.may_land_twice()) {
            let mut rows: BTreeMap<Row, usize> = BTreeMap::new();
            for r in s.rows.iter().flatten() {
                *rows.entry(r.clone()).or_default() += 1;
            }
            sources.push((
                format!("the INSERT of interval {} (sink subtask {}), resent in doubt: its ledger says it may have landed twice", interval.epoch, s.subtask),
                rows,
            ));
        }
    }
    if scope
        .crossings
        .iter()
        .any(|c| !scope.discarded.iter().any(|d| c.restored_from < d.epoch && d.epoch < c.first_epoch))
        && !scope.crossings.is_empty()
    {
        // A restore whose discarded intervals the bundle does not hold: say so, without counting.
        for c in &scope.crossings {
            sources.push((
                format!("the restore to checkpoint {} (the run it discarded is not in the bundle, so its rows are not counted)", c.restored_from),
                BTreeMap::new(),
            ));
        }
    }
    sources
}

fn scope_summary(scope: &Scope, doc: &Json, expected: &[Row]) -> Json {
    let start = match scope.start {
        Start::RunStart => "the run's start (no state)".to_string(),
        Start::Checkpoint(c) => format!("checkpoint {c}"),
    };
    let intervals: Vec<Json> = scope
        .intervals
        .iter()
        .map(|i| {
            json!({
                "epoch": i.epoch,
                "previous_barrier": i.previous_barrier,
                "rows": i.rows(),
                "watermark": i.recorded_watermark().map(crate::scope::watermark_json),
                "subtasks": i.subtasks.iter().map(|s| json!({
                    "subtask": s.subtask,
                    "rows": s.rows.as_ref().map(Vec::len),
                    "inserts": s.inserts,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let same_log = doc.pointer("/sources/0/same_log").cloned().unwrap_or(Json::Null);
    let log_note = match same_log {
        Json::Bool(false) => "the two ends name different logs (the topic was deleted and created again between them): the offsets are not a range of one log; the verdict compares the destination with the sink's own record and does not change",
        Json::Bool(true) => "both ends name the same log",
        _ => "the scope starts at the run's start, whose log the checkpoints do not record",
    };
    json!({
        "summary": format!(
            "checkpoint {} back to {start}: {} intervals, {} rows{}",
            scope.request.checkpoint,
            scope.intervals.len(),
            expected.len(),
            if scope.crossings.is_empty() { String::new() } else { format!(", through {} restores", scope.crossings.len()) }
        ),
        "kind": match scope.request.kind { ScopeKind::Interval => "interval".to_string(), ScopeKind::Lineage => "lineage".to_string(), ScopeKind::Increment { base } => format!("increment since {base}") },
        "intervals": intervals,
        "discarded_intervals": scope.discarded.iter().map(|d| d.epoch).collect::<Vec<_>>(),
        "log": log_note,
        "problems": scope.problems,
    })
}

fn scope_check(scope: &Scope, expected: &[Row], key: &[usize], key_kinds: &[CellKind]) -> CheckResult {
    let name = "reconcile.scope";
    let evidence = vec![format!(
        "{} intervals ({}), {} rows of the sink's recorded input",
        scope.intervals.len(),
        scope.intervals.iter().map(|i| i.epoch.to_string()).collect::<Vec<_>>().join(", "),
        expected.len()
    )];
    if !scope.whole() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the sink's evidence for the scope is not in the bundle whole",
        )
        .evidence(evidence)
        .details(scope.problems.iter().take(20).cloned())
        .next("collect with --include-state --include-captures (and --epochs reaching back over the scope)");
    }
    if let Some((i, kind)) = key.iter().zip(key_kinds).find(|(_, k)| !k.can_key()) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!(
                "key column {:?} is a {kind} column; a key must be integer or string",
                scope.shape.columns[*i].name
            ),
        );
    }
    if expected.is_empty() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the scope's intervals held no rows, which establishes nothing",
        )
        .evidence(evidence)
        .next("reconcile a checkpoint whose intervals wrote rows");
    }
    let grouped = by_key(expected.to_vec(), key);
    if let Some((k, rows)) = grouped.iter().find(|(_, rows)| rows.len() > 1) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!(
                "the key does not identify one row of the scope: key {} has {} rows",
                cells::show_row(k),
                rows.len()
            ),
        )
        .evidence(evidence)
        .next("name the columns that identify one row with --key");
    }
    if let Some(k) = grouped.keys().find(|k| k.iter().any(Option::is_none)) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!("key {} holds a NULL, which selects nothing", cells::show_row(k)),
        );
    }
    CheckResult::new(
        name,
        Status::Passed,
        "the sink's input for the scope is in the bundle whole, and the key identifies one row of it",
    )
    .evidence(evidence)
}

/// Whether the observed table is the one the evidence names: UUIDs where
/// the server has them, otherwise what it has. A mismatch refuses the run.
fn identify(recorded: &Destination, observed: &Destination) -> Result<String, String> {
    let differs = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        format!("the destination is not the one the evidence names: its {what} was {a:?}, the server now says {b:?}")
    };
    if recorded.database != observed.database || recorded.table != observed.table {
        return Err(differs("table", &(&recorded.database, &recorded.table), &(&observed.database, &observed.table)));
    }
    let mut by = Vec::new();
    for (what, r, o) in [
        ("server UUID", &recorded.server.uuid, &observed.server.uuid),
        ("table UUID", &recorded.table_uuid, &observed.table_uuid),
    ] {
        match (r, o) {
            (Known::Value(a), Known::Value(b)) if a != b => return Err(differs(what, a, b)),
            (Known::Value(_), Known::Value(_)) => by.push(what),
            (Known::Value(a), Known::Unavailable(why)) => {
                return Err(format!("the evidence records the {what} {a:?}, and the server cannot say its own ({why})"))
            }
            _ => {}
        }
    }
    if by.len() == 2 {
        return Ok("by the server's and the table's UUIDs".into());
    }
    // Without UUIDs: where the server keeps the table, when its definition
    // was written, and the server's host.
    let mut fallback = Vec::new();
    for (what, r, o) in [
        ("data path", &recorded.data_path, &observed.data_path),
        ("metadata modification time", &recorded.metadata_modification_time, &observed.metadata_modification_time),
        ("host name", &recorded.server.host_name, &observed.server.host_name),
    ] {
        match (r, o) {
            (Known::Value(a), Known::Value(b)) if a != b => return Err(differs(what, a, b)),
            (Known::Value(_), Known::Value(_)) => fallback.push(what),
            _ => {}
        }
    }
    if fallback.is_empty() && by.is_empty() {
        return Err("neither the evidence nor the server give anything that identifies the table (no UUIDs, no data path): the destination cannot be shown to be the evidence's".into());
    }
    let mut said: Vec<&str> = by;
    said.extend(fallback);
    Ok(format!(
        "by {} (this server has no {}UUIDs; a table dropped and created again within the same second would not be told apart)",
        said.join(", "),
        if recorded.server.uuid.value().is_none() { "server or table " } else { "table " }
    ))
}

fn destination_check(
    scope: &Scope,
    recorded: Option<&Destination>,
    observed: Option<&Destination>,
    identity: &str,
) -> (CheckResult, Vec<ReadColumn>) {
    let name = "reconcile.destination";
    let (Some(recorded), Some(observed)) = (recorded, observed) else {
        return (
            CheckResult::new(name, Status::Unavailable, "the evidence records no destination for the audited interval")
                .next("collect the sink's interval evidence (--include-captures)"),
            Vec::new(),
        );
    };
    let mut problems = Vec::new();
    let mut unsupported = Vec::new();
    if observed.engine != "MergeTree" {
        unsupported
            .push(format!("the table is a {} table; reconciliation supports a plain MergeTree", observed.engine));
    }
    if observed.has_ttl() {
        unsupported.push("the table has a TTL: rows may vanish by themselves".to_string());
    }
    if observed.engine != recorded.engine {
        problems.push(format!("its engine was {}, it is now {}", recorded.engine, observed.engine));
    }
    for other in &scope.destinations {
        if other.table_uuid != recorded.table_uuid
            || other.data_path != recorded.data_path
            || other.database != recorded.database
            || other.table != recorded.table
        {
            problems.push("the scope's intervals record different destinations".to_string());
            break;
        }
    }
    let mut columns = Vec::new();
    for (c, kind) in scope.shape.columns.iter().zip(&scope.kinds) {
        let was = recorded.column(&c.name);
        let is = observed.column(&c.name);
        match (was, is) {
            (_, None) => problems.push(format!("column {:?}, which the sink wrote, is gone", c.name)),
            (Some(w), Some(i)) if w.type_name != i.type_name => {
                problems.push(format!("column {:?} was {}, it is now {}", c.name, w.type_name, i.type_name))
            }
            (None, Some(_)) => problems.push(format!("the evidence does not record column {:?}", c.name)),
            (Some(_), Some(i)) => {
                let table_type = ChType::parse(&i.type_name);
                if !cells::reads_exactly(&table_type, *kind) {
                    unsupported.push(format!(
                        "column {:?} is {}, which does not read back as {kind} exactly",
                        c.name, i.type_name
                    ));
                }
                columns.push(ReadColumn { name: c.name.clone(), table_type, kind: *kind });
            }
        }
    }
    let evidence = vec![
        format!(
            "{}.{}: {} ({}), server {}",
            observed.database,
            observed.table,
            observed.engine,
            observed.engine_full.value().unwrap_or("definition not available"),
            observed.server.version
        ),
        format!("identity {identity}"),
    ];
    let check = if !problems.is_empty() {
        CheckResult::new(
            name,
            Status::Failed,
            format!("the destination is not as the sink wrote it: {}", problems.join("; ")),
        )
        .evidence(evidence)
    } else if !unsupported.is_empty() {
        CheckResult::new(name, Status::Unsupported, unsupported.join("; ")).evidence(evidence)
    } else {
        CheckResult::new(
            name,
            Status::Passed,
            "the destination is the one the evidence names, a plain MergeTree without TTL, with every column the sink wrote as it was",
        )
        .evidence(evidence)
    };
    (check, columns)
}

/// The two reads of the selected keys and what surrounded them.
struct Reads {
    first: Vec<Row>,
    second: Vec<Row>,
    failure: Option<ReadFailure>,
    mutations_before: Vec<Mutation>,
    mutations_after: Vec<Mutation>,
    /// Why the reads cannot decide (a mutation, a key read differently twice).
    unstable: Option<String>,
}

fn read_twice(
    reader: &mut Reader<'_>,
    columns: &[ReadColumn],
    key: &[usize],
    keys: &BTreeSet<Key>,
    progress: &mut dyn ReconcileProgress,
) -> Reads {
    let mut reads = Reads {
        first: Vec::new(),
        second: Vec::new(),
        failure: None,
        mutations_before: Vec::new(),
        mutations_after: Vec::new(),
        unstable: None,
    };
    let keys: Vec<Key> = keys.iter().cloned().collect();
    let settle = reader.bounds.settle_ms;
    let result = (|| -> Result<(), ReadFailure> {
        reads.mutations_before = reader.mutations()?;
        reads.first = reader.rows_of_keys(columns, key, &keys)?;
        progress.read_done(1, keys.len(), settle);
        std::thread::sleep(Duration::from_millis(settle));
        reads.second = reader.rows_of_keys(columns, key, &keys)?;
        progress.read_done(2, keys.len(), 0);
        reads.mutations_after = reader.mutations()?;
        Ok(())
    })();
    if let Err(e) = result {
        reads.failure = Some(e);
        return reads;
    }
    if let Some(m) = reads.mutations_before.iter().chain(&reads.mutations_after).find(|m| !m.done) {
        reads.unstable = Some(format!(
            "a mutation of the table is in progress ({}: {}): its rows may change under the read",
            m.id, m.command
        ));
    } else if reads.mutations_before != reads.mutations_after {
        reads.unstable = Some("a mutation of the table began during the read".into());
    } else {
        let a = by_key(reads.first.clone(), key);
        let b = by_key(reads.second.clone(), key);
        let all: BTreeSet<&Key> = a.keys().chain(b.keys()).collect();
        let empty = Vec::new();
        for k in all {
            let x = clink_basics::multiset::multiset_diff(
                a.get(k).unwrap_or(&empty).iter().cloned(),
                b.get(k).unwrap_or(&empty).iter().cloned(),
            );
            if !x.is_equal() {
                reads.unstable = Some(format!(
                    "key {} read differently twice, {} ms apart: the table is changing",
                    cells::show_row(k),
                    settle
                ));
                break;
            }
        }
    }
    reads
}

/// The table's active parts before, the whole table, the parts after.
struct Whole {
    parts_before: Result<Vec<String>, ReadFailure>,
    rows: Result<Vec<Row>, ReadFailure>,
    parts_after: Result<Vec<String>, ReadFailure>,
}

fn read_whole(reader: &mut Reader<'_>, columns: &[ReadColumn]) -> Whole {
    let parts_before = reader.active_parts();
    let rows = reader.whole_table(columns);
    let parts_after = reader.active_parts();
    Whole { parts_before, rows, parts_after }
}

fn rows_check(
    scope: &Scope,
    reads: &Reads,
    expected: &Keyed,
    keys: &BTreeSet<Key>,
    options: &Options,
) -> (CheckResult, Option<Comparison>) {
    let name = "reconcile.rows";
    if let Some(f) = &reads.failure {
        let why = if f.kind == "bound" {
            format!("a read reached a bound, so nothing is decided on part of an answer: {}", f.message)
        } else {
            format!("a read did not complete: {f}")
        };
        return (
            CheckResult::new(name, Status::Unavailable, why).next(
                "raise --query-timeout-ms or --max-rows-per-query, or lower --keys-per-query, and reconcile again",
            ),
            None,
        );
    }
    if let Some(why) = &reads.unstable {
        return (
            CheckResult::new(name, Status::Unavailable, why.clone()).next("reconcile again once the table is still"),
            None,
        );
    }
    let key: Vec<usize> = scope.key_columns(options.key.as_deref()).unwrap_or_default();
    let observed = by_key(reads.first.clone(), &key);
    let mut c = compare(expected, &observed, keys);
    explain_duplicates(&mut c, &duplicate_sources(scope));
    let evidence = vec![c.summary(), format!("mutations done before the read: {}", reads.mutations_before.len())];
    if c.equal() {
        return (
            CheckResult::new(
                name,
                Status::Passed,
                "the table holds exactly the scope's rows, each once and value for value, and two reads agreed",
            )
            .evidence(evidence),
            Some(c),
        );
    }
    let broken = c.missing + c.changed + c.unexpected;
    let reason = if broken > 0 {
        format!("the table does not hold what the sink received (at least once is broken): {}", c.summary())
    } else {
        format!(
            "the table holds some of the scope's rows more than once ({} copies, {} explained by the evidence): at least once holds, exactly once in the table does not",
            c.duplicated, c.duplicated_explained
        )
    };
    let details: Vec<String> = c.findings.iter().take(options.list).map(|f| f.describe()).collect();
    (
        CheckResult::new(name, Status::Failed, reason)
            .evidence(evidence)
            .details(details)
            .next("the delivery: look at the listed keys in the table and the sink's INSERT ledger"),
        Some(c),
    )
}

#[allow(clippy::too_many_arguments)]
fn coverage_check(
    scope: &Scope,
    options: &Options,
    reads: Option<&Reads>,
    whole: Option<&Whole>,
    expected: &[Row],
    basis: &str,
    key: &[usize],
    left_out: &BTreeSet<Key>,
    basis_usable: bool,
) -> (CheckResult, Option<Comparison>) {
    let name = "destination.coverage";
    let mut unmet = Vec::new();
    if !options.table_holds_only_this_run {
        unmet.push("the operator has not declared that the table holds this one run's writes and nothing else (--assume-table-holds-only-this-run)".to_string());
    }
    if scope.start != Start::RunStart {
        unmet.push("the scope does not reach back to a run that began with no state".to_string());
    }
    if !basis_usable {
        unmet.push("the reference is incomplete".to_string());
    }
    let stopped = scope.final_checkpoint || {
        let whole_after = |i: &crate::scope::Interval| i.subtasks.iter().all(|s| s.rows.is_some());
        let empties = scope.after.iter().filter(|i| whole_after(i) && i.rows() == 0).count();
        empties >= 2 && !scope.after.iter().any(|i| i.rows() > 0 || !whole_after(i))
    };
    if !stopped {
        unmet.push(format!(
            "the bundle does not show the run had stopped writing: checkpoint {} is not its final one, and fewer than two empty intervals of every sink subtask follow it",
            scope.request.checkpoint
        ));
    }
    let Some(whole) = whole else {
        unmet.push("the table was not read".into());
        return (CheckResult::new(name, Status::Unavailable, "the whole table was not read").details(unmet), None);
    };
    match (&whole.parts_before, &whole.parts_after) {
        (Ok(a), Ok(b)) if a == b => {}
        (Ok(_), Ok(_)) => unmet.push("the table's active parts changed during the read".into()),
        (Err(e), _) | (_, Err(e)) => unmet.push(format!("the table's parts could not be read: {e}")),
    }
    match reads {
        Some(r) if r.unstable.is_some() => unmet.push(r.unstable.clone().unwrap_or_default()),
        Some(r) if r.mutations_before.iter().any(|m| !m.done) => unmet.push("a mutation is in progress".into()),
        None => unmet.push("the selected keys were not read".into()),
        _ => {}
    }
    let rows = match &whole.rows {
        Ok(rows) => rows.clone(),
        Err(e) => {
            unmet.push(if e.kind == "bound" {
                format!(
                    "the table has more rows than --max-table-rows {} allows, or its read reached a bound: {e}",
                    options.bounds.max_table_rows
                )
            } else {
                format!("the whole table could not be read: {e}")
            });
            Vec::new()
        }
    };
    if !unmet.is_empty() {
        return (
            CheckResult::new(
                name,
                Status::Unavailable,
                "the whole table's coverage is not established: a precondition does not hold",
            )
            .details(unmet),
            None,
        );
    }
    // Rows of undetermined windows are counted and left out; open windows and unknown identities fail.
    let undetermined: BTreeSet<&Key> = left_out.iter().collect();
    let mut left = 0;
    let table: Vec<Row> = rows
        .into_iter()
        .filter(|r| {
            let k: Key = key.iter().map(|&i| r.get(i).cloned().flatten()).collect();
            if undetermined.contains(&k) {
                left += 1;
                false
            } else {
                true
            }
        })
        .collect();
    let expected_keyed = by_key(expected.to_vec(), key);
    let table_keyed = by_key(table, key);
    let keys: BTreeSet<Key> = expected_keyed.keys().chain(table_keyed.keys()).cloned().collect();
    let mut c = compare(&expected_keyed, &table_keyed, &keys);
    explain_duplicates(&mut c, &duplicate_sources(scope));
    let evidence = vec![format!("against {basis}: {}; {left} rows of windows left out", c.summary())];
    if c.equal() {
        (
            CheckResult::new(name, Status::Passed, format!("the whole table holds exactly {basis}")).evidence(evidence),
            Some(c),
        )
    } else {
        let details: Vec<String> = c.findings.iter().take(options.list).map(|f| f.describe()).collect();
        (
            CheckResult::new(
                name,
                Status::Failed,
                format!("the table holds rows the scope does not account for, or lacks some: {}", c.summary()),
            )
            .evidence(evidence)
            .details(details),
            Some(c),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_connectors::clickhouse::destination::Server;

    fn destination(uuid: Known, data_path: &str, modified: &str) -> Destination {
        Destination {
            server: Server {
                version: "18.16.1".into(),
                uuid: uuid.clone(),
                timezone: Known::Value("UTC".into()),
                host_name: Known::Value("h".into()),
            },
            database: "default".into(),
            table: "t".into(),
            table_uuid: uuid,
            engine: "MergeTree".into(),
            engine_full: Known::Value("MergeTree ORDER BY id".into()),
            create_table_query: Known::Unavailable("old".into()),
            data_path: Known::Value(data_path.into()),
            metadata_modification_time: Known::Value(modified.into()),
            columns: Vec::new(),
            settings: Vec::new(),
            merge_tree_settings: Vec::new(),
        }
    }

    #[test]
    fn identity_by_uuids_where_the_server_has_them_otherwise_by_what_it_has() {
        let old = Known::Unavailable("no UUIDs".into());
        let a = destination(old.clone(), "/a/data/default/t/", "2024-01-01 00:00:00");
        assert!(identify(&a, &a).unwrap().contains("data path"));
        let other_server = destination(old.clone(), "/b/data/default/t/", "2024-01-01 00:00:00");
        assert!(identify(&a, &other_server).unwrap_err().contains("data path"));
        let recreated = destination(old, "/a/data/default/t/", "2024-01-01 00:00:09");
        assert!(identify(&a, &recreated).unwrap_err().contains("metadata modification time"));
        let u1 = destination(Known::Value("u1".into()), "/a/", "t");
        let u2 = destination(Known::Value("u2".into()), "/a/", "t");
        assert!(identify(&u1, &u1).unwrap().contains("UUIDs"));
        assert!(identify(&u1, &u2).unwrap_err().contains("UUID"));
    }
}
