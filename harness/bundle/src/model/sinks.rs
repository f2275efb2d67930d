//! Each sink interval's bounds and account, against everything else that
//! states them: its previous barrier against the restores and checkpoints
//! the evidence records; its own account (rows, staged file, INSERT ledger,
//! transaction, last watermark) against the rows and watermarks its capture
//! recorded, the handle its snapshot holds and the receipt of its commit.
//! The accounts are recomputed with the engine's own rules (the row's line
//! rendering, its canonical bytes, the INSERT token, the row digest).

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;
use clink_engine::capture::{read_capture, SinkEvidence};
use clink_engine::checkpoint::commits::{row_digest, TxnHandle};
use clink_engine::checkpoint::layout::participant_name;
use clink_engine::event::Event;
use clink_engine::operators::{clickhouse_sink, kafka_sink, staged_sink};
use clink_engine::value::{render_line_into, row_bytes, Row};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::captures::MAX_CAPTURE_BYTES;
use super::{Evidence, Fact};
use crate::manifest::Bundle;

pub(super) fn compare(bundle: &Bundle, e: &mut Evidence) {
    let mut found = Vec::new();
    for ((op, s, n), doc) in &e.sink_evidence {
        let place = format!("capture/op-{op}/subtask-{s}/epoch-{n}.sink.json");
        previous_barrier(e, *n, doc, &place, &mut found);
        // The rows and watermarks the sink was handed, whole.
        let Ok(bytes) = bundle.capture_bytes(*op, *s, *n, MAX_CAPTURE_BYTES) else { continue };
        let Ok(capture) = read_capture(&bytes) else { continue };
        if !capture.is_whole() {
            // A truncated capture holds a prefix: the account's rows are not all there.
            continue;
        }
        let rows: Vec<&Row> =
            capture.events.iter().filter_map(|ev| if let Event::Record(r) = ev { Some(r) } else { None }).collect();
        watermark(e, (*op, *s, *n), doc, &capture.events, &place, &mut found);
        let account = match doc.sink.get("type").and_then(Json::as_str) {
            Some(staged_sink::TYPE) => staged(e, (*op, *s, *n), doc, &rows),
            Some(clickhouse_sink::TYPE) => clickhouse(e, (*op, *s, *n), doc, &rows),
            Some(kafka_sink::TYPE) => kafka(e, (*op, *s, *n), doc, &rows),
            other => Err(format!("the sink's account is of type {other:?}, which no sink of this build writes")),
        };
        if let Err(why) = account {
            found.push(format!("{place}: {why}"));
        }
    }
    for detail in found {
        e.find(Fact::Capture, detail);
    }
    let mut handles = Vec::new();
    commit_handles(e, &mut handles);
    for detail in handles {
        e.find(Fact::Restore, detail);
    }
}

/// The barrier before an interval: the restore point when a restore
/// numbered its run from this epoch, else the checkpoint before it.
fn previous_barrier(e: &Evidence, epoch: u64, doc: &SinkEvidence, place: &str, found: &mut Vec<String>) {
    let restored: Vec<u64> = e.restores.iter().filter(|(_, next)| *next == epoch).map(|(from, _)| *from).collect();
    let expected = match restored.as_slice() {
        [] => epoch - 1,
        [from] => *from,
        many => {
            found
                .push(format!("{place}: the evidence records restores {many:?} that each numbered a run from {epoch}"));
            return;
        }
    };
    if doc.previous_barrier != expected {
        let why = if restored.is_empty() {
            format!("no restore the bundle records numbered a run from {epoch}, so the barrier before it is {expected}")
        } else {
            format!("the run was restored from {expected} and numbered from {epoch}")
        };
        found.push(format!("{place}: its previous barrier is {}; {why}", doc.previous_barrier));
    }
}

/// The last watermark the sink held at the barrier: its capture's last,
/// or (none in the epoch) what it held at the barrier before, when the
/// bundle holds that interval's evidence of the same run.
fn watermark(
    e: &Evidence,
    at: (OperatorId, u32, u64),
    doc: &SinkEvidence,
    events: &[Event],
    place: &str,
    found: &mut Vec<String>,
) {
    let Some(said) = &doc.watermark else {
        if doc.run.is_some() {
            found.push(format!("{place}: it says no watermark; evidence a run names always says the last it held"));
        }
        return;
    };
    let last =
        events.iter().rev().find_map(|ev| if let Event::Watermark { time, .. } = ev { Some(*time) } else { None });
    let expected = match last {
        Some(t) => Some(t),
        None => match e.sink_evidence.get(&(at.0, at.1, doc.previous_barrier)) {
            Some(before) if doc.previous_barrier + 1 == at.2 => before.watermark.map(|w| w.last).unwrap_or(None),
            _ => return,
        },
    };
    if said.last != expected {
        found.push(format!(
            "{place}: it says the last watermark at the barrier was {:?}; its capture (and the interval before) say {expected:?}",
            said.last
        ));
    }
}

/// The staged file a staged sink sealed: its rendered lines, and the handle
/// its snapshot holds.
fn staged(e: &Evidence, (op, s, n): (OperatorId, u32, u64), doc: &SinkEvidence, rows: &[&Row]) -> Result<(), String> {
    let mut file = Vec::new();
    for row in rows {
        render_line_into(&mut file, row);
        file.push(b'\n');
    }
    let expected = (!rows.is_empty()).then(|| {
        serde_json::json!({"file": staged_sink::part_name(s, n), "rows": rows.len(), "bytes": file.len(), "sha256": sha256_hex(&file)})
    });
    let handle = doc.sink.get("handle").cloned().unwrap_or(Json::Null);
    if handle != expected.clone().unwrap_or(Json::Null) {
        return Err(format!(
            "its staged file is {handle}; the {} rows its capture recorded make {}",
            rows.len(),
            expected.unwrap_or(Json::Null)
        ));
    }
    if doc.sink.get("staged") != Some(&Json::Bool(!rows.is_empty())) {
        return Err(format!(
            "it says staged {}, with {} rows recorded",
            doc.sink.get("staged").unwrap_or(&Json::Null),
            rows.len()
        ));
    }
    // The handle its snapshot of the checkpoint holds, where the bundle has it.
    let participant = participant_name(op, s);
    if let Some(snapshot) = e.snapshots.iter().find(|((_, p, c), _)| *p == participant && *c == n).map(|(_, v)| v) {
        let held = staged_sink::decode_handles(&snapshot.slots).map_err(|w| w.to_string())?;
        let held = held
            .get(&n)
            .map(|h| serde_json::json!({"file": h.file, "rows": h.rows, "bytes": h.bytes, "sha256": h.sha256}));
        if held.unwrap_or(Json::Null) != handle {
            return Err(format!(
                "its staged file is {handle}; {participant}'s snapshot of checkpoint {n} holds another"
            ));
        }
    }
    Ok(())
}

/// A ClickHouse sink's interval: its rows, their digest, the INSERT ledger
/// (recomputed with the sink's own plan, cell plan and rendering), the
/// destination it describes (the table its plan names, able to take the
/// job's columns).
fn clickhouse(
    e: &Evidence,
    (op, s, n): (OperatorId, u32, u64),
    doc: &SinkEvidence,
    rows: &[&Row],
) -> Result<(), String> {
    let interval = doc.sink.get("interval").ok_or("its account has no interval")?;
    let mut digest = Sha256::new();
    for row in rows {
        let bytes = row_bytes(row);
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(&bytes);
    }
    let sha = clink_basics::digest::hex(&digest.finalize());
    let said = (interval.get("rows").unwrap_or(&Json::Null), interval.get("sha256").unwrap_or(&Json::Null));
    if said != (&Json::from(rows.len()), &Json::from(sha.as_str())) {
        return Err(format!(
            "it accounts for {} rows of digest {}; its capture recorded {} rows of digest {sha}",
            said.0,
            said.1,
            rows.len()
        ));
    }
    let inserts = interval.get("inserts").and_then(Json::as_array).ok_or("its interval has no INSERT ledger")?;
    let inserted: u64 = inserts.iter().filter_map(|i| i.get("rows").and_then(Json::as_u64)).sum();
    if inserted != rows.len() as u64 || (rows.is_empty() != inserts.is_empty()) {
        return Err(format!(
            "its INSERT ledger sends {inserted} rows in {} INSERTs; the interval holds {}",
            inserts.len(),
            rows.len()
        ));
    }
    // Every INSERT of an interval carries the interval's one token (made of
    // the run that wrote the evidence), or none when deduplication was off
    // for it (a server that takes no token, or no run identity): never
    // another's, and never a mix.
    let token = doc.run.as_ref().map(|run| clickhouse_sink::insert_token(run, &e.job.to_string(), &doc.uid, s, n));
    let carried: Vec<Option<&str>> = inserts.iter().map(|i| i.get("token").and_then(Json::as_str)).collect();
    let agrees = |t: &Option<&str>| t.is_none() || *t == token.as_deref();
    if let Some(other) = carried.iter().find(|t| !agrees(t)) {
        return Err(format!(
            "an INSERT of its ledger carries token {other:?}; the interval's is {}",
            token.as_deref().unwrap_or("none (no run identity)")
        ));
    }
    if carried.iter().any(Option::is_some) && carried.iter().any(Option::is_none) {
        return Err("its INSERT ledger mixes INSERTs with the interval's token and without one".into());
    }
    // The sink's own rules over what the evidence states.
    let incarnation = doc.run.as_ref().map(|r| r.incarnation);
    let planned = e
        .graph_of_run_at(incarnation, n)
        .or_else(|| e.graphs.values().next_back().map(|g| g.as_ref()))
        .and_then(|g| g.operator(op));
    let Some(planned) = planned else { return Ok(()) };
    let input = planned.input_schema.clone().unwrap_or_default();
    if doc.sink.get("columns") != Some(&serde_json::to_value(&input.0).unwrap_or_default()) {
        return Err("the columns it says it writes are not the sink's input columns".into());
    }
    let destination = doc.sink.get("destination").ok_or("its account describes no destination")?;
    let (bytes, rules) =
        clickhouse_sink::recompute_interval(&planned.spec.params, &input, destination, doc.run.as_ref(), rows)?;
    // THE insert rules over the destination it describes, for the run that wrote it.
    if doc.sink.get("writes") != Some(&serde_json::to_value(&rules).map_err(|e| e.to_string())?) {
        return Err(format!(
            "the write rules it records are not those the destination it describes gives the run that wrote it ({})",
            serde_json::to_value(&rules).unwrap_or_default()
        ));
    }
    if rules.tokens.value().is_some() != carried.iter().all(Option::is_some) && !carried.is_empty() {
        return Err(
            "its INSERTs carry a token exactly when its write rules say the server takes one for this run".into()
        );
    }
    for (insert, token) in inserts.iter().zip(&carried) {
        // Every field of a ledger entry is written, with its type.
        let typed = |k: &str, t: fn(&Json) -> bool| insert.get(k).is_some_and(t);
        let whole = typed("token", |v| v.is_null() || v.is_string())
            && ["resent_in_doubt", "resend_deduplicated", "may_land_twice"].iter().all(|k| typed(k, Json::is_boolean))
            && ["rows", "bytes", "attempts"].iter().all(|k| typed(k, Json::is_u64))
            && typed("errors", Json::is_array);
        if !whole {
            return Err(format!(
                "its INSERT {insert} lacks a field of the ledger's format, or holds one of another type"
            ));
        }
        let deduplicates = rules.deduplication.holds && token.is_some();
        let field = |k: &str| insert.get(k).cloned().unwrap_or(Json::Null);
        let attempts = field("attempts").as_u64().unwrap_or(0);
        let errors = field("errors").as_array().map_or(usize::MAX, Vec::len) as u64;
        let in_doubt = field("resent_in_doubt") == Json::Bool(true);
        let expected = (
            Json::from(bytes),
            attempts == errors + 1,
            field("resend_deduplicated") == Json::Bool(in_doubt && deduplicates),
            field("may_land_twice") == Json::Bool(in_doubt && !deduplicates),
            !in_doubt || attempts > 1,
        );
        if expected != (field("bytes"), true, true, true, true) {
            return Err(format!(
                "its INSERT {insert} does not hold together: {bytes} bytes for its rows, one attempt per error and one more, a resend in doubt deduplicated exactly when its write rules deduplicate and it carried a token ({deduplicates})"
            ));
        }
    }
    // Every interval of the same run, of any of the operator's subtasks,
    // describes the same destination: the run described it at open.
    let run = doc.run.as_ref();
    if let Some(((_, t, m), _)) = e.sink_evidence.iter().find(|((o, t, m), d)| {
        *o == op && (*t, *m) != (s, n) && d.run.as_ref() == run && d.sink.get("destination") != Some(destination)
    }) {
        return Err(format!(
            "it describes another destination than operator {op}'s evidence of subtask {t} epoch {m} by the same run"
        ));
    }
    Ok(())
}

/// A Kafka sink's transaction: the rows it sent or swallowed, and the
/// handle its receipt and its snapshot name.
fn kafka(e: &Evidence, (op, s, n): (OperatorId, u32, u64), doc: &SinkEvidence, rows: &[&Row]) -> Result<(), String> {
    let count = |k: &str| doc.sink.get(k).and_then(Json::as_u64);
    let (sent, suppressed) = (count("rows_sent"), count("rows_suppressed"));
    if count("rows_still_owed").is_none() {
        return Err("its account does not say how many receipted rows it still owed".into());
    }
    if sent.zip(suppressed).map(|(a, b)| a + b) != Some(rows.len() as u64) {
        return Err(format!("it sent {sent:?} rows and swallowed {suppressed:?}; its capture recorded {}", rows.len()));
    }
    // One transactional id and topic per subtask: every interval of the run says the same.
    let same = |k: &str, d: &SinkEvidence| d.sink.get(k) == doc.sink.get(k);
    if let Some(((_, _, m), _)) = e.sink_evidence.iter().find(|((o, t, m), d)| {
        *o == op && *t == s && *m != n && d.run == doc.run && (!same("topic", d) || !same("transactional_id", d))
    }) {
        return Err(format!(
            "its topic or transactional id is not what its evidence of epoch {m} by the same run says"
        ));
    }
    let incarnation = doc.run.as_ref().map(|r| r.incarnation);
    if let Some(topic) =
        e.graph_of_run_at(incarnation, n).and_then(|g| g.operator(op)).and_then(|o| o.spec.params.get("topic"))
    {
        if doc.sink.get("topic") != Some(topic) {
            return Err(format!(
                "it writes topic {}; the job graph's sink writes {topic}",
                doc.sink.get("topic").unwrap_or(&Json::Null)
            ));
        }
    }
    let participant = participant_name(op, s);
    // The handle its receipt names, else the one its snapshot of the checkpoint holds.
    let held = held_handle(e, op, &participant, n);
    let handle = e.receipts.get(&(participant.clone(), n)).map(|r| &r.handle).or(held.as_ref());
    if let Some(h) = handle {
        let said = (
            doc.sink.get("transactional_id").and_then(Json::as_str),
            doc.sink.pointer("/producer/id").and_then(Json::as_i64),
            doc.sink.pointer("/producer/epoch").and_then(Json::as_i64),
            sent,
        );
        let receipt = (
            Some(h.transactional_id.as_str()),
            Some(h.producer_id),
            Some(i64::from(h.epoch)),
            Some(h.rows.0.len() as u64),
        );
        if said != receipt {
            return Err(format!(
                "it names transaction {said:?}; {participant}'s receipt of checkpoint {n} names {receipt:?}"
            ));
        }
        if suppressed == Some(0) {
            digests_agree(e, op, h, rows)?;
        }
    }
    Ok(())
}

/// The transaction a confirmed sink's snapshot of a checkpoint holds.
fn held_handle(e: &Evidence, op: OperatorId, participant: &str, checkpoint: u64) -> Option<TxnHandle> {
    let snapshot = e.snapshots.iter().find(|((_, p, c), _)| p == participant && *c == checkpoint).map(|(_, v)| v)?;
    let confirmation = e.graph_at(checkpoint)?.operator(op)?.spec.descriptor.confirmation?;
    (confirmation.handle)(&snapshot.slots).ok().flatten()
}

/// The rows a Kafka sink's transaction carries, by digest, are its capture's.
fn digests_agree(e: &Evidence, op: OperatorId, handle: &TxnHandle, rows: &[&Row]) -> Result<(), String> {
    let graph = e.graph_at(handle.checkpoint).ok_or("its job graph is needed to know the record keys")?;
    let planned = graph.operator(op).ok_or("its job graph has no such operator")?;
    let input = planned.input_schema.as_ref().ok_or("the sink has no input schema")?;
    let keys: Vec<usize> = planned
        .spec
        .params
        .get("key")
        .and_then(Json::as_array)
        .map(|k| k.iter().filter_map(|c| c.as_str()).filter_map(|c| input.index_of(c)).collect())
        .unwrap_or_default();
    let digests: Vec<u64> = rows
        .iter()
        .map(|row| {
            let (mut line, mut key) = (Vec::new(), Vec::new());
            render_line_into(&mut line, row);
            if !keys.is_empty() {
                let values: Vec<_> = keys.iter().filter_map(|&i| row.get(i).cloned()).collect();
                render_line_into(&mut key, &values);
            }
            row_digest(&key, &line)
        })
        .collect();
    if digests != handle.rows.0 {
        return Err(format!(
            "its transaction carries {} rows by digest; the rows its capture recorded digest otherwise",
            handle.rows.0.len()
        ));
    }
    Ok(())
}

/// Every commit receipt against the handle the sink's snapshot of that
/// checkpoint holds (the engine's walk compares the same two).
fn commit_handles(e: &Evidence, found: &mut Vec<String>) {
    for ((p, c), receipt) in &e.receipts {
        let Some(snapshot) = e.snapshots.iter().find(|((_, q, d), _)| q == p && d == c).map(|(_, v)| v) else {
            continue;
        };
        let Some(graph) = e.graph_at(*c) else { continue };
        let Some((op, _)) = clink_engine::checkpoint::layout::parse_participant_name(p) else { continue };
        let Some(confirmation) = graph.operator(op).and_then(|o| o.spec.descriptor.confirmation) else { continue };
        match (confirmation.handle)(&snapshot.slots) {
            Ok(Some(h)) if h == receipt.handle => {}
            Ok(held) => found.push(format!(
                "{p}'s receipt of checkpoint {c} vouches for {:?}, its snapshot of it holds {:?}: another transaction",
                receipt.handle, held
            )),
            Err(why) => found.push(format!("{p}'s snapshot of checkpoint {c}: {why}")),
        }
    }
}
