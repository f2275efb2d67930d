use super::checks::{unknown_placeholder, MAX_PATH_BYTES};
use super::*;
use proptest::prelude::*;
use serde_json::json;

const EXAMPLE: &str = include_str!("../../examples/audit.json");

fn example() -> Json {
    serde_json::from_str(EXAMPLE).unwrap()
}

/// The example with the value at `pointer` replaced.
fn with(pointer: &str, value: Json) -> Json {
    let mut doc = example();
    *doc.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer} in the example")) = value;
    doc
}

/// The example without the field at `pointer`.
fn without(pointer: &str) -> Json {
    let mut doc = example();
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    doc.pointer_mut(parent).unwrap().as_object_mut().unwrap().remove(field).unwrap();
    doc
}

/// Asserts the document is refused naming `field`, with `expected` in the message.
fn refused(doc: &Json, field: &str, expected: &str) -> String {
    let bytes = serde_json::to_vec(doc).unwrap();
    let err = AuditConfig::from_slice(&bytes).expect_err("refused");
    assert_eq!(err.field(), field, "{err}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("{field}: ")), "{message}");
    assert!(message.contains(expected), "{message} lacks {expected:?}");
    message
}

#[test]
fn the_example_reads_with_every_value() {
    let c = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(c.job.id, "orders-to-clickhouse");
    assert_eq!(c.job.checkpoint_dir, "/var/lib/clink/orders/checkpoints");
    assert_eq!(c.job.trace_dir, "/var/lib/clink/orders/trace");
    assert_eq!(c.destination.table, "audit.orders_out");
    assert_eq!(c.reference.argv.len(), 4);
    assert_eq!(c.reference.with_state_in, ["--state-in={state_in}"]);
    assert_eq!(c.selection, Selection::Sequential);
    assert_eq!(c.start_at, StartAt::Earliest);
    assert_eq!(c.bounds.child_timeout_s, 300);
    assert_eq!(c.bounds.bundle_bytes, 4_294_967_296);
    assert_eq!(c.backoff, Backoff { initial_s: 30, max_s: 900 });
    assert_eq!((c.max_attempts, c.retain_passed, c.retain_states), (5, 20, 3));
    assert_eq!(c.disk_budget_bytes, 107_374_182_400);
    assert_eq!(c.state_dir, "/var/lib/clink-audit/orders");
}

#[test]
fn the_other_selection_and_start_read() {
    let mut doc = with("/selection", json!("latest-only"));
    doc["start_at"] = json!("latest");
    let c = AuditConfig::from_json(&doc).unwrap();
    assert_eq!((c.selection, c.start_at), (Selection::LatestOnly, StartAt::Latest));
}

#[test]
fn each_child_receives_only_its_own_variables() {
    let c = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(c.child_env(ChildKind::Reference), ["CLINK_REFERENCE_KAFKA_PASSWORD"]);
    assert_eq!(
        c.child_env(ChildKind::Reconcile),
        ["CLINK_AUDIT_CLICKHOUSE_URL", "CLINK_AUDIT_CLICKHOUSE_USER", "CLINK_AUDIT_CLICKHOUSE_PASSWORD"]
    );
    for kind in [ChildKind::Collect, ChildKind::Scope, ChildKind::Verify] {
        assert!(c.child_env(kind).is_empty(), "{kind:?}");
    }
    assert_eq!(ChildKind::ALL.len(), 5);
}

#[test]
fn a_variable_the_reference_shares_with_the_destination_is_refused() {
    refused(
        &with("/reference/credential_env", json!(["CLINK_AUDIT_CLICKHOUSE_PASSWORD"])),
        "reference.credential_env[0]",
        "receives only its own",
    );
    refused(
        &with("/reference/credential_env", json!(["OK", "CLINK_AUDIT_CLICKHOUSE_URL"])),
        "reference.credential_env[1]",
        "receives only its own",
    );
}

#[test]
fn a_credential_written_as_a_value_is_refused_and_never_shown() {
    let values = [
        "hunter2",
        "PASSWORD=hunter2",
        "http://user:pw@127.0.0.1:8123",
        "/run/secrets/pw",
        "ABC:DEF",
        "1PASSWORD",
        "",
        "WITH SPACE",
    ];
    for value in values {
        for (pointer, field) in [
            ("/destination/credential_env/0", "destination.credential_env[0]"),
            ("/reference/credential_env/0", "reference.credential_env[0]"),
            ("/destination/endpoint_env", "destination.endpoint_env"),
        ] {
            let message = refused(&with(pointer, json!(value)), field, "expected an environment variable name");
            if !value.is_empty() {
                assert!(!message.contains(value), "{message} shows the value");
            }
        }
    }
    let message = refused(&with("/destination/endpoint_env", json!("https://db")), "destination.endpoint_env", "");
    assert!(message.contains("looks like a value"), "{message}");
}

#[test]
fn a_credential_of_the_wrong_type_or_twice_is_refused() {
    refused(&with("/reference/credential_env", json!("A_B")), "reference.credential_env", "expected an array");
    refused(&with("/reference/credential_env", json!([7])), "reference.credential_env[0]", "found a number");
    refused(&with("/destination/credential_env", json!(["A", "A"])), "destination.credential_env[1]", "named twice");
    let many: Vec<String> = (0..65).map(|i| format!("V{i}")).collect();
    refused(&with("/destination/credential_env", json!(many)), "destination.credential_env", "at most 64");
}

#[test]
fn the_endpoint_variable_named_again_as_a_credential_is_refused() {
    refused(
        &with("/destination/credential_env/0", json!("CLINK_AUDIT_CLICKHOUSE_URL")),
        "destination.credential_env[0]",
        "names destination.endpoint_env again",
    );
}

#[test]
fn malformed_json_is_refused() {
    for bytes in [&b"{"[..], b"", b"\xff\xfe", b"{\"format\": }", b"[] []"] {
        let err = AuditConfig::from_slice(bytes).expect_err("refused");
        assert_eq!(err.field(), "$");
        assert!(err.to_string().contains("not JSON"), "{err}");
    }
}

#[test]
fn a_document_that_is_not_an_object_is_refused() {
    refused(&json!([1, 2]), "$", "expected an object");
}

#[test]
fn a_deep_document_is_refused() {
    let mut doc = json!(1);
    for _ in 0..MAX_DEPTH {
        doc = json!([doc]);
    }
    let doc = with("/job/id", doc);
    let err = AuditConfig::from_json(&doc).expect_err("refused");
    assert!(matches!(err, ConfigError::TooDeep(_)), "{err}");
}

#[test]
fn the_wrong_format_or_version_is_refused() {
    refused(&with("/format", json!("clink-audit-report")), "format", "expected \"clink-audit-config\"");
    refused(&with("/format", json!(1)), "format", "expected a string");
    refused(&with("/version", json!(2)), "version", "expected 1");
    refused(&with("/version", json!("1")), "version", "non-negative integer");
}

#[test]
fn an_unknown_field_anywhere_is_refused() {
    for (section, field) in [
        ("", "retries"),
        ("/job", "jobid"),
        ("/destination", "password"),
        ("/reference", "shell"),
        ("/bounds", "child_timeout"),
        ("/backoff", "factor"),
    ] {
        let mut doc = example();
        doc.pointer_mut(section).unwrap().as_object_mut().unwrap().insert(field.into(), json!(1));
        let path = if section.is_empty() { field.to_string() } else { format!("{}.{field}", &section[1..]) };
        refused(&doc, &path, "unknown field");
    }
}

#[test]
fn a_missing_field_anywhere_is_refused() {
    let fields = [
        "/format",
        "/version",
        "/job",
        "/job/id",
        "/job/checkpoint_dir",
        "/job/ha_dir",
        "/job/capture_dir",
        "/job/trace_dir",
        "/destination",
        "/destination/endpoint_env",
        "/destination/table",
        "/destination/key",
        "/destination/credential_env",
        "/destination/user_env",
        "/destination/password_env",
        "/reference",
        "/reference/argv",
        "/reference/with_state_in",
        "/reference/from_run_start",
        "/reference/credential_env",
        "/selection",
        "/start_at",
        "/bounds",
        "/bounds/child_timeout_s",
        "/bounds/bundle_bytes",
        "/bounds/bundle_files",
        "/bounds/rows",
        "/bounds/query_timeout_s",
        "/backoff",
        "/backoff/initial_s",
        "/backoff/max_s",
        "/max_attempts",
        "/retain_passed",
        "/retain_states",
        "/disk_budget_bytes",
        "/state_dir",
    ];
    for pointer in fields {
        refused(&without(pointer), &pointer[1..].replace('/', "."), "missing");
    }
}

#[test]
fn a_value_of_the_wrong_type_is_refused() {
    refused(&with("/job", json!("orders")), "job", "expected an object");
    refused(&with("/job/id", json!(7)), "job.id", "expected a string");
    refused(&with("/bounds/rows", json!("100")), "bounds.rows", "non-negative integer");
    refused(&with("/bounds/rows", json!(1.5)), "bounds.rows", "non-negative integer");
    refused(&with("/bounds/rows", json!(-1)), "bounds.rows", "non-negative integer");
    refused(&with("/max_attempts", json!(null)), "max_attempts", "non-negative integer");
    refused(&with("/selection", json!(true)), "selection", "expected a string");
    refused(&with("/state_dir", json!(["/x"])), "state_dir", "expected a string");
}

#[test]
fn an_unknown_choice_is_refused() {
    refused(&with("/selection", json!("sample")), "selection", "\"sequential\" or \"latest-only\"");
    refused(&with("/selection", json!("latest_only")), "selection", "found \"latest_only\"");
    refused(&with("/start_at", json!("now")), "start_at", "\"earliest\" or \"latest\"");
}

#[test]
fn zero_and_absurd_bounds_are_refused() {
    let cases = [
        ("/bounds/child_timeout_s", 0, "bounds.child_timeout_s"),
        ("/bounds/child_timeout_s", DAY_S + 1, "bounds.child_timeout_s"),
        ("/bounds/bundle_bytes", 0, "bounds.bundle_bytes"),
        ("/bounds/bundle_bytes", (1 << 40) + 1, "bounds.bundle_bytes"),
        ("/bounds/bundle_files", 0, "bounds.bundle_files"),
        ("/bounds/bundle_files", 10_000_001, "bounds.bundle_files"),
        ("/bounds/rows", 0, "bounds.rows"),
        ("/bounds/rows", u64::MAX, "bounds.rows"),
        ("/bounds/query_timeout_s", 0, "bounds.query_timeout_s"),
        ("/backoff/initial_s", 0, "backoff.initial_s"),
        ("/backoff/max_s", 8 * DAY_S, "backoff.max_s"),
        ("/max_attempts", 0, "max_attempts"),
        ("/max_attempts", 1001, "max_attempts"),
        ("/retain_passed", 100_001, "retain_passed"),
        ("/retain_states", 0, "retain_states"),
        ("/disk_budget_bytes", 0, "disk_budget_bytes"),
        ("/disk_budget_bytes", (1 << 50) + 1, "disk_budget_bytes"),
    ];
    for (pointer, value, field) in cases {
        refused(&with(pointer, json!(value)), field, "expected an integer from");
    }
}

#[test]
fn the_edges_of_each_range_are_accepted() {
    let mut doc = example();
    doc["bounds"]["child_timeout_s"] = json!(1);
    doc["bounds"]["query_timeout_s"] = json!(DAY_S);
    doc["max_attempts"] = json!(1);
    doc["retain_passed"] = json!(0);
    doc["retain_states"] = json!(1);
    doc["backoff"] = json!({"initial_s": 60, "max_s": 60});
    let c = AuditConfig::from_json(&doc).unwrap();
    assert_eq!((c.max_attempts, c.retain_passed, c.retain_states), (1, 0, 1));
}

#[test]
fn bounds_that_contradict_each_other_are_refused() {
    refused(&with("/backoff/max_s", json!(10)), "backoff.max_s", "at least backoff.initial_s (30)");
    refused(&with("/disk_budget_bytes", json!(1024)), "disk_budget_bytes", "at least bounds.bundle_bytes");
}

#[test]
fn relative_and_hostile_paths_are_refused() {
    let paths = [
        ("/job/checkpoint_dir", "job.checkpoint_dir"),
        ("/job/ha_dir", "job.ha_dir"),
        ("/job/capture_dir", "job.capture_dir"),
        ("/job/trace_dir", "job.trace_dir"),
        ("/state_dir", "state_dir"),
    ];
    for (pointer, field) in paths {
        refused(&with(pointer, json!("var/lib/x")), field, "expected an absolute path");
        refused(&with(pointer, json!("./x")), field, "expected an absolute path");
        refused(&with(pointer, json!("")), field, "empty string");
        refused(&with(pointer, json!("/var/lib/../x")), field, "without `..`");
        refused(&with(pointer, json!("/var/lib/x\n")), field, "control characters");
        refused(&with(pointer, json!(format!("/{}", "a".repeat(MAX_PATH_BYTES)))), field, "at most 4096");
    }
}

#[test]
fn a_state_dir_overlapping_the_jobs_is_refused() {
    for dir in ["/var/lib/clink/orders/ha", "/var/lib/clink/orders/ha/audit", "/var/lib/clink/orders", "/"] {
        refused(&with("/state_dir", json!(dir)), "state_dir", "apart from job.");
    }
    // A sibling whose name only begins like a job directory is apart.
    AuditConfig::from_json(&with("/state_dir", json!("/var/lib/clink/orders/ha-audit"))).unwrap();
}

#[test]
fn a_hostile_job_id_or_table_is_refused_and_metacharacters_kept() {
    refused(&with("/job/id", json!("")), "job.id", "1 to 256 bytes");
    refused(&with("/job/id", json!("a\u{0}b")), "job.id", "control characters");
    refused(&with("/job/id", json!("x".repeat(257))), "job.id", "1 to 256 bytes");
    let c = AuditConfig::from_json(&with("/job/id", json!("orders; rm -rf / $(x)"))).unwrap();
    assert_eq!(c.job.id, "orders; rm -rf / $(x)");
    for table in ["", "a.b.c", "orders; DROP", "1orders", "a.", "`t`"] {
        refused(&with("/destination/table", json!(table)), "destination.table", "`database.table`");
    }
    AuditConfig::from_json(&with("/destination/table", json!("orders_out"))).unwrap();
}

#[test]
fn a_reference_command_as_one_string_is_refused() {
    let line = "/usr/local/bin/clink-reference-audit --scope={scope} --out={out}";
    refused(&with("/reference/argv", json!(line)), "reference.argv", "without a shell");
    refused(&with("/reference/argv", json!([line])), "reference.argv[0]", "without a shell");
    refused(&with("/reference/with_state_in", json!("--state-in={state_in}")), "reference.with_state_in", "shell");
}

#[test]
fn the_reference_program_must_be_an_absolute_path() {
    let argv = |program: &str| json!([program, "--scope={scope}", "--out={out}", "--state-out={state_out}"]);
    refused(&with("/reference/argv", argv("clink-reference-audit")), "reference.argv[0]", "absolute path");
    refused(&with("/reference/argv", argv("./ref")), "reference.argv[0]", "absolute path");
    refused(&with("/reference/argv", argv("/bin/{scope}")), "reference.argv[0]", "without a placeholder");
    refused(&with("/reference/argv", json!([])), "reference.argv", "expected 1 to 256 arguments, found 0");
    refused(&with("/reference/argv", json!(["/bin/ref", 3])), "reference.argv[1]", "expected a string");
    refused(&with("/reference/argv/1", json!("a\u{0}b")), "reference.argv[1]", "without NUL");
}

#[test]
fn an_unknown_placeholder_is_refused() {
    for (arg, shown) in [
        ("--scope={scopes}", "\"{scopes}\""),
        ("{}", "\"{}\""),
        ("{SCOPE}", "\"{SCOPE}\""),
        ("--x={out}{job}", "\"{job}\""),
        ("{{env}", "\"{env}\""),
        ("{\"a\":1}", "{\\\"a\\\":1}"),
    ] {
        let mut doc = example();
        doc["reference"]["argv"].as_array_mut().unwrap().push(json!(arg));
        let message = refused(&doc, "reference.argv[4]", "unknown placeholder");
        assert!(message.contains(shown), "{message} lacks {shown}");
    }
    refused(&with("/reference/with_state_in/0", json!("{state}")), "reference.with_state_in[0]", "unknown placeholder");
}

#[test]
fn braces_that_are_no_placeholder_are_text() {
    assert_eq!(unknown_placeholder("a{b"), None);
    assert_eq!(unknown_placeholder("}{"), None);
    assert_eq!(unknown_placeholder("{out}}"), None);
    assert_eq!(unknown_placeholder("{{out}"), None);
    assert_eq!(unknown_placeholder("{scope}{out}{state_in}{state_out}"), None);
    assert_eq!(unknown_placeholder("{scope}{x}"), Some("{x}"));
}

#[test]
fn the_placeholders_each_belong_where_they_are_needed() {
    refused(&with("/reference/argv", json!(["/bin/ref", "{out}"])), "reference.argv", "{scope} and {out}");
    refused(&with("/reference/argv", json!(["/bin/ref", "{scope}"])), "reference.argv", "{scope} and {out}");
    refused(
        &with("/reference/argv", json!(["/bin/ref", "{scope}", "{out}", "{state_out}", "--in={state_in}"])),
        "reference.argv[4]",
        "belongs in reference.with_state_in",
    );
    refused(&with("/reference/with_state_in", json!(["--fresh"])), "reference.with_state_in", "expected {state_in}");
    refused(
        &with("/reference/argv", json!(["/bin/ref", "{scope}", "{out}"])),
        "reference.argv",
        "expected {state_out}",
    );
    // A reference that cannot start from a state needs no {state_out}.
    let mut doc = with("/reference/argv", json!(["/bin/ref", "{scope}", "{out}"]));
    doc["reference"]["with_state_in"] = json!([]);
    AuditConfig::from_json(&doc).unwrap();
}

#[test]
fn a_file_is_read_within_its_bound_and_a_larger_one_is_refused() {
    let dir = std::env::temp_dir().join(format!("clink-audit-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("audit.json");
    std::fs::write(&good, EXAMPLE).unwrap();
    assert_eq!(AuditConfig::read(&good).unwrap(), AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap());

    let large = dir.join("large.json");
    let file = std::fs::File::create(&large).unwrap();
    file.set_len(MAX_CONFIG_BYTES + 1).unwrap();
    let err = AuditConfig::read(&large).expect_err("refused");
    assert!(matches!(err, ConfigError::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("exceed the limit of 1048576"), "{err}");

    let link = dir.join("link.json");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let err = AuditConfig::read(&link).expect_err("a link is not followed");
    assert!(err.to_string().contains("not a regular file"), "{err}");

    let err = AuditConfig::read(&dir.join("absent.json")).expect_err("refused");
    assert!(err.to_string().contains("absent.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_fingerprint_ignores_formatting_and_key_order() {
    let compact = serde_json::to_string(&example()).unwrap();
    let pretty = serde_json::to_string_pretty(&example()).unwrap();
    let reordered = reordered(&example());
    assert_ne!(compact, reordered);
    let fingerprint = |text: &str| AuditConfig::from_slice(text.as_bytes()).unwrap().fingerprint();
    let expected = fingerprint(EXAMPLE);
    assert_eq!(expected.len(), 64);
    for text in [&compact, &pretty, &reordered] {
        assert_eq!(fingerprint(text), expected);
    }
}

/// The document as JSON text with every object's keys in reverse order
/// (serde_json's map sorts keys, so the text is written by hand).
fn reordered(value: &Json) -> String {
    match value {
        Json::Object(map) => {
            let fields: Vec<String> =
                map.iter().rev().map(|(k, v)| format!("{}: {}", json!(k), reordered(v))).collect();
            format!("{{\n{}\n}}", fields.join(",\n  "))
        }
        Json::Array(items) => format!("[{}]", items.iter().map(reordered).collect::<Vec<_>>().join(" , ")),
        other => other.to_string(),
    }
}

/// Audit ids are made from the fingerprint: a change to the canonical form
/// changes every id, so it must be deliberate (and this value with it).
#[test]
fn the_fingerprint_of_the_example_is_pinned() {
    let c = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
    let canonical = String::from_utf8(c.canonical_bytes()).unwrap();
    assert!(canonical.starts_with("clink-audit-config v1\n{\"job\":{\"id\":\"orders-to-clickhouse\""), "{canonical}");
    assert!(!canonical.contains(": ") && canonical.ends_with("\"state_dir\":\"/var/lib/clink-audit/orders\"}"));
    assert_eq!(c.fingerprint(), PINNED_FINGERPRINT, "{canonical}");
}

const PINNED_FINGERPRINT: &str = "9e2c2e22f87f7a636eb11eccda5c6e816fd4523d457735bb0374745f70fec8b2";

#[test]
fn the_fingerprint_changes_with_any_value() {
    let base = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap().fingerprint();
    let changes = [
        ("/job/id", json!("orders-2")),
        ("/job/checkpoint_dir", json!("/var/lib/clink/orders/checkpoints2")),
        ("/job/ha_dir", json!("/var/lib/clink/orders/ha2")),
        ("/job/capture_dir", json!("/var/lib/clink/orders/capture2")),
        ("/job/trace_dir", json!("/var/lib/clink/orders/trace2")),
        ("/destination/endpoint_env", json!("CH_URL")),
        ("/destination/table", json!("orders_out")),
        ("/destination/credential_env", json!(["CLINK_AUDIT_CLICKHOUSE_USER", "CLINK_AUDIT_CLICKHOUSE_PASSWORD", "X"])),
        ("/destination/key", json!(["id", "account"])),
        ("/destination/user_env", json!(null)),
        ("/reference/argv/1", json!("--scope-file={scope}")),
        ("/reference/with_state_in/0", json!("--from={state_in}")),
        ("/reference/credential_env", json!([])),
        ("/reference/from_run_start", json!([])),
        ("/selection", json!("latest-only")),
        ("/start_at", json!("latest")),
        ("/bounds/child_timeout_s", json!(301)),
        ("/bounds/bundle_bytes", json!(4_294_967_297u64)),
        ("/bounds/bundle_files", json!(100_001)),
        ("/bounds/rows", json!(10_000_001)),
        ("/bounds/query_timeout_s", json!(61)),
        ("/backoff/initial_s", json!(31)),
        ("/backoff/max_s", json!(901)),
        ("/max_attempts", json!(6)),
        ("/retain_passed", json!(21)),
        ("/retain_states", json!(4)),
        ("/disk_budget_bytes", json!(107_374_182_401u64)),
        ("/state_dir", json!("/var/lib/clink-audit/orders2")),
    ];
    let mut seen = std::collections::BTreeSet::from([base.clone()]);
    for (pointer, value) in changes {
        let changed = AuditConfig::from_json(&with(pointer, value)).unwrap().fingerprint();
        assert!(seen.insert(changed), "{pointer} did not change the fingerprint");
    }
}

/// Any JSON value, nested a few levels.
fn arbitrary_json() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        "[A-Za-z0-9_{}/ .:=-]{0,12}".prop_map(Json::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            proptest::collection::btree_map("[a-z_]{1,16}", inner, 0..6)
                .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// A field of the example to replace: every leaf and section of it.
fn example_pointers() -> Vec<String> {
    fn walk(value: &Json, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match value {
            Json::Object(map) => map.iter().for_each(|(k, v)| walk(v, format!("{at}/{k}"), out)),
            Json::Array(items) => items.iter().enumerate().for_each(|(i, v)| walk(v, format!("{at}/{i}"), out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&example(), String::new(), &mut out);
    out
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = AuditConfig::from_slice(&bytes);
    }

    /// A credential refused is never shown, wherever it is written.
    #[test]
    fn a_refused_credential_is_never_shown(secret in "[a-z0-9:=/@+]{12,40}", at in 0usize..3) {
        let pointer = ["/destination/credential_env/0", "/reference/credential_env/0", "/destination/endpoint_env"][at];
        let err = AuditConfig::from_json(&with(pointer, json!(secret))).expect_err("refused");
        prop_assert!(!err.to_string().contains(&secret), "{}", err);
        prop_assert!(!format!("{err:?}").contains(&secret), "{:?}", err);
    }

    #[test]
    fn arbitrary_json_never_panics(value in arbitrary_json()) {
        let _ = AuditConfig::from_json(&value);
    }

    /// The example with one field replaced by any value: read or refused naming a field, never a panic.
    #[test]
    fn one_field_replaced_never_panics(index in 0usize..64, value in arbitrary_json()) {
        let pointers = example_pointers();
        let pointer = &pointers[index % pointers.len()];
        let mut doc = example();
        if let Some(slot) = doc.pointer_mut(pointer) {
            *slot = value;
        }
        if let Err(err) = AuditConfig::from_json(&doc) {
            prop_assert!(!err.field().is_empty());
        }
    }
}

#[test]
fn the_destinations_user_and_password_are_named_among_its_credentials() {
    let c = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(c.destination.key, ["id"]);
    assert_eq!(c.destination.password_env.as_deref(), Some("CLINK_AUDIT_CLICKHOUSE_PASSWORD"));
    refused(
        &with("/destination/password_env", json!("OTHER")),
        "destination.password_env",
        "not one of credential_env",
    );
    refused(&with("/destination/user_env", json!("bob:secret")), "destination.user_env", "looks like a value");
    let none = AuditConfig::from_json(&with("/destination/user_env", json!(null))).unwrap();
    assert_eq!(none.destination.user_env, None);
    refused(&with("/destination/key", json!(["id", "id"])), "destination.key[1]", "named twice");
    refused(&with("/destination/key", json!(["id; DROP"])), "destination.key[0]", "column name");
    refused(&with("/destination/key", json!("id")), "destination.key", "expected an array");
}

#[test]
fn the_run_start_arguments_never_start_from_a_state() {
    let c = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(c.reference.from_run_start, ["--run-start-offset=ALL=0"]);
    refused(
        &with("/reference/from_run_start", json!(["--state-in={state_in}"])),
        "reference.from_run_start[0]",
        "no state",
    );
    refused(&with("/reference/from_run_start", json!(["{nope}"])), "reference.from_run_start[0]", "");
}
