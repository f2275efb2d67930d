//! What a push reads: directory trees on the local disk, walked into a list
//! of regular files, each with the path it will have in the manifest.
//!
//! A link, a special file, a name that is not UTF-8 or that breaks the
//! manifest's path rules is refused, naming it: nothing is skipped quietly,
//! and nothing outside the named trees is followed into.

use std::fs;
use std::path::{Path, PathBuf};

use crate::manifest::check_path;
use crate::StoreError;

/// One tree to push: everything under `root/sub` (or all of `root` when
/// `sub` is empty), named `prefix/sub/...` in the manifest.
#[derive(Debug, Clone)]
pub struct Tree {
    pub root: PathBuf,
    pub sub: String,
    pub prefix: String,
}

/// A file to push: where it is, its manifest path, and its size when listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub disk: PathBuf,
    pub path: String,
    pub size: u64,
}

/// Lists every regular file of the trees, sorted by manifest path.
/// `max_files` bounds the walk itself, so a huge tree is refused early.
pub fn list_trees(trees: &[Tree], max_files: u64) -> Result<Vec<SourceFile>, StoreError> {
    let mut files = Vec::new();
    for tree in trees {
        let start = if tree.sub.is_empty() { tree.root.clone() } else { tree.root.join(&tree.sub) };
        let name = join(&tree.prefix, &tree.sub);
        match fs::symlink_metadata(&start) {
            Ok(m) if m.is_dir() => walk(&start, &name, &mut files, max_files)?,
            Ok(_) => return Err(StoreError::Refused(format!("{} is not a directory", start.display()))),
            Err(e) => return Err(StoreError::Refused(format!("{}: {e}", start.display()))),
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

fn walk(dir: &Path, name: &str, out: &mut Vec<SourceFile>, max_files: u64) -> Result<(), StoreError> {
    let refuse = |path: &Path, why: String| StoreError::Refused(format!("{}: {why}", path.display()));
    let entries = fs::read_dir(dir).map_err(|e| refuse(dir, e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| refuse(dir, e.to_string()))?;
        let disk = entry.path();
        let Ok(file_name) = entry.file_name().into_string() else {
            return Err(refuse(&disk, "the name is not UTF-8".into()));
        };
        let path = join(name, &file_name);
        check_path(&path).map_err(|why| refuse(&disk, why))?;
        let meta = fs::symlink_metadata(&disk).map_err(|e| refuse(&disk, e.to_string()))?;
        if meta.file_type().is_symlink() {
            return Err(refuse(&disk, "a link; the store holds regular files only".into()));
        } else if meta.is_dir() {
            walk(&disk, &path, out, max_files)?;
        } else if meta.is_file() {
            if out.len() as u64 >= max_files {
                return Err(StoreError::Refused(format!(
                    "more than --max-files {max_files} files to push (at {})",
                    disk.display()
                )));
            }
            out.push(SourceFile { disk, path, size: meta.len() });
        } else {
            return Err(refuse(&disk, "not a regular file".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(root: &Path, sub: &str, prefix: &str) -> Tree {
        Tree { root: root.to_path_buf(), sub: sub.into(), prefix: prefix.into() }
    }

    #[test]
    fn trees_list_their_files_under_their_prefixes() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("a/b")).unwrap();
        fs::write(d.path().join("a/b/f"), b"xy").unwrap();
        fs::write(d.path().join("top"), b"").unwrap();
        let files = list_trees(&[tree(d.path(), "a", "checkpoint"), tree(d.path(), "", "all")], 10).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["all/a/b/f", "all/top", "checkpoint/a/b/f"]);
        assert_eq!(files[0].size, 2);
        assert!(list_trees(&[tree(d.path(), "", "")], 1).is_err());
    }

    #[test]
    fn a_link_is_refused_naming_it() {
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join("l")).unwrap();
        let err = list_trees(&[tree(d.path(), "", "x")], 10).unwrap_err().to_string();
        assert!(err.contains("l: a link"), "{err}");
    }
}
