//! Clients of the external systems the engine's connectors read and write:
//! a Kafka log ([`kafka`], through librdkafka) and a ClickHouse table
//! ([`clickhouse`], over HTTP).
//!
//! This crate owns the conversations with those systems: connecting,
//! describing what is there (a log's identity, a table's definition and the
//! server's capabilities), reading and writing bytes, and classifying what
//! went wrong. It never interprets a row: the engine's operators turn
//! messages into typed rows and rows into a table's text format, with the
//! engine's one row encoding. It depends on nothing of ours but the leaf
//! helpers, so the harness's reconciler reads a table with the same client
//! the sink wrote it with, and the independent reference does not use it.

pub mod clickhouse;
pub mod kafka;
pub mod kafka_txn;

/// A value the client could read, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Known {
    Value(String),
    Unavailable(String),
}

impl Known {
    pub fn value(&self) -> Option<&str> {
        match self {
            Known::Value(v) => Some(v),
            Known::Unavailable(_) => None,
        }
    }
}

impl Known {
    /// An identifier as a system reported it: an empty or all-zero one (a
    /// nil UUID, as a server gives for a table of a database without UUIDs,
    /// or Kafka's zero topic id) identifies nothing, so it is unavailable.
    pub fn identifier(reported: Option<String>, what: &str) -> Known {
        match reported {
            Some(id) if !is_nil_identifier(&id) => Known::Value(id),
            Some(id) => Known::Unavailable(format!("the {what} reported is {id:?}, which identifies nothing")),
            None => Known::Unavailable(format!("no {what} was reported")),
        }
    }

    /// The value when it identifies something: `None` when unavailable, and
    /// for an empty or all-zero identifier, whatever recorded it.
    pub fn identity(&self) -> Option<&str> {
        self.value().filter(|v| !is_nil_identifier(v))
    }
}

/// Whether an identifier's text names nothing: empty, a nil UUID
/// (`00000000-0000-0000-0000-000000000000`), or the base64 of zero bytes
/// (`AAAAAAAAAAAAAAAAAAAAAA`, as Kafka prints a zero topic id).
pub fn is_nil_identifier(text: &str) -> bool {
    let text = text.trim();
    let zero_uuid = text.bytes().all(|b| b == b'0' || b == b'-');
    let zero_base64 = text.trim_end_matches('=').bytes().all(|b| b == b'A');
    text.is_empty() || zero_uuid || zero_base64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_all_zero_identifier_identifies_nothing() {
        for nil in
            ["", " ", "00000000-0000-0000-0000-000000000000", "0", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAA=="]
        {
            assert!(is_nil_identifier(nil), "{nil:?}");
            assert_eq!(Known::Value(nil.into()).identity(), None, "{nil:?}");
            assert!(Known::identifier(Some(nil.into()), "table UUID").value().is_none(), "{nil:?}");
        }
        for id in
            ["3f1c0a52-8d1e-4f6b-9a57-1c2d3e4f5a6b", "Vt0TBgEfS2q3mS2kDN7kYw", "00000000-0000-0000-0000-000000000001"]
        {
            assert!(!is_nil_identifier(id), "{id:?}");
            assert_eq!(Known::Value(id.into()).identity(), Some(id));
            assert_eq!(Known::identifier(Some(id.into()), "table UUID"), Known::Value(id.into()));
        }
        assert!(Known::identifier(None, "server UUID").value().is_none());
        assert_eq!(Known::Unavailable("old".into()).identity(), None);
    }
}
