//! clink-html: verification reports people look at.
//!
//! One self-contained HTML document per report: the verdict, every check with
//! its status, reason, evidence, details and next action, an optional
//! **protocol timeline** of a merged trace (one lane per process and subtask,
//! checkpoints as bands, recoveries and restarts marked, a rejected trace's
//! first diverging event highlighted with the events just before it), and
//! optional extra sections. Commands fill a [`Page`] with their own checks;
//! the frame is shared (`incident-verify` and `trace-validate` today).
//!
//! What it never does: fetch anything (style and script are inline; the
//! page's content security policy forbids every fetch and any script but its
//! own), or let evidence become markup: every string from evidence is escaped
//! for its context ([`escape`]), and the timeline's data is a JSON block the
//! script reads and draws with text-only APIs. It decides nothing: it shows
//! verdicts that others reached.
//!
//! ```
//! use clink_html::{render, Outcome, Page, Verdict};
//! let page = Page {
//!     command: "clink example".into(), subject: "a bundle".into(), facts: vec![],
//!     verdict: Verdict { outcome: Outcome::Passed, summary: "every check passed".into(), exit_code: 0 },
//!     checks: vec![], timeline: None, sections: vec![],
//! };
//! assert!(render(&page).starts_with("<!DOCTYPE html>"));
//! ```

pub mod escape;
pub mod page;
pub mod timeline;
pub mod trace_validation;

pub use page::{render, Check, Outcome, Page, Section, Status, Table, Verdict};
pub use timeline::Timeline;
