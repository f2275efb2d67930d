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
