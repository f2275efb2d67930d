//! The probe against the Apache Kafka broker `gates/services start` runs
//! (CLINK_KAFKA_BOOTSTRAP), every row's result compared with the one
//! ARCHITECTURE.md's table records for it: a broker that changes fails here
//! until the table is probed and written again. Without the service the
//! trial is ignored with the reason `service`, never passed.

use std::collections::BTreeMap;
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};

/// Apache Kafka's rows, as ARCHITECTURE.md's table has them: every one yes.
const APACHE_KAFKA: &[(&str, &str)] = &[
    ("advertises InitProducerId", "yes"),
    ("advertises AddPartitionsToTxn", "yes"),
    ("advertises EndTxn", "yes"),
    ("advertises DescribeTransactions", "yes"),
    ("advertises ListTransactions", "yes"),
    ("advertises DescribeProducers", "yes"),
    ("advertises CreateTopics", "yes"),
    ("init_transactions", "yes"),
    ("commit (AddPartitionsToTxn, EndTxn commit)", "yes"),
    ("abort (EndTxn abort)", "yes"),
    ("read_committed hides aborted records", "yes"),
    ("read_uncommitted shows aborted records", "yes"),
    ("read_committed hides an open transaction", "yes"),
    ("a second init fences the first producer", "yes"),
    ("SIGKILL mid-transaction, then init", "yes"),
    ("the killed producer's records are aborted by the new init", "yes"),
    ("the orphan's epoch is refused after the new init", "yes"),
    ("DescribeTransactions of the orphan", "yes"),
    ("abort under the orphan's identity (EndTxn)", "yes"),
    ("the orphan's records are hidden after that abort", "yes"),
    ("the orphan's commit is refused after that abort", "yes"),
    ("a transaction open past its timeout is aborted", "yes"),
];

fn services() -> Result<BTreeMap<String, String>, String> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (run gates/services start)"))?;
    let env: BTreeMap<String, String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !env.contains_key("CLINK_KAFKA_BOOTSTRAP") {
        return Err(format!("{path} names no CLINK_KAFKA_BOOTSTRAP"));
    }
    Ok(env)
}

fn the_probe_measures_what_the_table_records(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let impl_ = env.get("CLINK_KAFKA_IMPL").map(String::as_str);
    if impl_ != Some("apache-kafka") {
        return Err(format!("ARCHITECTURE.md records no table for {impl_:?}: probe it and write one").into());
    }
    // The broker checks for expired transactions every second: 5 s is past
    // the probe's 2 s timeout with room for the check.
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-txn-probe"))
        .args([env["CLINK_KAFKA_BOOTSTRAP"].as_str(), "--json", "--expiry-wait", "5"])
        .output()?;
    if !out.status.success() {
        return Err(format!("the probe exited {}: {}", out.status, String::from_utf8_lossy(&out.stdout)).into());
    }
    let mut got = Vec::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let (Some(check), Some(result)) = (row["check"].as_str(), row["result"].as_str()) else {
            return Err(format!("a row without check and result: {line}").into());
        };
        got.push((check.to_string(), result.to_string()));
    }
    let want: Vec<(String, String)> = APACHE_KAFKA.iter().map(|(c, r)| (c.to_string(), r.to_string())).collect();
    if got != want {
        return Err(format!("the probe measured\n{got:#?}\nARCHITECTURE.md records\n{want:#?}").into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let trial = match services() {
        Ok(env) => Trial::test("probe::table_as_recorded", move || the_probe_measures_what_the_table_records(&env)),
        Err(why) => Trial::test("probe::table_as_recorded", || Ok(()))
            .with_ignored_flag(true)
            .with_kind(format!("service: {why}")),
    };
    libtest_mimic::run(&args, vec![trial]).exit();
}
