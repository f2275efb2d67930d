//! The readers of perf's text that `gates/bench`'s profiles rely on
//! (`benches/engine/perf_output.rs`, included here so cargo test runs them:
//! a bench's own tests never run).

#[path = "../benches/engine/perf_output.rs"]
mod perf_output;

use perf_output::{area_of, parse_inclusive, parse_trace_summary, short, Samples, TraceCall, FILE_PATHS};

#[test]
fn report_lines_are_read_by_symbol() {
    let text = "# comment\n 8.65%  \t 407        \t[.] clink_engine::capture::format::EventEncoder::encode_record\n 5.18%  \t 244        \t[k] finish_task_switch.isra.0\nnot a row\n";
    let samples = Samples::parse(text);
    assert_eq!(samples.total, 651);
    assert_eq!(area_of("[.] clink_engine::capture::format::EventEncoder::encode_record"), "capture encoding");
    assert_eq!(area_of("[k] finish_task_switch.isra.0"), "kernel: thread wake-ups and switches");
    // Page zeroing is fresh memory's (mimalloc's huge-page faults), never
    // counted as the disk's.
    assert_eq!(area_of("[k] clear_page_erms"), "kernel: zeroing fresh pages");
    assert_eq!(area_of("[k] folio_zero_user"), "kernel: other");
    assert_eq!(area_of("[k] ext4_sync_file"), "kernel: files and disk");
}

#[test]
fn trace_summaries_are_read_per_thread() {
    let text = "\n Summary of events:\n\n clink (22830), 22396 events, 24.2%\n\n   syscall            calls  errors  total       min       avg       max       stddev\n                                     (msec)    (msec)    (msec)    (msec)        (%)\n   --------------- --------  ------ -------- --------- --------- ---------     ------\n   unlink              1960      0   654.300     0.066     0.334     8.726      3.90%\n\n op-1-0 (22833), 3940 events, 4.3%\n   fsync                307      0   197.900     0.010     0.019     0.160      1.09%\n";
    let calls = parse_trace_summary(text);
    assert_eq!(
        calls,
        vec![
            TraceCall { thread: "clink (22830)".into(), syscall: "unlink".into(), calls: 1960, ms: 654.3 },
            TraceCall { thread: "op-1-0 (22833)".into(), syscall: "fsync".into(), calls: 307, ms: 197.9 },
        ]
    );
}

#[test]
fn a_profile_names_areas_largest_first_with_shares_of_all_samples() {
    let text = " 50.00%\t 50\t[k] ext4_search_dir\n 30.00%\t 30\t[.] clink_engine::capture::format::EventEncoder::encode_record\n 20.00%\t 20\t[k] iowrite16\n";
    let lines = Samples::parse(text).describe("on-CPU samples");
    assert_eq!(lines[0], "100 on-CPU samples by area: kernel: files and disk 70.0%; capture encoding 30.0%");
    assert_eq!(lines[1], "  50.0%  [k] ext4_search_dir");
    assert_eq!(lines[2], "  30.0%  [.] capture::format::EventEncoder::encode_record");
    assert_eq!(lines.len(), 4);
}

#[test]
fn unknown_symbols_fall_to_other_and_long_ones_are_shortened() {
    assert_eq!(area_of("[.] 0x00000000deadbeef"), "other");
    assert_eq!(area_of("[k] some_new_kernel_function"), "kernel: other");
    assert_eq!(area_of("[.] crossbeam_channel::flavors::array::Channel<T>::send"), "channels between subtasks");
    let long = format!("[.] {}", "x".repeat(200));
    assert_eq!(short(&long).chars().count(), 110);
    assert!(short(&long).ends_with("..."));
}

#[test]
fn rows_without_a_count_or_outside_a_thread_are_not_read() {
    assert_eq!(Samples::parse("12%\tmany\t[.] f\n").total, 0);
    assert!(parse_trace_summary("   fsync 3 0 1.0 0.1 0.2 0.3 1%\n").is_empty());
}

#[test]
fn threads_are_listed_busiest_first_when_read() {
    let mut samples = Samples::parse(" 60%\t 60\t[.] f\n 40%\t 40\t[.] g\n");
    samples.by_thread = Samples::parse(" 25%\t 25\top-1-0\n 75%\t 75\tclink\n").by_symbol;
    let lines = samples.describe("samples");
    assert!(lines[1].ends_with(": clink 75.0%, op-1-0 25.0%"), "{}", lines[1]);
}

#[test]
fn inclusive_shares_are_read_from_the_children_column_not_the_self_one() {
    // As `perf report --children -t '\t' -n --sort sym` prints them: a
    // function whose time is all in what it calls has 0 samples of its own.
    let text = "# Children\t    Self\t     Samples\tSymbol\n 29.12% \t 0.04%  \t 3          \t[k] __ext4_new_inode\n 1.93%  \t 0.00%  \t 0          \t[k] do_unlinkat\n 5.84%\t 5.84%\t 437\n";
    let shares = parse_inclusive(text);
    assert_eq!(shares.len(), 2, "{shares:?}");
    assert_eq!(shares["[k] __ext4_new_inode"], 29.12);
    assert_eq!(shares["[k] do_unlinkat"], 1.93);
    // The names the recorder's profile looks up are the ones perf prints.
    assert!(FILE_PATHS.iter().any(|(symbol, _)| shares.contains_key(*symbol)));
    // In samples: the share of all the run's samples, not of the symbol's own.
    let mut samples = Samples::parse(" 50.00%\t 1000\t[.] a\n 50.00%\t 1000\t[k] b\n");
    samples.inclusive = shares;
    assert_eq!(samples.inclusive_samples("[k] do_unlinkat").map(f64::round), Some(39.0));
    assert_eq!(samples.inclusive_samples("[k] ext4_create"), None);
}
