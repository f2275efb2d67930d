//! THE insert rules: what settings an at-least-once writer's INSERT carries
//! on one server, and what that server then does with it, decided from the
//! table's description ([`Destination`]) by the server's version:
//!
//! - **Deduplication** ([`deduplication`]): whether an INSERT sent again
//!   under its token (a resend after an answer that never came) is dropped
//!   by the server rather than landing twice. ClickHouse 26's
//!   `deduplicate_insert` overrides `insert_deduplicate` and
//!   `async_insert_deduplicate`; a plain MergeTree keeps tokens only under a
//!   `non_replicated_deduplication_window` above 0 (its name in a table's
//!   definition proves nothing: `= 0` keeps none); a token reused with other
//!   rows drops those rows. So the writer dedupes by a token unique to its
//!   run, or not at all.
//! - **Blocks** ([`one_block`]): whether one INSERT lands whole or not at
//!   all. The server cuts an INSERT's rows into blocks by
//!   `max_insert_block_size` and squashes them by `min_insert_block_size_rows`
//!   / `_bytes` (26: 1,048,449 rows and 256 MiB), and writes one part per
//!   partition; a view reading from the table can refuse an INSERT the table
//!   already took. The writer sets the block sizes per INSERT so its rows
//!   are one block where the server knows the settings.
//!
//! A claim is made only when it can be shown from what the server says; any
//! other case is "no", with the reason, so a ledger says "may land twice" or
//! "may have partly landed" whenever it cannot prove otherwise. Claims hold
//! for the versions whose rules the project's trials check (18.16 against
//! the server, 26.9 against its engine); a newer server gets no claim.
//! This module sends nothing: the sink sends [`insert_settings`].

use serde::{Deserialize, Serialize};

use super::destination::Destination;

/// The newest ClickHouse major version whose insert rules the trials check
/// (chdb-core 26.9, in `harness/tests/clickhouse26.rs`).
pub const RULES_CHECKED_UP_TO: u32 = 26;

/// A claim about how the server writes an INSERT, and why it holds or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub holds: bool,
    pub why: String,
}

impl Claim {
    fn no(why: impl Into<String>) -> Claim {
        Claim { holds: false, why: why.into() }
    }
}

/// The server's major version, when its rules were checked.
fn checked_major(d: &Destination) -> Result<u32, Claim> {
    let major = d.server.version.split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m <= RULES_CHECKED_UP_TO => Ok(m),
        _ => Err(Claim::no(format!(
            "ClickHouse {}: how it writes an INSERT was checked only up to {RULES_CHECKED_UP_TO}.x",
            d.server.version
        ))),
    }
}

fn knows(d: &Destination, setting: &str) -> bool {
    d.setting(setting).is_some()
}

/// Whether the server can take a deduplication token with an INSERT.
pub fn takes_tokens(d: &Destination) -> bool {
    knows(d, "insert_deduplication_token")
}

/// Whether an INSERT resent under the same token (and [`insert_settings`])
/// is dropped by the server. `token` says whether the INSERT carries one.
pub fn deduplication(d: &Destination, token: bool) -> Claim {
    if let Err(no) = checked_major(d) {
        return no;
    }
    if !takes_tokens(d) {
        return Claim::no(
            "this server takes no insert_deduplication_token, so deduplication is switched off (two intervals of equal rows must never be taken for one)",
        );
    }
    if !token {
        return Claim::no(
            "the INSERT carries no token (no run identity to make one unique), so deduplication is switched off for it",
        );
    }
    if !knows(d, "deduplicate_insert") && !knows(d, "insert_deduplicate") {
        return Claim::no(
            "this server has neither deduplicate_insert nor insert_deduplicate to switch deduplication on",
        );
    }
    if d.engine.starts_with("Replicated") {
        return Claim {
            holds: true,
            why: "a replicated table keeps the tokens of its recent blocks (replicated_deduplication_window)".into(),
        };
    }
    let name = "non_replicated_deduplication_window";
    let (window, whose) = match d.table_setting(name) {
        Err(why) => return Claim::no(format!("{why}: whether the table keeps tokens cannot be read")),
        Ok(Some(own)) => (own, "the table's own setting"),
        Ok(None) => match d.setting(name) {
            Some(default) => (default.to_string(), "the server's default"),
            None => return Claim::no(format!("this server has no {name}: a non-replicated table keeps no tokens")),
        },
    };
    match window.parse::<u64>() {
        Ok(0) => Claim::no(format!("{name} = 0 ({whose}): the table keeps no tokens")),
        Ok(n) => Claim {
            holds: true,
            why: format!(
                "the INSERT carries its token with deduplication switched on, and the table keeps the last {n} blocks' tokens ({name} = {n}, {whose}): a resend is dropped unless {n} other blocks reached the table before it"
            ),
        },
        Err(_) => Claim::no(format!("{name} is {window:?} ({whose}), not a number")),
    }
}

/// The settings that cut an INSERT's rows into blocks, which the writer sets
/// so that its rows are one block.
const BLOCK_SETTINGS: [&str; 3] =
    ["max_insert_block_size", "min_insert_block_size_rows", "min_insert_block_size_bytes"];

/// Whether one INSERT (with [`insert_settings`]) is written as one part:
/// all its rows land, or none.
pub fn one_block(d: &Destination) -> Claim {
    if let Err(no) = checked_major(d) {
        return no;
    }
    if let Some(missing) = BLOCK_SETTINGS.iter().find(|s| !knows(d, s)) {
        return Claim::no(format!("this server has no {missing} to keep an INSERT in one block"));
    }
    match d.partition_key.value() {
        Some(key) if !key.trim().is_empty() => {
            return Claim::no(format!("the table is partitioned by {key}: an INSERT is one part per partition"))
        }
        Some(_) => {}
        None => return Claim::no("the table's partition key is not known"),
    }
    match d.dependent_views.value() {
        Some(views) if !views.trim().is_empty() => {
            return Claim::no(format!(
                "views read from the table ({}): one of them can fail an INSERT the table already took",
                views.replace('\n', ", ")
            ))
        }
        Some(_) => {}
        None => return Claim::no("whether views read from the table is not known"),
    }
    Claim {
        holds: true,
        why: "the INSERT sets max_insert_block_size and min_insert_block_size_rows to its row count and min_insert_block_size_bytes to 0, the table has no partition key and no view reads from it: one part".into(),
    }
}

/// The settings one INSERT of `rows` rows carries: acknowledged means
/// written (never queued), deduplicated by `token` or not at all, and its
/// rows one block where the server knows the block settings. A setting the
/// server does not know is not sent.
pub fn insert_settings(d: &Destination, token: Option<&str>, rows: u64) -> Vec<(&'static str, String)> {
    let mut settings = Vec::new();
    let mut set = |name: &'static str, value: String| {
        if knows(d, name) {
            settings.push((name, value));
        }
    };
    set("async_insert", "0".into());
    // Deduplication without a token would drop an interval whose rows equal an earlier one's.
    match token.filter(|_| takes_tokens(d)) {
        Some(token) => {
            set("insert_deduplication_token", token.to_string());
            set("deduplicate_insert", "enable".into());
            set("insert_deduplicate", "1".into());
        }
        None => {
            set("deduplicate_insert", "disable".into());
            set("insert_deduplicate", "0".into());
        }
    }
    if BLOCK_SETTINGS.iter().all(|s| knows(d, s)) {
        let rows = rows.max(1).to_string();
        set("max_insert_block_size", rows.clone());
        set("min_insert_block_size_rows", rows);
        set("min_insert_block_size_bytes", "0".into());
        set("max_insert_block_size_bytes", "0".into());
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clickhouse::destination::{Server, Setting};
    use crate::Known;

    fn v26(engine_full: &str) -> Destination {
        let session = [
            ("insert_deduplicate", "1"),
            ("deduplicate_insert", "enable"),
            ("async_insert_deduplicate", "0"),
            ("insert_deduplication_token", ""),
            ("async_insert", "1"),
            ("max_insert_block_size", "1048449"),
            ("max_insert_block_size_bytes", "0"),
            ("min_insert_block_size_rows", "1048449"),
            ("min_insert_block_size_bytes", "268402944"),
        ];
        let setting = |(n, v): &(&str, &str)| Setting { name: n.to_string(), value: Known::Value(v.to_string()) };
        Destination {
            server: Server {
                version: "26.9.2.1".into(),
                uuid: Known::Value("3f1c0a52-8d1e-4f6b-9a57-1c2d3e4f5a6b".into()),
                timezone: Known::Value("UTC".into()),
                host_name: Known::Value("h".into()),
            },
            database: "default".into(),
            table: "t".into(),
            table_uuid: Known::Value("7f1c0a52-8d1e-4f6b-9a57-1c2d3e4f5a6b".into()),
            engine: engine_full.split_whitespace().next().unwrap_or_default().into(),
            engine_full: Known::Value(engine_full.into()),
            create_table_query: Known::Unavailable("not read".into()),
            data_path: Known::Value("/data/store/7f1/7f1c0a52/".into()),
            partition_key: Known::Value(String::new()),
            dependent_views: Known::Value(String::new()),
            metadata_modification_time: Known::Value("2026-01-01 00:00:00".into()),
            columns: Vec::new(),
            settings: session.iter().map(setting).collect(),
            merge_tree_settings: [("non_replicated_deduplication_window", "0")].iter().map(setting).collect(),
        }
    }

    fn v18(engine_full: &str) -> Destination {
        let mut d = v26(engine_full);
        d.server.version = "18.16.1".into();
        d.settings.retain(|s| {
            ["insert_deduplicate", "max_insert_block_size", "min_insert_block_size_rows", "min_insert_block_size_bytes"]
                .contains(&s.name.as_str())
        });
        d.merge_tree_settings.clear();
        d
    }

    const WINDOW: &str =
        "MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100, index_granularity = 8192";

    #[test]
    fn a_resend_is_dropped_only_under_a_token_into_a_table_that_keeps_tokens() {
        assert!(deduplication(&v26(WINDOW), true).holds);
        let no = |d: &Destination, token: bool, why: &str| {
            let claim = deduplication(d, token);
            assert!(!claim.holds && claim.why.contains(why), "{claim:?} should say {why}");
        };
        // The setting's name in the definition proves nothing: 0 keeps no tokens.
        no(&v26("MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 0"), true, "= 0");
        no(&v26("MergeTree ORDER BY id SETTINGS index_granularity = 8192"), true, "the server's default");
        no(&v26(WINDOW), false, "carries no token");
        no(&v18(WINDOW), true, "takes no insert_deduplication_token");
        let mut later = v26(WINDOW);
        later.server.version = "27.1.1".into();
        no(&later, true, "checked only up to 26");
        let mut unknown = v26(WINDOW);
        unknown.engine_full = Known::Unavailable("old".into());
        no(&unknown, true, "cannot be read");
        // A server-wide window counts when the table names none.
        let mut server_wide = v26("MergeTree ORDER BY id");
        server_wide.merge_tree_settings[0].value = Known::Value("1000".into());
        assert!(deduplication(&server_wide, true).holds);
        assert!(deduplication(&v26("ReplicatedMergeTree('/t', 'r') ORDER BY id"), true).holds);
    }

    #[test]
    fn the_window_is_read_from_the_top_level_settings_clause_only() {
        let quoted = v26(
            "MergeTree ORDER BY id TTL toDate('SETTINGS non_replicated_deduplication_window = 5') SETTINGS index_granularity = 8192",
        );
        assert!(!deduplication(&quoted, true).holds, "a SETTINGS inside a literal is not the clause");
        assert_eq!(v26(WINDOW).table_setting("non_replicated_deduplication_window"), Ok(Some("100".into())));
    }

    #[test]
    fn the_insert_switches_deduplication_by_every_setting_the_server_has() {
        let with = insert_settings(&v26(WINDOW), Some("tok"), 10);
        let get = |s: &[(&str, String)], n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get(&with, "deduplicate_insert").as_deref(), Some("enable"));
        assert_eq!(get(&with, "insert_deduplicate").as_deref(), Some("1"));
        assert_eq!(get(&with, "insert_deduplication_token").as_deref(), Some("tok"));
        assert_eq!(get(&with, "async_insert").as_deref(), Some("0"));
        let without = insert_settings(&v26(WINDOW), None, 10);
        assert_eq!(get(&without, "deduplicate_insert").as_deref(), Some("disable"));
        assert_eq!(get(&without, "insert_deduplicate").as_deref(), Some("0"));
        assert_eq!(get(&without, "insert_deduplication_token"), None);
        let old = insert_settings(&v18(WINDOW), Some("tok"), 10);
        assert_eq!(get(&old, "insert_deduplicate").as_deref(), Some("0"));
        assert!(get(&old, "deduplicate_insert").is_none() && get(&old, "async_insert").is_none());
    }

    #[test]
    fn an_insert_is_one_block_only_where_its_sizes_can_be_set_and_nothing_splits_it() {
        let d = v26(WINDOW);
        assert!(one_block(&d).holds, "{:?}", one_block(&d));
        assert!(one_block(&v18(WINDOW)).holds);
        let s = insert_settings(&d, Some("t"), 290_000);
        for (name, value) in [
            ("max_insert_block_size", "290000"),
            ("min_insert_block_size_rows", "290000"),
            ("min_insert_block_size_bytes", "0"),
        ] {
            assert!(s.contains(&(name, value.to_string())), "{name} = {value} in {s:?}");
        }
        let mut partitioned = v26(WINDOW);
        partitioned.partition_key = Known::Value("toYYYYMM(time)".into());
        assert!(one_block(&partitioned).why.contains("partitioned by toYYYYMM(time)"));
        let mut viewed = v26(WINDOW);
        viewed.dependent_views = Known::Value("db.mv".into());
        assert!(one_block(&viewed).why.contains("db.mv"));
        let mut unknown = v26(WINDOW);
        unknown.dependent_views = Known::Unavailable("old".into());
        assert!(!one_block(&unknown).holds);
        let mut bare = v26(WINDOW);
        bare.settings.retain(|s| s.name != "min_insert_block_size_bytes");
        assert!(one_block(&bare).why.contains("no min_insert_block_size_bytes"));
        assert!(!insert_settings(&bare, None, 5).iter().any(|(n, _)| n.contains("block")));
    }
}
