//! Readers of what perf prints (`perf report`'s rows, `perf trace -s`'s
//! summary) and the names the profiles group symbols under. No process is
//! started here: `profile` runs perf, this only reads its text, so the
//! readers are tested (`tests/bench_perf_output.rs`) without perf.

use std::collections::BTreeMap;

/// Samples of one `perf record`, by symbol (`[k]` marks the kernel's) and,
/// where read, by thread.
pub struct Samples {
    pub total: u64,
    pub by_symbol: BTreeMap<String, u64>,
    pub by_thread: BTreeMap<String, u64>,
    /// Where read (`perf report --children`): shares in percent counting
    /// what each symbol calls.
    pub inclusive: BTreeMap<String, f64>,
}

impl Samples {
    /// `perf report -t '\t' -n --sort sym`: `share%\tcount\t[.] symbol`.
    pub fn parse(text: &str) -> Samples {
        let mut by_symbol = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            let [_, count, symbol] = fields[..] else { continue };
            if let Ok(count) = count.parse::<u64>() {
                *by_symbol.entry(symbol.to_string()).or_default() += count;
            }
        }
        Samples { total: by_symbol.values().sum(), by_symbol, by_thread: BTreeMap::new(), inclusive: BTreeMap::new() }
    }

    /// The samples under `symbol`, counting what it calls (None when
    /// `perf report --children` was not read or did not name it).
    pub fn inclusive_samples(&self, symbol: &str) -> Option<f64> {
        self.inclusive.get(symbol).map(|share| share * self.total as f64 / 100.0)
    }

    /// A profile's lines: the samples by area, then the symbols with the most.
    pub fn describe(&self, what: &str) -> Vec<String> {
        let symbols = &self.by_symbol;
        let mut areas: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (symbol, &n) in symbols {
            *areas.entry(area_of(symbol)).or_default() += n;
        }
        let share = |n: u64| 100.0 * n as f64 / self.total.max(1) as f64;
        let mut areas: Vec<(u64, &str)> = areas.into_iter().map(|(a, n)| (n, a)).collect();
        areas.sort_by(|a, b| b.cmp(a));
        let mut lines = vec![format!(
            "{} {what} by area: {}",
            self.total,
            areas.iter().map(|(n, a)| format!("{a} {:.1}%", share(*n))).collect::<Vec<_>>().join("; ")
        )];
        if !self.by_thread.is_empty() {
            let mut threads: Vec<(u64, &String)> = self.by_thread.iter().map(|(t, &n)| (n, t)).collect();
            threads.sort_by(|a, b| b.cmp(a));
            lines.push(format!(
                "by thread (op-<operator>-<subtask>; clink: the coordinator and unnamed helper threads): {}",
                threads.iter().map(|(n, t)| format!("{t} {:.1}%", share(*n))).collect::<Vec<_>>().join(", ")
            ));
        }
        let mut top: Vec<(u64, &String)> = symbols.iter().map(|(s, &n)| (n, s)).collect();
        top.sort_by(|a, b| b.cmp(a));
        for (n, symbol) in top.into_iter().take(8) {
            lines.push(format!("{:>6.1}%  {}", share(n), short(symbol)));
        }
        lines
    }
}

/// `perf report --children -t '\t' -n --sort sym`: `children%\tself%\tcount\tsymbol`.
/// Each symbol's share of all samples counting what it calls, in percent.
pub fn parse_inclusive(text: &str) -> BTreeMap<String, f64> {
    let mut shares = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        let [children, _, _, symbol] = fields[..] else { continue };
        if let Some(Ok(share)) = children.strip_suffix('%').map(str::parse::<f64>) {
            shares.insert(symbol.to_string(), share);
        }
    }
    shares
}

/// The kernel's paths that create and remove files, by the function every
/// such call passes through. On ext4 a file's creation is mostly its inode's
/// allocation, which without a journal skips every recently freed inode.
pub const FILE_PATHS: [(&str, &str); 3] = [
    ("[k] __ext4_new_inode", "creating files (ext4 inode allocation)"),
    ("[k] do_unlinkat", "removing files"),
    ("[k] do_fsync", "fsync"),
];

/// The part of the engine (or the kernel) a symbol belongs to. A heuristic
/// by name, printed beside the symbols themselves so it can be checked.
pub fn area_of(symbol: &str) -> &'static str {
    let has = |words: &[&str]| words.iter().any(|w| symbol.contains(w));
    let kernel = symbol.starts_with("[k]");
    if has(&["capture::"]) {
        "capture encoding"
    } else if has(&["sha2::", "sha256"]) {
        "sha-256"
    } else if kernel && has(&["clear_page"]) {
        // Zeroing a page before its first use: in this job's profiles it is
        // the allocator faulting in fresh (huge) anonymous pages, not the
        // disk, which the name alone cannot tell apart.
        "kernel: zeroing fresh pages"
    } else if kernel
        && has(&[
            "ext4",
            "blk",
            "bio",
            "iowrite",
            "block",
            "deleted",
            "filemap",
            "inode",
            "dentry",
            "d_alloc",
            "writeback",
            "page_cache",
            "jbd2",
            "virtio",
            "fsync",
        ])
    {
        "kernel: files and disk"
    } else if kernel && has(&["switch", "schedule", "futex", "spin", "wake", "softirq", "irq", "sched"]) {
        "kernel: thread wake-ups and switches"
    } else if kernel {
        "kernel: other"
    } else if has(&[
        "crossbeam",
        "runtime::gates",
        "runtime::output",
        "InputGate",
        "OutputGate",
        "routing::",
        "hash_one",
    ]) {
        "channels between subtasks"
    } else if has(&["segment_source", "Decimal::parse", "memchr", "from_utf8", "CharSearcher", "parse", "read_until"]) {
        "input parsing"
    } else if has(&[
        "operators::window",
        "operators::idle",
        "TumblingWindow",
        "IdleDetector",
        "keys::",
        "hashbrown",
        "btree",
        "BTreeMap",
        "HashMap",
    ]) {
        "operator state and keys"
    } else if has(&["mi_", "malloc", "free", "memmove", "memcpy", "memcmp", "memset", "clone", "alloc::"]) {
        "allocation and copies"
    } else if has(&["value::", "itoa::"]) {
        "row values (encoding, sums, output lines)"
    } else if has(&["runtime::task::", "operators::driver", "timers::", "Transform>::on_record", "Sink>::write"]) {
        "task loops and timers"
    } else if has(&["checkpoint::", "protocol", "coordinator", "codec::"]) {
        "checkpoints and protocol"
    } else {
        "other"
    }
}

/// A symbol without its crate paths' noise, for a table line.
pub fn short(symbol: &str) -> String {
    let s = symbol.replace("clink_engine::", "");
    if s.chars().count() > 110 {
        format!("{}...", s.chars().take(107).collect::<String>())
    } else {
        s
    }
}

/// One row of `perf trace -s`: a thread's time in one system call.
#[derive(Debug, PartialEq)]
pub struct TraceCall {
    pub thread: String,
    pub syscall: String,
    pub calls: u64,
    pub ms: f64,
}

/// `perf trace -s`'s summary: a `name (tid), N events, P%` line per thread,
/// then rows of `syscall calls errors total min avg max stddev`.
pub fn parse_trace_summary(text: &str) -> Vec<TraceCall> {
    let mut calls = Vec::new();
    let mut thread: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.contains(" events, ") && trimmed.contains('(') {
            thread = trimmed.split(',').next().map(|t| t.trim().to_string());
            continue;
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let (Some(thread), [syscall, calls_field, _errors, total, ..]) = (&thread, &fields[..]) else { continue };
        if let (Ok(n), Ok(ms)) = (calls_field.parse::<u64>(), total.parse::<f64>()) {
            calls.push(TraceCall { thread: thread.clone(), syscall: syscall.to_string(), calls: n, ms });
        }
    }
    calls
}
