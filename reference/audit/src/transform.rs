//! The jobs' specifications, written from their documentation and never
//! from the engine's evaluator: each message is one JSON object
//! `{"id": int, "time": epoch ms, "account": string, "amount": "decimal"}`.
//!
//! * `credits`: keep the messages whose amount is greater than zero, and
//!   write `id, account, amount, time`.
//! * `windows`: per account, tumbling event-time windows of `size_ms`
//!   (a record at time t belongs to [s, s + size), s = floor(t / size) ×
//!   size), each window's count and exact sum of its amounts, written as
//!   `account, window_start, window_end, count, sum`.

use serde_json::{json, Value as Json};

use crate::cells;

/// The amounts' scale (two fraction digits).
pub const AMOUNT_SCALE: u32 = 2;

/// One message, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: i64,
    pub time: i64,
    pub account: String,
    /// Unscaled at [`AMOUNT_SCALE`].
    pub amount: i128,
}

pub fn read_event(payload: &[u8]) -> Result<Event, String> {
    let v: Json = serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    for k in obj.keys() {
        if !["id", "time", "account", "amount"].contains(&k.as_str()) {
            return Err(format!("an unexpected field {k:?}"));
        }
    }
    let id = obj.get("id").and_then(Json::as_i64).ok_or("no integer id")?;
    let time = obj.get("time").and_then(Json::as_i64).ok_or("no integer time")?;
    let account = obj.get("account").and_then(Json::as_str).ok_or("no account string")?.to_string();
    let amount_text = obj.get("amount").and_then(Json::as_str).ok_or("no amount string")?;
    let amount = cells::parse_decimal(amount_text, AMOUNT_SCALE)
        .ok_or_else(|| format!("amount {amount_text:?} is not a decimal of scale 2"))?;
    Ok(Event { id, time, account, amount })
}

/// The `credits` row of an event, or `None` when the filter drops it.
pub fn credit(e: &Event) -> Option<Vec<Json>> {
    (e.amount > 0).then(|| {
        vec![
            cells::int(i128::from(e.id)),
            cells::text(&e.account),
            cells::int(e.amount),
            cells::int(i128::from(e.time)),
        ]
    })
}

/// The window rules this reference implements, as it declares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRules {
    pub size_ms: i64,
    pub lag_ms: i64,
    pub allowed_lateness_ms: i64,
}

impl Default for WindowRules {
    fn default() -> Self {
        WindowRules { size_ms: 10_000, lag_ms: 2_000, allowed_lateness_ms: 0 }
    }
}

impl WindowRules {
    /// The semantics the artifact's header declares, in the scope's terms.
    pub fn declared(&self) -> Json {
        json!({
            "kind": "tumble",
            "size_ms": self.size_ms,
            "time_column": "time",
            "key": ["account"],
            "aggregates": ["count", "sum(amount)"],
            "watermark": {
                "strategy": "least_partition_greatest_less_lag",
                "lag_ms": self.lag_ms,
                "idle_timeout_ms": Json::Null,
            },
            "allowed_lateness_ms": self.allowed_lateness_ms,
            "late_records": "drop",
            "source_end": "offsets_at_start",
        })
    }

    /// The start of the window holding time `t`.
    pub fn start_of(&self, t: i64) -> i64 {
        t.div_euclid(self.size_ms) * self.size_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_read_and_filter() {
        let e = read_event(br#"{"id": 3, "time": 10, "account": "a", "amount": "1.5"}"#).unwrap();
        assert_eq!(e.amount, 150);
        assert_eq!(credit(&e).unwrap(), vec![json!("3"), json!("a"), json!("150"), json!("10")]);
        let z = read_event(br#"{"id": 3, "time": 10, "account": "a", "amount": "0.00"}"#).unwrap();
        assert!(credit(&z).is_none(), "amount > 0 only");
        assert!(read_event(br#"{"id": 3, "time": 10, "account": "a", "amount": 1.5}"#).is_err());
        assert!(read_event(br#"{"id": 3, "time": 10, "account": "a", "amount": "1", "x": 1}"#).is_err());
        let w = WindowRules::default();
        assert_eq!(w.start_of(-1), -10_000);
        assert_eq!(w.start_of(19_999), 10_000);
    }

    proptest! {
        #[test]
        fn any_payload_is_read_or_refused_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = read_event(&bytes);
        }
    }
}
