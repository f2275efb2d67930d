//! Unit tests of reading, merging, module writing and judging.

use super::modules::{tla_record, tla_string, tla_value};
use super::*;
use crate::tlc::TlcRun;
use serde_json::{Map, Value as Json};

fn vocabulary() -> Vocabulary {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../formal/trace/events.txt")).unwrap();
    parse_vocabulary(&text).unwrap()
}

/// One file's text from (event JSON) lines, stamped as the engine does:
/// seq from 1, ts increasing, proc matching the file name.
fn file(proc: &str, first_ts: u64, events: &[Json]) -> String {
    let mut text = String::new();
    for (i, e) in events.iter().enumerate() {
        let mut line = Map::new();
        line.insert("seq".into(), Json::from(i as u64 + 1));
        line.insert("ts".into(), Json::from(first_ts + 10 * i as u64));
        line.insert("proc".into(), Json::from(proc));
        line.extend(e.as_object().unwrap().clone());
        text.push_str(&Json::Object(line).to_string());
        text.push('\n');
    }
    text
}

fn trigger(ckpt: u64) -> Json {
    serde_json::json!({"event": "Trigger", "job": 1, "ckpt": ckpt, "epoch": 1, "kind": "periodic"})
}

fn placement(sub: &str, role: &str) -> Json {
    serde_json::json!({"event": "Placement", "job": 1, "sub": sub, "worker": 1, "source": role == "source", "role": role})
}

fn read(name: &str, text: &str) -> Result<Vec<TraceLine>, Malformed> {
    read_file(&vocabulary(), name, text)
}

fn malformed(name: &str, text: &str, why: &str) {
    match read(name, text) {
        Err(Malformed(m)) => assert!(m.contains(why), "{m:?} should say {why:?}"),
        Ok(_) => panic!("accepted, should be malformed ({why}):\n{text}"),
    }
}

const C: &str = "coordinator-7-100.ndjson";

#[test]
fn a_well_formed_file_reads() {
    let lines = read(C, &file("coordinator:7", 10, &[trigger(1), trigger(2)])).unwrap();
    assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(lines[0].process, "7-100");
}

#[test]
fn seq_runs_from_one_without_a_gap_in_file_order() {
    let text = file("coordinator:7", 10, &[trigger(1), trigger(2), trigger(3)]);
    let lines: Vec<&str> = text.lines().collect();
    // A line dropped: seq 1, 3.
    malformed(C, &format!("{}\n{}\n", lines[0], lines[2]), "seq 3 where 2 is due");
    // Not from 1.
    malformed(C, &format!("{}\n", lines[1]), "seq 2 where 1 is due");
    // Two lines swapped, each keeping its own seq and ts.
    malformed(C, &format!("{}\n{}\n{}\n", lines[1], lines[0], lines[2]), "seq 2 where 1 is due");
}

#[test]
fn ts_strictly_increases_with_seq() {
    let text = file("coordinator:7", 10, &[trigger(1), trigger(2)]).replace("\"ts\":20", "\"ts\":10");
    malformed(C, &text, "ts 10 does not increase");
    let text = file("coordinator:7", 10, &[trigger(1), trigger(2)]).replace("\"ts\":20", "\"ts\":5");
    malformed(C, &text, "ts 5 does not increase");
}

#[test]
fn a_line_without_job_or_of_another_format_is_malformed_never_skipped() {
    let no_job = serde_json::json!({"event": "Trigger", "ckpt": 1, "epoch": 0, "kind": "periodic"});
    malformed(C, &file("coordinator:7", 10, &[trigger(1), no_job]), "Trigger without job");
    let unknown = serde_json::json!({"event": "Teleport", "job": 1});
    malformed(C, &file("coordinator:7", 10, &[unknown]), "unknown event \"Teleport\"");
    let missing = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": 1, "epoch": 0});
    malformed(C, &file("coordinator:7", 10, &[missing]), "Trigger without kind");
    let extra = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": 1, "epoch": 0, "kind": "final", "x": 1});
    malformed(C, &file("coordinator:7", 10, &[extra]), "field x the vocabulary does not list");
    let typed = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": "1", "epoch": 0, "kind": "final"});
    malformed(C, &file("coordinator:7", 10, &[typed]), "field ckpt is \"1\"");
    malformed(C, "{\"seq\":1,\"ts\":1,\"proc\":\"coordinator:7\",\n", "not JSON");
    malformed(C, "[1]\n", "not a JSON object");
    let text = file("coordinator:7", 10, &[trigger(1)]);
    malformed(C, text.trim_end(), "not terminated");
}

#[test]
fn the_file_name_and_proc_are_the_engines() {
    malformed("events.ndjson", &file("coordinator:7", 10, &[trigger(1)]), "not a trace file name");
    malformed(C, &file("coordinator:8", 10, &[trigger(1)]), "the file is \"coordinator:7\"'s");
    malformed("worker-7-100.ndjson", &file("worker:7", 10, &[trigger(1)]), "in a worker file");
}

/// A vocabulary with pending changes, as events.txt writes them while the
/// engine has not made them yet (the real one has none today).
const PENDING: &str = "Trigger | c | job ckpt epoch kind | Trigger\n\
    RestartOnError | c | job ckpt cause | RestartOnError\n\
    Placement | w | job sub worker source | none\n\
    #+ JobEnds | c | job outcome epoch | none\n\
    #+ Placement | role(source/transform/sink)\n\
    #- RestartOnError | cause\n";

#[test]
fn pending_changes_are_read_when_present() {
    let v = parse_vocabulary(PENDING).unwrap();
    assert_eq!(v.pending, vec!["add event JobEnds", "Placement: add role", "RestartOnError: drop cause"]);
    let read = |name: &str, text: &str| read_file(&v, name, text);
    let bare = serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true});
    let role = serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true, "role": "source"});
    let cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0, "cause": "op-3-1 failed"});
    let no_cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0});
    // A field to be added is optional until the engine writes it; one to be
    // dropped is tolerated until it stops.
    read("worker-7-100.ndjson", &file("worker:7", 10, &[bare, role.clone()])).unwrap();
    let lines = read(C, &file("coordinator:7", 10, &[cause, no_cause])).unwrap();
    // A field the engine is to drop is not written for TLC; one it is to add is.
    assert_eq!(tla_record(&v, &lines[0]).unwrap(), r#"[event |-> "RestartOnError", ckpt |-> 0, job |-> 1]"#);
    let placed = read("worker-7-100.ndjson", &file("worker:7", 10, &[role])).unwrap();
    assert!(tla_record(&v, &placed[0]).unwrap().contains(r#"role |-> "source""#));
}

#[test]
fn the_real_vocabulary_requires_role_and_refuses_cause() {
    let role_missing =
        serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true});
    malformed("worker-7-100.ndjson", &file("worker:7", 10, &[role_missing]), "Placement without role");
    let cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0, "cause": "boom"});
    malformed(C, &file("coordinator:7", 10, &[cause]), "field cause the vocabulary does not list");
    let ends = serde_json::json!({"event": "JobEnds", "job": 1, "outcome": "finished", "epoch": 1});
    let lines = read(C, &file("coordinator:7", 10, &[ends])).unwrap();
    assert_eq!(
        tla_record(&vocabulary(), &lines[0]).unwrap(),
        r#"[event |-> "JobEnds", epoch |-> 1, job |-> 1, outcome |-> "finished"]"#
    );
}

fn lines(name: &str, proc: &str, first_ts: u64, events: &[Json]) -> Vec<TraceLine> {
    read(name, &file(proc, first_ts, events)).unwrap()
}

#[test]
fn merging_orders_by_ts_and_reports_ties_between_processes() {
    let mut all = lines(C, "coordinator:7", 10, &[trigger(1), trigger(2)]); // ts 10, 20
    all.extend(lines("worker-7-100.ndjson", "worker:7", 15, &[placement("op-1-0", "source")])); // ts 15
    all.extend(lines("worker-9-200.ndjson", "worker:9", 20, &[placement("op-3-0", "sink")])); // ts 20: a tie
    let merged = merge(all.clone(), None).unwrap();
    let order: Vec<(u64, &str)> = merged.events.iter().map(|l| (l.ts, l.file.as_str())).collect();
    assert_eq!(
        order,
        vec![(10, C), (15, "worker-7-100.ndjson"), (20, C), (20, "worker-9-200.ndjson")],
        "by ts, a tie by file name"
    );
    assert_eq!(merged.ties.len(), 1, "{:?}", merged.ties);
    assert!(merged.ties[0].contains("share ts 20"));
    // Two files of one process never share a stamp: one clock.
    let mut same = lines(C, "coordinator:7", 10, &[trigger(1)]);
    same.extend(lines("worker-7-100.ndjson", "worker:7", 10, &[placement("op-1-0", "source")]));
    let err = merge(same, None).unwrap_err();
    assert!(err.0.contains("one process never stamps two lines alike"), "{err}");
}

#[test]
fn merging_keeps_one_job_and_refuses_an_unknown_one() {
    let mut all = lines(C, "coordinator:7", 10, &[trigger(1)]);
    let other = serde_json::json!({"event": "Trigger", "job": 2, "ckpt": 1, "epoch": 0, "kind": "periodic"});
    all.extend(lines("coordinator-9-200.ndjson", "coordinator:9", 11, &[other]));
    assert!(merge(all.clone(), None).is_err(), "two jobs: one must be named");
    assert_eq!(merge(all.clone(), Some(2)).unwrap().events.len(), 1);
    assert!(merge(all, Some(3)).is_err());
}

fn merged(events: &[Json]) -> MergedTrace {
    let (coord, work): (Vec<Json>, Vec<Json>) =
        events.iter().cloned().partition(|e| coordinator_event(e["event"].as_str().unwrap()));
    let mut all = lines(C, "coordinator:7", 1, &coord);
    all.extend(lines("worker-7-100.ndjson", "worker:7", 5, &work));
    merge(all, None).unwrap()
}

#[test]
fn the_sinks_come_from_the_placements_never_from_who_acted() {
    let opens = |sub: &str| serde_json::json!({"event": "SinkOpens", "job": 1, "sub": sub, "family": "recoverable", "restore": 0, "recommitted": 0});
    // op-3-1 is placed as a sink and never acts: it is a sink all the same;
    // op-2-0 is a transform whatever it does.
    let m = merged(&[
        placement("op-1-0", "source"),
        placement("op-2-0", "transform"),
        placement("op-3-0", "sink"),
        placement("op-3-1", "sink"),
        opens("op-3-0"),
        trigger(1),
    ]);
    let c = constants(&m).unwrap();
    assert_eq!(c.sinks.iter().map(String::as_str).collect::<Vec<_>>(), vec!["op-3-0", "op-3-1"]);
    assert_eq!(c.source, "op-1-0");
    assert_eq!(c.subtasks.len(), 4);
    // A sink that acted is not a sink unless its Placement says so.
    let m = merged(&[placement("op-1-0", "source"), placement("op-4-0", "sink"), opens("op-3-0"), trigger(1)]);
    assert_eq!(constants(&m).unwrap().sinks.into_iter().collect::<Vec<_>>(), vec!["op-4-0"]);
    // No Placement: nothing to validate.
    assert!(constants(&merged(&[trigger(1)])).is_err());
    // No sink placed: nothing to validate.
    assert!(constants(&merged(&[placement("op-1-0", "source"), placement("op-2-0", "transform")])).is_err());
    // Two sources: outside the model.
    let two = merged(&[placement("op-1-0", "source"), placement("op-1-1", "source"), placement("op-3-0", "sink")]);
    assert!(constants(&two).is_err());
}

#[test]
fn restarts_failed_ends_and_the_first_epoch_are_read_off_the_trace() {
    let restart = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0});
    let failed = serde_json::json!({"event": "JobEnds", "job": 1, "outcome": "failed", "epoch": 1});
    let recovers = serde_json::json!({"event": "CoordRecovers", "job": 1, "epoch": 2, "completed": 0, "confirmed": 0});
    let placed = [placement("op-1-0", "source"), placement("op-3-0", "sink")];
    let fresh = merged(&[placed[0].clone(), placed[1].clone(), trigger(1), restart, failed.clone()]);
    let c = constants(&fresh).unwrap();
    assert_eq!((c.restarts, c.task_errors, c.first_epoch), (1, 2, 1), "a fresh start claims epoch 1");
    let resumed = merged(&[recovers, placed[0].clone(), placed[1].clone(), trigger(1), failed]);
    let c = constants(&resumed).unwrap();
    assert_eq!((c.restarts, c.task_errors, c.first_epoch, c.deaths), (0, 1, 0, 1), "a recovery names its own");
}

#[test]
fn the_modules_are_literals_of_what_the_module_reads() {
    let m = merged(&[
        placement("op-1-0", "source"),
        placement("op-5-0", "sink"),
        serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-5-0", "family": "recoverable", "restore": 0, "recommitted": 0}),
        trigger(1),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let c = write_modules(&vocabulary(), dir.path(), &m).unwrap();
    assert_eq!(c.sinks.into_iter().collect::<Vec<_>>(), vec!["op-5-0"]);
    let events = std::fs::read_to_string(dir.path().join("TraceEvents.tla")).unwrap();
    assert!(
        events.contains(r#"[event |-> "Trigger", ckpt |-> 1, epoch |-> 1, job |-> 1, kind |-> "periodic"]"#),
        "{events}"
    );
    assert!(!events.contains("ts |->") && !events.contains("seq |->") && !events.contains("proc |->"));
    let constants = std::fs::read_to_string(dir.path().join("TraceConstants.tla")).unwrap();
    assert!(constants.contains("TraceSinks == {\"op-5-0\"}") && constants.contains("TraceSource == \"op-1-0\""));
    assert!(constants.contains("TraceFirstEpoch == 1\n") && constants.contains("TraceTaskErrors == 0\n"));
    assert!(constants.contains("TraceFamily == \"recoverable\"\n"), "{constants}");
    assert!(constants.contains("TraceWalkStops == 0\n") && constants.contains("TraceExpiries == 0\n"), "{constants}");
    assert!(events.contains(r#"role |-> "sink""#), "the role is written for the module: {events}");
}

#[test]
fn tlc_output_is_read_into_a_verdict() {
    let run = |exit: i32, output: &str| TlcRun { exit: Some(exit), output: output.into(), elapsed: Default::default() };
    let events = vec![trigger(1), trigger(2), trigger(3)];
    let accepted = "<<\"trace-progress\", 1>>\n<<\"trace-progress\", 3>>\n<<\"trace-accepted\", 3>>\n";
    assert_eq!(judge(&run(0, accepted), &events), Verdict::Accepted { events: 3 });
    let rejected = "<<\"trace-progress\", 1>>\n<<\"trace-progress\", 2>>\n";
    assert!(matches!(judge(&run(0, rejected), &events), Verdict::Rejected { k: 3, .. }));
    assert!(matches!(judge(&run(0, ""), &events), Verdict::Rejected { k: 1, .. }));
    let violated = "Error: Invariant NoLoss is violated.\nState 1:\n/\\ pos = 0\nState 2:\n/\\ pos = 2\n";
    assert_eq!(judge(&run(12, violated), &events), Verdict::Violated { invariant: "NoLoss".into(), k: 2 });
    assert!(matches!(judge(&run(12, "no invariant named"), &events), Verdict::Error(_)));
    assert!(matches!(judge(&run(10, "Assumption line 3 is false"), &events), Verdict::Error(_)));
}

#[test]
fn strings_are_escaped_and_big_numbers_refused() {
    assert_eq!(tla_string(r#"a"b\c"#), r#""a\"b\\c""#);
    assert!(tla_value("ts", &Json::from(1u64 << 40)).is_err());
}

#[test]
fn the_vocabulary_has_no_pending_change_left_and_parses_strictly() {
    let v = vocabulary();
    assert!(v.pending.is_empty(), "{:?}", v.pending);
    assert!(!v.events["JobEnds"].pending);
    assert_eq!(v.events["JobEnds"].fields, vec!["job", "outcome", "epoch"]);
    assert_eq!(v.events["Placement"].fields, vec!["job", "sub", "worker", "source", "role"]);
    assert_eq!(v.events["RestartOnError"].fields, vec!["job", "ckpt"]);
    assert!(parse_vocabulary("Trigger | c | ckpt job | s\n").is_err(), "job first");
    assert!(parse_vocabulary("Trigger | c | job nope | s\n").is_err(), "unknown field type");
    assert!(parse_vocabulary("#- Trigger | kind\n").is_err(), "no such event");
    assert!(parse_vocabulary("Trigger | c | job ckpt | s\n#- Trigger | kind\n").is_err(), "no such field");
    // The commit-confirmed family's open: orphan and settled are optional.
    assert_eq!(v.events["SinkOpens"].fields, vec!["job", "sub", "family", "restore", "recommitted"]);
    assert_eq!(v.events["SinkOpens"].optional, vec!["orphan", "settled"]);
    assert_eq!(v.events["WalkProbes"].fields, vec!["job", "ckpt", "sub", "verdict"]);
    assert!(v.events.values().filter(|s| s.optional.is_empty()).count() == v.events.len() - 1, "only SinkOpens");
}

fn problem(text: &str) -> VocabularyProblem {
    match parse_vocabulary(text) {
        Err(VocabularyError::Line { problem, .. }) => problem,
        other => panic!("{text:?} should be refused, got {other:?}"),
    }
}

#[test]
fn an_optional_field_is_marked_with_a_question_mark_and_only_where_it_means_something() {
    let v = parse_vocabulary("SinkOpens | w | job sub orphan? settled?(receipt/aborted) | s\n").unwrap();
    let spec = &v.events["SinkOpens"];
    assert_eq!(
        (spec.fields.clone(), spec.optional.clone()),
        (vec!["job".into(), "sub".into()], vec!["orphan".to_string(), "settled".to_string()])
    );
    assert!(v.pending.is_empty(), "an optional field is no pending change");
    assert_eq!(problem("Trigger | c | job? ckpt | s\n"), VocabularyProblem::OptionalNotAllowed("job".into()));
    assert_eq!(problem("Trigger | c | job ckpt ckpt? | s\n"), VocabularyProblem::FieldTwice("ckpt".into()));
    assert_eq!(problem("Trigger | c | job nope? | s\n"), VocabularyProblem::UnknownFieldType("nope".into()));
    let pending = "Trigger | c | job ckpt | s\n#+ Trigger | epoch?\n";
    assert_eq!(problem(pending), VocabularyProblem::OptionalNotAllowed("epoch".into()));
    // A pending new event may carry an optional field; pending lines still work.
    let v = parse_vocabulary("#+ WalkDecides | c | job ckpt? | s\n").unwrap();
    assert_eq!(v.events["WalkDecides"].optional, vec!["ckpt"]);
    assert_eq!(v.pending, vec!["add event WalkDecides"]);
}

#[test]
fn an_optional_field_may_be_on_a_line_or_not_and_is_written_for_tlc_when_there() {
    let opens = |extra: &[(&str, Json)]| {
        let mut e = serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-3-0", "family": "confirmed", "restore": 1, "recommitted": 0});
        for (k, v) in extra {
            e.as_object_mut().unwrap().insert(k.to_string(), v.clone());
        }
        e
    };
    let both = opens(&[("orphan", Json::from(2)), ("settled", Json::from("aborted"))]);
    let lines = read("worker-7-100.ndjson", &file("worker:7", 10, &[opens(&[]), both])).unwrap();
    assert!(!tla_record(&vocabulary(), &lines[0]).unwrap().contains("orphan"));
    let record = tla_record(&vocabulary(), &lines[1]).unwrap();
    assert!(record.contains(r#"orphan |-> 2"#) && record.contains(r#"settled |-> "aborted""#), "{record}");
    let typed = opens(&[("orphan", Json::from("2"))]);
    malformed("worker-7-100.ndjson", &file("worker:7", 10, &[typed]), "field orphan is \"2\"");
    let other = opens(&[("verdict", Json::from("committed"))]);
    malformed("worker-7-100.ndjson", &file("worker:7", 10, &[other]), "field verdict the vocabulary does not list");
}

fn kafka_sink_lines(family: &str) -> Vec<Json> {
    vec![
        placement("op-1-0", "source"),
        placement("op-3-0", "sink"),
        serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-3-0", "family": family, "restore": 0, "recommitted": 0}),
    ]
}

#[test]
fn the_family_is_the_one_the_sinks_lines_name() {
    assert_eq!(family(&merged(&kafka_sink_lines("confirmed"))).unwrap(), SinkFamily::Confirmed);
    assert_eq!(family(&merged(&kafka_sink_lines("recoverable"))).unwrap(), SinkFamily::Recoverable);
    let mut mixed = kafka_sink_lines("confirmed");
    mixed.push(serde_json::json!({"event": "SinkPrepare", "job": 1, "sub": "op-3-0", "ckpt": 1, "family": "recoverable", "staged": true}));
    let e = family(&merged(&mixed)).unwrap_err();
    assert!(
        matches!(&e, ConstantsError::MixedFamilies { .. }) && e.to_string().contains("a job's sinks are of one"),
        "{e}"
    );
    let e = family(&merged(&kafka_sink_lines("xa"))).unwrap_err();
    assert!(matches!(&e, ConstantsError::UnknownFamily { family, .. } if family == "xa"), "{e}");
    // No sink line names one: the family's own events decide.
    let placed = vec![placement("op-1-0", "source"), placement("op-3-0", "sink"), trigger(1)];
    assert_eq!(family(&merged(&placed)).unwrap(), SinkFamily::Recoverable);
    let mut walked = placed.clone();
    walked.push(serde_json::json!({"event": "WalkFinishes", "job": 1, "confirmed": 0}));
    assert_eq!(family(&merged(&walked)).unwrap(), SinkFamily::Confirmed);
}

#[test]
fn walk_stops_and_expiries_are_read_off_the_trace() {
    let mut events = kafka_sink_lines("confirmed");
    events.extend([
        serde_json::json!({"event": "WalkExhausted", "job": 1, "ckpt": 2}),
        serde_json::json!({"event": "WalkCancelled", "job": 1, "ckpt": 2}),
        serde_json::json!({"event": "WalkRetries", "job": 1, "ckpt": 2, "sub": "op-3-0"}),
        serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-3-0", "family": "confirmed", "restore": 1, "recommitted": 0, "orphan": 2, "settled": "not_committed"}),
        serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-3-0", "family": "confirmed", "restore": 1, "recommitted": 0, "orphan": 2, "settled": "aborted"}),
    ]);
    let m = merged(&events);
    let c = constants(&m).unwrap();
    assert_eq!((c.family, c.walk_stops, c.expiries), (SinkFamily::Confirmed, 2, 1));
    let dir = tempfile::tempdir().unwrap();
    write_modules(&vocabulary(), dir.path(), &m).unwrap();
    let text = std::fs::read_to_string(dir.path().join("TraceConstants.tla")).unwrap();
    assert!(text.contains("TraceFamily == \"confirmed\"\nTraceWalkStops == 2\nTraceExpiries == 1\n====\n"), "{text}");
    // Mixed families give no constants: the modules are not written.
    let mut mixed = kafka_sink_lines("confirmed");
    mixed.push(serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-3-0", "family": "recoverable", "restore": 0, "recommitted": 0}));
    let empty = tempfile::tempdir().unwrap();
    assert!(write_modules(&vocabulary(), empty.path(), &merged(&mixed)).is_err());
    assert!(!empty.path().join("TraceConstants.tla").exists());
}

mod vocabulary_parsing {
    use super::super::*;
    use proptest::prelude::*;

    const FIELDS: &[&str] = &["ckpt", "epoch", "sub", "verdict", "orphan", "settled", "resolving", "restore"];

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
            let _ = parse_vocabulary(&text);
        }

        #[test]
        fn arbitrary_lines_of_entry_shape_never_panic(
            lines in proptest::collection::vec("(#[+-])? ?[A-Za-z]{0,6}( ?\\| ?[a-z?()/ ]{0,20}){0,4}", 0..8)
        ) {
            let _ = parse_vocabulary(&lines.join("\n"));
        }

        /// An entry with any subset of fields, each required or optional,
        /// reads back as written: the required ones in order, the optional
        /// ones in order, none lost or doubled.
        #[test]
        fn an_entry_reads_back_as_written(
            picks in proptest::collection::vec((0..FIELDS.len(), any::<bool>(), any::<bool>()), 0..8)
        ) {
            let mut seen = std::collections::BTreeSet::new();
            let picks: Vec<_> = picks.into_iter().filter(|(i, _, _)| seen.insert(*i)).collect();
            let tokens: Vec<String> = picks
                .iter()
                .map(|(i, opt, values)| {
                    format!("{}{}{}", FIELDS[*i], if *opt { "?" } else { "" }, if *values { "(a/b)" } else { "" })
                })
                .collect();
            let text = format!("Ev | coordinator (x) | job {} | step\n", tokens.join(" "));
            let v = parse_vocabulary(&text).unwrap();
            let spec = &v.events["Ev"];
            let want_required: Vec<String> = std::iter::once("job".to_string())
                .chain(picks.iter().filter(|p| !p.1).map(|p| FIELDS[p.0].to_string()))
                .collect();
            let want_optional: Vec<String> = picks.iter().filter(|p| p.1).map(|p| FIELDS[p.0].to_string()).collect();
            prop_assert_eq!(&spec.fields, &want_required);
            prop_assert_eq!(&spec.optional, &want_optional);
            prop_assert!(v.pending.is_empty());
        }
    }
}

/// A trace directory of one coordinator file, with `extra` added to it.
fn run_dir(extra: impl FnOnce(&std::path::Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(C), file("coordinator:7", 100, &[trigger(1)])).unwrap();
    std::fs::write(dir.path().join("expected.txt"), "not a trace file\n").unwrap();
    extra(dir.path());
    dir
}

fn refused(dir: &tempfile::TempDir, why: &str) {
    match read_run(&vocabulary(), dir.path()) {
        Err(Malformed(m)) => assert!(m.contains(why), "{m:?} should say {why:?}"),
        Ok(lines) => panic!("read {} lines; the directory should be refused ({why})", lines.len()),
    }
}

#[test]
fn a_plain_run_directory_reads_and_other_regular_files_are_not_traces() {
    let dir = run_dir(|_| {});
    assert_eq!(read_run(&vocabulary(), dir.path()).unwrap().len(), 1);
}

#[test]
fn an_entry_that_is_not_a_plain_readable_file_refuses_the_run_naming_it() {
    // A link, even to a good trace file: never followed, never skipped.
    let dir = run_dir(|d| {
        std::fs::write(d.join("elsewhere"), file("worker:7", 105, &[placement("op-1-0", "source")])).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("worker-7-100.ndjson")).unwrap();
    });
    refused(&dir, "worker-7-100.ndjson: a symbolic link");
    // A link to a directory.
    let dir = run_dir(|d| std::os::unix::fs::symlink(d, d.join("loop")).unwrap());
    refused(&dir, "loop: a symbolic link");
    // A FIFO: not a regular file (reading it would block).
    let dir = run_dir(|d| {
        let ok = std::process::Command::new("mkfifo").arg(d.join("worker-7-100.ndjson")).status().unwrap().success();
        assert!(ok, "mkfifo");
    });
    refused(&dir, "worker-7-100.ndjson: not a regular file");
    // A directory with a trace file's name.
    let dir = run_dir(|d| std::fs::create_dir(d.join("worker-7-100.ndjson")).unwrap());
    refused(&dir, "worker-7-100.ndjson: not a regular file");
    // A name that is not UTF-8.
    let dir = run_dir(|d| {
        use std::os::unix::ffi::OsStrExt;
        std::fs::write(d.join(std::ffi::OsStr::from_bytes(b"worker-\xff.ndjson")), b"").unwrap();
    });
    refused(&dir, "a name that is not UTF-8");
}

#[test]
fn two_files_claiming_one_process_are_refused_naming_both() {
    let dir = run_dir(|d| {
        std::fs::write(d.join("coordinator-7-101.ndjson"), file("coordinator:7", 100, &[trigger(1)])).unwrap();
    });
    refused(&dir, "coordinator-7-100.ndjson and coordinator-7-101.ndjson both claim coordinator process 7");
    // A pid the system gave again later, to a process that started after the
    // first one's last line: two processes, not one claimed twice.
    let dir = run_dir(|d| {
        std::fs::write(d.join("coordinator-7-900.ndjson"), file("coordinator:7", 900, &[trigger(1)])).unwrap();
    });
    assert_eq!(read_run(&vocabulary(), dir.path()).unwrap().len(), 2);
    // A name whose numbers are not canonical is not the engine's.
    malformed("coordinator-07-100.ndjson", &file("coordinator:07", 1, &[trigger(1)]), "not a trace file name");
}

#[test]
fn a_rescaled_run_is_out_of_scope_and_counted_and_others_are_not() {
    let rescale =
        |op: u64| serde_json::json!({"event": "Rescale", "job": 1, "op": op, "from": 2, "to": 3, "mode": "restore"});
    let plain = merged(&[placement("op-1-0", "source"), trigger(1)]);
    assert_eq!(out_of_scope(&plain), None);
    let rescaled = merged(&[placement("op-1-0", "source"), trigger(1), rescale(3), rescale(5)]);
    let scope = out_of_scope(&rescaled).unwrap();
    assert_eq!((scope.marker, scope.count), ("Rescale", 2));
    assert!(scope.to_string().contains("2 Rescale scope marker"), "{scope}");
    // A Rescale line is read strictly like any other: a field missing is malformed.
    let bare = serde_json::json!({"event": "Rescale", "job": 1, "op": 3, "from": 2, "to": 3});
    malformed(C, &file("coordinator:7", 10, &[bare]), "mode");
}
