//! The events a runner hands an operator: records, watermarks (with their
//! idleness), and the clock positions at which processing-time timers fire.
//!
//! The runtime's subtasks, the flight recorder and replay all speak this one
//! type, so what is captured is exactly what is replayed.

use crate::value::Row;

/// One event the runner hands an operator.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Record(Row),
    Watermark {
        time: i64,
        idle: bool,
    },
    /// The clock position at which due processing-time timers fire.
    ProcessingTime(i64),
}
