//! One reconciliation (and, with a reference, one audit), from the bundle's
//! integrity to the verdict, as a sequence of steps each in its own module:
//! the options refused before reading ([`options`]), the scope from the
//! bundle alone (`crate::scope`), the destination's identity and shape
//! ([`destination`]), the reads ([`reads`]), the delivery ([`delivery`]),
//! the reference's relationships ([`reference`]), the whole table
//! ([`coverage`]), and the report's account ([`account`]).
//!
//! Every artifact the steps decide on is read after the integrity checks
//! through `crate::evidence`, vouched for by the manifest; one that changed
//! since refuses the run.

use std::collections::BTreeSet;
use std::time::Instant;

use clink_bundle::Bundle;
use clink_connectors::clickhouse::destination::DescribeError;
use clink_connectors::clickhouse::Connection;
use clink_verify::{CheckResult, Status};
use serde_json::{json, Value as Json};

use crate::artifact::{parse_artifact, Artifact};
use crate::cells::CellKind;
use crate::compare::{Key, Keyed, Row};
use crate::read::{by_key, Reader};
use crate::report::{conclude, Findings, Observation, Report, REPORT_FORMAT, REPORT_VERSION};
use crate::scope::{Scope, ScopeError, ScopeKind, ScopeRequest};

mod account;
mod coverage;
mod delivery;
mod destination;
mod options;
mod reads;
mod reference;

use account::findings;
pub use options::{Coverage, Options, Refusal};

/// What a reconciliation tells a watcher while it works.
pub trait ReconcileProgress {
    /// The bundle's integrity checks are done; everything read from here on
    /// is read through the manifest's vouching.
    fn integrity_checked(&mut self) {}
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

const RECONCILE_CHECKS: [&str; 3] = ["reconcile.scope", "reconcile.destination", "reconcile.rows"];

/// Reconciles (and audits) one completed checkpoint's scope with its destination.
pub fn reconcile(bundle: &Bundle, options: &Options, progress: &mut dyn ReconcileProgress) -> Result<Report, Refusal> {
    if let Some(refusal) = options.refusal() {
        return Err(refusal);
    }
    let mut run = Run::new(options);

    // The bundle's integrity: when it fails, nothing else is read.
    let integrity = clink_verify::integrity_checks(bundle);
    let intact = integrity.iter().all(|c| c.status != Status::Failed);
    run.checks.extend(integrity);
    if let Some(job) = options.job {
        if job != bundle.job_id() {
            return Err(Refusal(format!("--job {job}: the bundle is of job {}", bundle.job_id())));
        }
    }
    if intact {
        clink_verify::claims_hold(bundle).map_err(|e| Refusal(e.0))?;
    }
    if !intact {
        let why = "a bundle.* check failed: nothing else in the bundle is read";
        for name in RECONCILE_CHECKS {
            run.checks.push(behind(name, Status::Unavailable, why));
        }
        return Ok(run.finish(bundle, Json::Null));
    }
    progress.integrity_checked();

    // The scope, from the bundle alone.
    let scope = match compute_scope(bundle, options)? {
        Ok(scope) => scope,
        Err(why) => {
            for name in RECONCILE_CHECKS {
                run.checks.push(behind(
                    name,
                    Status::Unsupported,
                    &format!("the job is not one reconciliation supports: {why}"),
                ));
            }
            return Ok(run.finish(bundle, json!({"unsupported": why})));
        }
    };
    let key = scope.key_columns(options.key.as_deref()).map_err(|e| Refusal(e.to_string()))?;
    let scope_doc = scope.document();
    expected_names(options, &scope)?;
    let artifact = read_artifact(options, &scope, &scope_doc, &key)?;

    // reconcile.scope
    let expected_rows = scope.expected_rows();
    if let Some(path) = &options.expected_out {
        account::write_expected(path, &scope, &expected_rows)
            .map_err(|e| Refusal(format!("--expected-out {}: {e}", path.display())))?;
    }
    let key_kinds: Vec<CellKind> = key.iter().map(|&i| scope.kinds[i]).collect();
    let scope_check = delivery::scope_check(&scope, &expected_rows, &key, &key_kinds);
    let scope_ok = scope_check.status == Status::Passed;
    run.checks.push(scope_check);
    run.extra.scope = account::scope_summary(&scope, &scope_doc, &expected_rows);

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
    run.observation.server_time_before_s = reader.server_time().ok();
    let observed = match reader.describe() {
        Ok(d) => d,
        Err(DescribeError::NoSuchTable { url, database, table }) => {
            return Err(Refusal(format!(
                "the server at {url} has no table {database}.{table}: it is not the destination the evidence names"
            )))
        }
        Err(e) => {
            run.extra.destination = json!({"recorded": recorded, "observed": Json::Null, "error": e.to_string()});
            run.checks.push(behind(
                "reconcile.destination",
                Status::Unavailable,
                &format!("the destination could not be described: {e}"),
            ));
            run.checks.push(behind("reconcile.rows", Status::Unavailable, "the destination could not be read"));
            if artifact.is_some() {
                for name in reference::names(scope.shape.windowed().is_some()) {
                    run.checks.push(behind(name, Status::Unavailable, "the destination could not be read"));
                }
            }
            return Ok(run.finish(bundle, scope_doc));
        }
    };
    let identity = match &recorded {
        Some(r) => destination::identify(r, &observed).map_err(Refusal)?,
        None => "the evidence records no destination".to_string(),
    };
    run.extra.destination = json!({
        "recorded": recorded,
        "observed": observed,
        "identity": identity,
        "observed_table": format!("{}.{} at {}", scope.shape.database, scope.shape.table, conn.url()),
    });
    let written = destination::Written::of(&scope, &key);
    let (destination_check, columns) =
        destination::destination_check(&written, recorded.as_ref(), Some(&observed), &identity);
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
    let reads = readable.then(|| reads::read_twice(&mut reader, &columns, &key, &keys, progress));
    let whole =
        (readable && options.coverage == Coverage::CompleteTable).then(|| reads::read_whole(&mut reader, &columns));
    run.observation.server_time_after_s = reader.server_time().ok();

    // reconcile.rows: the sink's input against the destination, over its own keys.
    run.delivery(&scope, reads.as_ref(), readable, scope_ok, &expected, &key);

    // The reference audit.
    if options.reference.is_some() {
        if let Some(why) = scope.shape.unsupported() {
            for name in reference::names(scope.shape.windowed().is_some()) {
                run.checks.push(behind(
                    name,
                    Status::Unsupported,
                    &format!("the reference audit does not support this job: {why}"),
                ));
            }
        } else if let Some(a) = &artifact {
            let sides = reference::Sides { captured: &expected, reference: &reference, left_out: &left_out, key: &key };
            let audit = reference::audit(&scope, &scope_doc, a, &sides, reads.as_ref(), options.list);
            run.checks.extend(audit.checks);
            run.findings.extend(audit.findings);
        }
    }
    if options.coverage == Coverage::CompleteTable {
        let (basis_rows, basis) = if reference_usable {
            (&reference_rows, "the reference's rows")
        } else {
            (&expected_rows, "the sink's recorded input")
        };
        let no_windows = Vec::new();
        let windows_left_out = artifact.as_ref().filter(|_| reference_usable).map_or(&no_windows, |a| &a.left_out);
        let (check, compared) = coverage::coverage_check(
            &scope,
            options,
            reads.as_ref(),
            whole.as_ref(),
            basis_rows,
            basis,
            &key,
            windows_left_out,
            reference_usable || artifact.is_none(),
        );
        if let Some(c) = compared {
            run.findings.push(findings("coverage", "the whole table against the expected rows", &c, options.list));
        }
        run.checks.push(check);
    }
    run.extra.coverage = coverage_account(options.coverage, keys.len());
    run.extra.method = json!({
        "key": key.iter().map(|&i| scope.shape.columns[i].name.clone()).collect::<Vec<_>>(),
        "keys_selected": keys.len(),
        "reads": 2,
        "bounds": options.bounds,
        "statements": reader.statements,
        "comparison": "whole rows as multisets, key by key, under clink-canonical-cells-v1",
        "settings": crate::read::read_settings(&options.bounds, options.bounds.max_rows_per_query).iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
    });
    if let Some(a) = &artifact {
        run.extra.reference = reference_account(a);
    }
    Ok(run.finish(bundle, scope_doc))
}

/// The scope the options ask for, or why the job is not supported.
fn compute_scope(bundle: &Bundle, options: &Options) -> Result<Result<Scope, String>, Refusal> {
    let checkpoint = options.checkpoint;
    // Whether the job is windowed is the graph's of the audited checkpoint.
    let windowed = crate::scope::shape_at(bundle, checkpoint).is_some_and(|s| s.windowed().is_some());
    let kind = ScopeKind::requested(options.since, options.from_run_start, windowed, options.needs_lineage(windowed))
        .map_err(Refusal)?;
    match Scope::compute(bundle, ScopeRequest { checkpoint, kind }) {
        Ok(s) => Ok(Ok(s)),
        Err(ScopeError::Refused(why)) => Err(Refusal(why)),
        Err(ScopeError::Unsupported(why)) => Ok(Err(why)),
    }
}

/// What the operator expects must be what the evidence names.
fn expected_names(options: &Options, scope: &Scope) -> Result<(), Refusal> {
    if let Some(db) = options.database.as_ref().filter(|db| **db != scope.shape.database) {
        return Err(Refusal(format!("--database {db:?}: the evidence names database {:?}", scope.shape.database)));
    }
    if let Some(t) = options.table.as_ref().filter(|t| **t != scope.shape.table) {
        return Err(Refusal(format!("--table {t:?}: the evidence names table {:?}", scope.shape.table)));
    }
    Ok(())
}

/// The reference artifact, bound to this scope (an increment's to its base).
fn read_artifact(
    options: &Options,
    scope: &Scope,
    scope_doc: &Json,
    key: &[usize],
) -> Result<Option<Artifact>, Refusal> {
    let Some(path) = &options.reference else { return Ok(None) };
    if scope.shape.unsupported().is_some() {
        return Ok(None);
    }
    let bytes = clink_basics::files::read_bounded(path, options.max_artifact_bytes)
        .map_err(|e| Refusal(format!("--reference {}: {e}", path.display())))?;
    let identity_kinds: Vec<CellKind> =
        if scope.shape.windowed().is_some() { key.iter().map(|&i| scope.kinds[i]).collect() } else { Vec::new() };
    let a = parse_artifact(&bytes, scope_doc, &scope.kinds, &identity_kinds).map_err(|e| Refusal(e.to_string()))?;
    if let ScopeKind::Increment { base } = scope.request.kind {
        let state_in = a.state_in().and_then(|s| s.get("checkpoint")).and_then(Json::as_u64);
        if state_in != Some(base) {
            return Err(Refusal(format!(
                "the reference artifact's state_in is of checkpoint {}, not the increment's base {base}",
                state_in.map_or("none".into(), |c| c.to_string())
            )));
        }
    }
    Ok(Some(a))
}

fn coverage_account(coverage: Coverage, keys: usize) -> Json {
    json!({
        "mode": match coverage { Coverage::SelectedKeys => "selected-keys", Coverage::CompleteTable => "complete-table" },
        "keys_selected": keys,
        "statement": match coverage {
            Coverage::SelectedKeys => format!("for the {keys} selected keys; the rest of the table is not established"),
            Coverage::CompleteTable => "the whole table, under the assumptions listed".to_string(),
        },
    })
}

fn reference_account(a: &Artifact) -> Json {
    json!({
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
    })
}

/// The report's parts beside the checks.
#[derive(Default)]
struct Extra {
    scope: Json,
    destination: Json,
    method: Json,
    mutations: Json,
    reference: Json,
    coverage: Json,
}

/// One reconciliation's account as it grows.
struct Run<'a> {
    options: &'a Options,
    started: Instant,
    observation: Observation,
    checks: Vec<CheckResult>,
    findings: Vec<Findings>,
    extra: Extra,
}

impl<'a> Run<'a> {
    fn new(options: &'a Options) -> Self {
        Run {
            options,
            started: Instant::now(),
            observation: Observation { started_at_ms: now_ms(), ..Observation::default() },
            checks: Vec::new(),
            findings: Vec::new(),
            extra: Extra::default(),
        }
    }

    /// reconcile.rows, its findings and the mutations around the reads.
    fn delivery(
        &mut self,
        scope: &Scope,
        reads: Option<&reads::Reads>,
        readable: bool,
        scope_ok: bool,
        expected: &Keyed,
        key: &[usize],
    ) {
        let name = "reconcile.rows";
        let own_keys: BTreeSet<Key> = expected.keys().cloned().collect();
        let check = match reads {
            _ if !readable => behind(
                name,
                Status::Unavailable,
                if scope_ok {
                    "reconcile.destination did not pass: the rows are not compared"
                } else {
                    "reconcile.scope did not pass: the rows are not compared"
                },
            ),
            None => behind(name, Status::Unavailable, "the destination was not read"),
            Some(reads) => {
                let (check, compared) = delivery::rows_check(scope, reads, expected, &own_keys, key, self.options.list);
                if let Some(c) = &compared {
                    self.findings.push(findings(
                        "delivery",
                        "the sink's recorded input against the destination",
                        c,
                        self.options.list,
                    ));
                }
                check
            }
        };
        self.checks.push(check);
        if let Some(reads) = reads {
            self.extra.mutations = json!({"before": reads.mutations_before, "after": reads.mutations_after});
        }
    }

    fn finish(mut self, bundle: &Bundle, scope_doc: Json) -> Report {
        self.observation.finished_at_ms = now_ms();
        self.observation.elapsed_ms = self.started.elapsed().as_millis() as u64;
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
        let mut scope = self.extra.scope;
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
            observation: self.observation,
            scope,
            destination: self.extra.destination,
            method: self.extra.method,
            assumptions,
            mutations: self.extra.mutations,
            reference: self.extra.reference,
            coverage: self.extra.coverage,
            checks: self.checks,
            findings: self.findings,
            exit_code: result.exit_code(),
            result,
        }
    }
}
