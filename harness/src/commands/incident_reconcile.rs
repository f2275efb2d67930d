//! `clink incident-reconcile`: does the destination hold exactly what one
//! completed checkpoint owed it (and, with --reference, what an independent
//! reference computes)?

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use clink_basics::exit::Exit;
use clink_bundle::read_bundle;
use clink_connectors::clickhouse::Endpoint;
use clink_reconcile::read::Bounds;
use clink_reconcile::{reconcile, render_json, render_text, Coverage, Options, ReconcileProgress};

use super::{decimal_u64, Output};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CoverageArg {
    /// Read the rows of the scope's keys (and the reference's) only.
    SelectedKeys,
    /// Also read the whole table, which must hold exactly the expected rows.
    CompleteTable,
}

/// Reconcile a ClickHouse destination with what a completed checkpoint owed it.
///
/// Online and explicit: it reads the table the bundle's evidence names, on
/// the connection given here, read-only (every statement a SELECT under
/// readonly=2) and bounded (max_execution_time and max_result_rows set to
/// throw). The rows of the scope's keys are read twice, --settle-ms apart,
/// with the table's mutations before and after, and compared with the sink's
/// recorded input as whole rows, multisets, key by key.
///
/// The scope, the job graph (the one checkpoint N's marker names) and every
/// artifact decided on are read from the bundle as its manifest vouched for
/// them, each naming the place its path says.
///
/// Exit 0 every check passed; 1 one failed; 3 none failed but one is
/// unavailable or unsupported (a bound reached, a mutation in progress, a
/// key read differently twice, evidence not whole, a DateTime64 key column);
/// 2 refused: --since with --from-run-start, another job, a checkpoint the
/// bundle does not hold as completed, evidence that changed since it was
/// vouched for or names another job or place, another database, table or
/// server than the evidence's, or a malformed reference artifact or one
/// bound to another scope.
#[derive(Args, Debug)]
pub struct IncidentReconcileArgs {
    /// The bundle directory.
    bundle: PathBuf,
    /// The completed checkpoint to reconcile.
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    checkpoint: u64,
    /// The job the bundle must be of.
    #[arg(long, value_name = "ID", value_parser = decimal_u64)]
    job: Option<u64>,
    /// The columns that identify one row the job writes (comma-separated);
    /// a windowed job's key is its windows' identity.
    #[arg(long, value_name = "COLUMN,...", value_delimiter = ',')]
    key: Option<Vec<String>>,
    /// A windowed job's increment from this earlier completed checkpoint.
    #[arg(long, value_name = "M", value_parser = decimal_u64)]
    since: Option<u64>,
    /// A record-wise scope spanning the run from its start; not with --since.
    #[arg(long)]
    from_run_start: bool,
    /// The ClickHouse server's HTTP interface: HOST:PORT or an http:// URL.
    #[arg(long, value_name = "ADDRESS", required_unless_present = "host_env", conflicts_with = "host_env")]
    host: Option<String>,
    /// The environment variable holding --host's value (so a URL never sits in an argument list).
    #[arg(long, value_name = "VAR")]
    host_env: Option<String>,
    /// The ClickHouse user (default: the server's default user).
    #[arg(long, value_name = "USER", conflicts_with = "user_env")]
    user: Option<String>,
    /// The environment variable holding the ClickHouse user.
    #[arg(long, value_name = "VAR")]
    user_env: Option<String>,
    /// The environment variable holding the user's password.
    #[arg(long, value_name = "VAR")]
    password_env: Option<String>,
    /// The database the operator expects (it must be the evidence's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// The table the operator expects (it must be the evidence's).
    #[arg(long, value_name = "NAME")]
    table: Option<String>,
    /// The longest any one statement may run.
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    query_timeout_ms: u64,
    /// The most rows any one statement may return.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_rows_per_query: u64,
    /// How many keys one statement selects.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    keys_per_query: u64,
    /// How long between the two reads.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    settle_ms: u64,
    /// The most rows the whole table may have (--coverage=complete-table).
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_table_rows: u64,
    /// A reference artifact (clink-reference-result) bound to this checkpoint's scope.
    #[arg(long, value_name = "FILE")]
    reference: Option<PathBuf>,
    /// The largest reference artifact read.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    max_artifact_bytes: u64,
    /// Which rows of the table are read.
    #[arg(long, value_enum, default_value = "selected-keys")]
    coverage: CoverageArg,
    /// The operator declares the table holds this one bounded run's writes and
    /// nothing else (a precondition of --coverage=complete-table).
    #[arg(long)]
    assume_table_holds_only_this_run: bool,
    /// How many discrepancies of each relationship the report lists.
    #[arg(long, value_name = "N", default_value_t = 20)]
    list: usize,
    /// Print the versioned JSON report (clink-reconcile-report) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the report as one self-contained HTML file (the verdict,
    /// every check, each relationship's discrepancies).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Write the expected rows (the sink's recorded input over the scope) as
    /// canonical cells, one JSON object per line.
    #[arg(long, value_name = "FILE")]
    expected_out: Option<PathBuf>,
}

/// Says on standard error when each read of the selected keys is done.
struct Stderr;

impl ReconcileProgress for Stderr {
    fn read_done(&mut self, read: usize, keys: usize, settle_ms: u64) {
        if read == 1 {
            eprintln!("clink incident-reconcile: read 1 of 2 done ({keys} keys); the second in {settle_ms} ms");
        } else {
            eprintln!("clink incident-reconcile: read {read} of 2 done ({keys} keys)");
        }
    }
}

pub fn main(args: IncidentReconcileArgs) -> Exit {
    let out = Output::new("incident-reconcile", args.json);
    let variable = |flag: &str, var: &Option<String>| match var {
        None => Ok(None),
        Some(var) => std::env::var(var).map(Some).map_err(|_| format!("{flag}: the variable {var} is not set")),
    };
    let (host, user) = match (variable("--host-env", &args.host_env), variable("--user-env", &args.user_env)) {
        (Ok(host), Ok(user)) => (host.or(args.host.clone()).unwrap_or_default(), user.or(args.user.clone())),
        (Err(why), _) | (_, Err(why)) => return out.refuse(why),
    };
    let mut endpoint = match Endpoint::parse(&host) {
        Ok(e) => e,
        // The address is not repeated: it may have come from a variable.
        Err(e) => return out.refuse(format!("{}: {e}", if args.host_env.is_some() { "--host-env" } else { "--host" })),
    };
    endpoint.user = user;
    if let Some(var) = &args.password_env {
        match std::env::var(var) {
            Ok(p) => endpoint.password = Some(p),
            Err(_) => return out.refuse(format!("--password-env: the variable {var} is not set")),
        }
    }
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return out.refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    let options = Options {
        checkpoint: args.checkpoint,
        job: args.job,
        key: args.key,
        since: args.since,
        from_run_start: args.from_run_start,
        endpoint,
        database: args.database,
        table: args.table,
        bounds: Bounds {
            query_timeout_ms: args.query_timeout_ms,
            max_rows_per_query: args.max_rows_per_query,
            keys_per_query: args.keys_per_query as usize,
            settle_ms: args.settle_ms,
            max_table_rows: args.max_table_rows,
        },
        reference: args.reference,
        max_artifact_bytes: args.max_artifact_bytes,
        coverage: match args.coverage {
            CoverageArg::SelectedKeys => Coverage::SelectedKeys,
            CoverageArg::CompleteTable => Coverage::CompleteTable,
        },
        table_holds_only_this_run: args.assume_table_holds_only_this_run,
        list: args.list,
        expected_out: args.expected_out,
    };
    let report = match reconcile(&bundle, &options, &mut Stderr) {
        Ok(r) => r,
        Err(e) => return out.refuse(e),
    };
    let json = render_json(&report);
    if let Some(path) = &args.report {
        if let Err(e) = super::incident_scope::write_beside(path, json.as_bytes()) {
            return out.refuse(format!(
                "--report {}: {e} (the reconciliation concluded exit {})",
                path.display(),
                report.exit_code
            ));
        }
    }
    if let Some(path) = &args.html {
        let page = clink_reconcile::html::page(&report);
        if let Err(e) = super::write_html(path, &clink_html::render(&page)) {
            return out.refuse(format!("{e} (the reconciliation concluded exit {})", report.exit_code));
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", render_text(&report));
    }
    report.result.exit()
}
