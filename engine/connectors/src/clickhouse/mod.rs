//! A ClickHouse server over HTTP, through the `clickhouse` crate: a blocking
//! connection for one thread, reads in the TabSeparated text format, inserts
//! of pre-rendered TabSeparated rows, and the description of a table as the
//! server defines it ([`destination`]), and what an INSERT carries and what
//! the server then does with it ([`inserts`]).
//!
//! Every name that reaches SQL is quoted as an identifier and every value
//! rendered as a literal ([`sql`]); nothing here concatenates a name or a
//! value into a statement any other way. Errors say whether the server
//! refused (nothing happened) or whether the outcome is in doubt (the request
//! may have taken effect), because an at-least-once writer has to know which.

pub mod destination;
pub mod inserts;
pub mod sql;
pub mod tsv;
pub mod types;

use std::time::Duration;

use thiserror::Error;

pub use tsv::Cell;

/// Where a server is and who the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://host:port`.
    pub url: String,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Endpoint {
    /// A `host:port` or an `http://` URL; anything else is refused.
    pub fn parse(address: &str) -> Result<Endpoint, EndpointError> {
        let url = if address.starts_with("http://") || address.starts_with("https://") {
            address.trim_end_matches('/').to_string()
        } else if !address.is_empty() && !address.contains('/') && address.contains(':') {
            format!("http://{address}")
        } else {
            return Err(EndpointError::NotAnAddress { address: address.to_string() });
        };
        Ok(Endpoint { url, user: None, password: None })
    }
}

/// Why a server address was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndpointError {
    #[error("{address:?} is neither host:port nor an http:// URL")]
    NotAnAddress { address: String },
}

#[derive(Debug, Error)]
pub enum ClickHouseError {
    /// The server answered with an error: the statement took no effect.
    #[error("clickhouse at {url}: {what}: the server refused: {message}")]
    Refused { url: String, what: String, message: String },
    /// No answer, or an answer cut short: the statement may have taken effect.
    #[error("clickhouse at {url}: {what}: {message} (the outcome is unknown)")]
    InDoubt { url: String, what: String, message: String },
    /// The statement never left this process (the server could not be reached).
    #[error("clickhouse at {url}: {what}: {message}")]
    Unreachable { url: String, what: String, message: String },
    #[error("clickhouse at {url}: {what}: {message}")]
    Malformed { url: String, what: String, message: String },
    /// No whole answer within the caller's time limit (a read: nothing changed).
    #[error("clickhouse at {url}: {what}: no whole answer within {ms} ms")]
    TimedOut { url: String, what: String, ms: u64 },
    #[error("starting the client's runtime: {0}")]
    Runtime(std::io::Error),
}

impl ClickHouseError {
    /// Whether the statement may have taken effect on the server.
    pub fn in_doubt(&self) -> bool {
        matches!(self, ClickHouseError::InDoubt { .. })
    }

    /// The server's own words, when it refused.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            ClickHouseError::Refused { message, .. } => Some(message),
            _ => None,
        }
    }
}

/// One server, for one thread: the async client on a runtime of its own.
pub struct Connection {
    url: String,
    client: clickhouse::Client,
    runtime: tokio::runtime::Runtime,
}

/// Settings a statement runs under, as name and value.
pub type Settings<'a> = &'a [(&'a str, String)];

/// One INSERT of TabSeparated rows.
pub struct Insert<'a> {
    /// What the caller is doing, for errors.
    pub what: &'a str,
    /// The table, quoted and qualified ([`sql::qualified`]).
    pub table: &'a str,
    /// The columns, each quoted, comma-separated.
    pub columns: &'a str,
    pub settings: Settings<'a>,
    pub timeout: Duration,
    /// Whether the server writes the rows as one block, so that a refusal
    /// means nothing landed (THE rule: `inserts::one_block`).
    pub atomic: bool,
}

impl Connection {
    pub fn open(endpoint: &Endpoint) -> Result<Connection, ClickHouseError> {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ClickHouseError::Runtime)?;
        // Validation reads the table's metadata through queries 18.16 lacks;
        // the callers check the table themselves (destination::describe).
        let mut client = clickhouse::Client::default().with_url(&endpoint.url).with_validation(false);
        if let Some(user) = &endpoint.user {
            client = client.with_user(user);
        }
        if let Some(password) = &endpoint.password {
            client = client.with_password(password);
        }
        Ok(Connection { url: endpoint.url.clone(), client, runtime })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs a statement that returns rows, read whole as TabSeparated text.
    /// `wait_end_of_query` makes the server buffer the answer, so an error
    /// met late (a bound reached) is an error status, never a cut-short body.
    pub fn select(
        &self,
        what: &str,
        statement: &str,
        settings: Settings<'_>,
    ) -> Result<Vec<Vec<Cell>>, ClickHouseError> {
        let mut query = self.client.query(statement).with_setting("wait_end_of_query", "1");
        for (name, value) in settings {
            query = query.with_setting(*name, value.clone());
        }
        let body = self.runtime.block_on(async move {
            let mut cursor = query.fetch_bytes("TabSeparated")?;
            cursor.collect().await
        });
        let body = body.map_err(|e| self.classify(what, e, false))?;
        tsv::parse_rows(&body).map_err(|e| ClickHouseError::Malformed {
            url: self.url.clone(),
            what: what.to_string(),
            message: e.to_string(),
        })
    }

    /// [`Connection::select`] with a limit on the time this client waits for
    /// the whole answer, whatever the server's own limits say.
    pub fn select_within(
        &self,
        what: &str,
        statement: &str,
        settings: Settings<'_>,
        limit: Duration,
    ) -> Result<Vec<Vec<Cell>>, ClickHouseError> {
        let mut query = self.client.query(statement).with_setting("wait_end_of_query", "1");
        for (name, value) in settings {
            query = query.with_setting(*name, value.clone());
        }
        let body = self.runtime.block_on(async move {
            tokio::time::timeout(limit, async move {
                let mut cursor = query.fetch_bytes("TabSeparated")?;
                cursor.collect().await
            })
            .await
        });
        let body = match body {
            Ok(answer) => answer.map_err(|e| self.classify(what, e, false))?,
            Err(_) => {
                return Err(ClickHouseError::TimedOut {
                    url: self.url.clone(),
                    what: what.to_string(),
                    ms: limit.as_millis() as u64,
                })
            }
        };
        tsv::parse_rows(&body).map_err(|e| ClickHouseError::Malformed {
            url: self.url.clone(),
            what: what.to_string(),
            message: e.to_string(),
        })
    }

    /// Runs a statement that returns nothing (DDL, for fixtures and tests).
    pub fn execute(&self, what: &str, statement: &str) -> Result<(), ClickHouseError> {
        let query = self.client.query(statement);
        self.runtime.block_on(query.execute()).map_err(|e| self.classify(what, e, true))
    }

    /// Sends one INSERT of TabSeparated rows.
    pub fn insert_tsv(&self, insert: &Insert<'_>, body: Vec<u8>) -> Result<(), ClickHouseError> {
        let statement = format!("INSERT INTO {} ({}) FORMAT TabSeparated", insert.table, insert.columns);
        let mut request =
            self.client.insert_formatted_with(statement).with_timeouts(Some(insert.timeout), Some(insert.timeout));
        for (name, value) in insert.settings {
            request = request.with_setting(*name, value.clone());
        }
        let result = self.runtime.block_on(async move {
            request.send(bytes::Bytes::from(body)).await?;
            request.end().await
        });
        result.map_err(|e| match self.classify(insert.what, e, true) {
            // A refused INSERT that is not one block (several blocks or
            // partitions, a view that refused rows the table took) may have
            // landed in part.
            ClickHouseError::Refused { url, what, message } if !insert.atomic => ClickHouseError::InDoubt {
                url,
                what,
                message: format!("{message} (the INSERT is not one block: some of its rows may have landed)"),
            },
            other => other,
        })
    }

    fn classify(&self, what: &str, e: clickhouse::error::Error, writes: bool) -> ClickHouseError {
        use clickhouse::error::Error as E;
        let url = self.url.clone();
        let what = what.to_string();
        let message = e.to_string();
        match e {
            E::BadResponse(message) => ClickHouseError::Refused { url, what, message },
            E::Network(_) if never_connected(&message) => ClickHouseError::Unreachable { url, what, message },
            E::Network(_) | E::TimedOut if writes => ClickHouseError::InDoubt { url, what, message },
            E::Network(_) | E::TimedOut => ClickHouseError::Unreachable { url, what, message },
            _ => ClickHouseError::Malformed { url, what, message },
        }
    }
}

/// Whether a network error happened before any byte of the request left
/// (the statement cannot have taken effect).
fn never_connected(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("connection refused") || m.contains("dns error") || m.contains("failed to lookup")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_host_port_or_http_urls() {
        assert_eq!(Endpoint::parse("127.0.0.1:8123").unwrap().url, "http://127.0.0.1:8123");
        assert_eq!(Endpoint::parse("http://127.0.0.1:8123/").unwrap().url, "http://127.0.0.1:8123");
        for bad in ["", "127.0.0.1", "ftp://x:1", "a/b:1"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_a_refused_connection_is_known_not_to_have_landed() {
        assert!(never_connected(
            "network error: error trying to connect: tcp connect error: Connection refused (os error 111)"
        ));
        assert!(!never_connected("network error: connection reset by peer"));
    }
}
