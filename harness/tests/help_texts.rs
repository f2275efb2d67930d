//! Every option, argument and subcommand of every binary a user installs
//! (`gates/install-clink`: clink, clink-audit, clink-reference-audit) says
//! what it is in `--help`: no line of a help page names an option and
//! leaves it undescribed.
//!
//! clink and clink-audit are walked as a user sees them: `--help` of the
//! binary, then of every subcommand it lists, recursively, each page read
//! as clap prints it. clink-reference-audit is a library's command line
//! (a dev-dependency here), so its page is rendered from its clap command.

use std::path::Path;
use std::process::Command;

use clap::CommandFactory;

/// An item of a help page (an option, an argument, a subcommand) with no
/// description: the page's command, the section, the item.
#[derive(Debug)]
struct Undescribed {
    command: String,
    section: String,
    item: String,
}

/// A section heading of a help page: `Options:`, `Arguments:`, a custom heading.
fn heading(line: &str) -> Option<&str> {
    let name = line.strip_suffix(':')?;
    let first = name.chars().next()?;
    (first.is_ascii_uppercase() && !name.starts_with(' ')).then_some(name)
}

/// Reads one help page: the subcommands it lists, and its undescribed items.
/// An item is a line indented by two to nine spaces (`  -h, --help`,
/// `      --json`, `  <DIR>`); its description follows it on the same line
/// after two or more spaces, or on the next line, indented by ten (clap's
/// two layouts).
fn read_page(command: &str, text: &str) -> (Vec<String>, Vec<Undescribed>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut section, mut subcommands, mut undescribed) = (String::new(), Vec::new(), Vec::new());
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = heading(line) {
            section = name.to_string();
            continue;
        }
        if line.starts_with("Usage:") {
            section = "Usage".into();
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if section.is_empty() || section == "Usage" || !(2..10).contains(&indent) {
            continue;
        }
        let item = line.trim_start();
        let (name, same_line) = match item.split_once("  ") {
            Some((name, rest)) => (name.trim(), says_something(rest)),
            None => (item.trim(), false),
        };
        let next_line = lines.get(i + 1).is_some_and(|l| l.starts_with("          ") && says_something(l));
        if section == "Commands" {
            let name = name.split_whitespace().next().unwrap_or_default().to_string();
            if name != "help" {
                subcommands.push(name);
            }
        }
        if !same_line && !next_line {
            undescribed.push(Undescribed { command: command.into(), section: section.clone(), item: name.into() });
        }
    }
    (subcommands, undescribed)
}

/// Whether a description says something beyond clap's own annotations
/// (`[default: 2]`, `[env: X=]`, `[possible values: a, b]`).
fn says_something(text: &str) -> bool {
    let mut rest = text.trim();
    while let Some(open) = rest.rfind(" [").or_else(|| rest.starts_with('[').then_some(0)) {
        if !rest.ends_with(']') {
            break;
        }
        rest = rest[..open].trim_end();
    }
    !rest.is_empty()
}

/// Walks `binary` and every subcommand under it; returns the pages read.
fn walk(binary: &Path, path: &mut Vec<String>, found: &mut Vec<Undescribed>) -> usize {
    let out = Command::new(binary).args(path.iter()).arg("--help").output().expect("the binary runs");
    let shown = format!("{} {}", binary.file_name().unwrap().to_string_lossy(), path.join(" "));
    assert!(out.status.success(), "{shown} --help: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("help is UTF-8");
    let (subcommands, mut undescribed) = read_page(shown.trim(), &text);
    found.append(&mut undescribed);
    let mut pages = 1;
    for sub in subcommands {
        path.push(sub);
        pages += walk(binary, path, found);
        path.pop();
    }
    pages
}

#[test]
fn every_option_of_every_installed_binary_is_described() {
    let mut found = Vec::new();
    let mut pages = 0;
    for binary in [env!("CARGO_BIN_EXE_clink"), env!("CARGO_BIN_EXE_clink-audit")] {
        pages += walk(Path::new(binary), &mut Vec::new(), &mut found);
    }
    let reference = clink_reference_audit::Args::command().render_long_help().to_string();
    let (subcommands, mut undescribed) = read_page("clink-reference-audit", &reference);
    assert!(subcommands.is_empty());
    found.append(&mut undescribed);
    pages += 1;
    // clink's commands and their subcommands, clink-audit's four: far more than this.
    assert!(pages > 40, "only {pages} help pages were read");
    let list: Vec<String> = found.iter().map(|u| format!("{}: {}: {}", u.command, u.section, u.item)).collect();
    assert!(list.is_empty(), "undescribed in --help:\n{}", list.join("\n"));
}

#[test]
fn these_are_the_binaries_a_user_installs() {
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../gates/install-clink")).unwrap();
    let line = script.lines().find(|l| l.contains("installed ") && l.contains(" into ")).expect("the install line");
    assert!(line.contains("clink, clink-audit and clink-reference-audit"), "{line}");
}

#[test]
fn a_page_with_an_undescribed_item_is_caught_in_either_layout() {
    let same_line = "About\n\nUsage: x [OPTIONS]\n\nOptions:\n      --json  Print JSON\n      --bare\n      --n <N>  [default: 2]\n      --m <M>  The m [default: 2] [env: M=]\n  -h, --help  Print help\n";
    let (_, found) = read_page("x", same_line);
    assert_eq!(found.iter().map(|u| u.item.as_str()).collect::<Vec<_>>(), ["--bare", "--n <N>"]);
    let next_line =
        "Usage: x\n\nArguments:\n  <DIR>\n          The directory\n  <FILE>\n\nOptions:\n      --deep\n          Deep\n";
    let (_, found) = read_page("x", next_line);
    assert_eq!(found.iter().map(|u| u.item.as_str()).collect::<Vec<_>>(), ["<FILE>"]);
    let commands = "Usage: x <COMMAND>\n\nCommands:\n  run   Run it\n  stop\n  help  Print this message\n";
    let (subs, found) = read_page("x", commands);
    assert_eq!(subs, ["run", "stop"]);
    assert_eq!(found.iter().map(|u| u.item.as_str()).collect::<Vec<_>>(), ["stop"]);
}
