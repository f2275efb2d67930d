//! Reading a sink's committed output: every line of every published file, in
//! file name order. Independent of the engine's readers on purpose.

use std::fs;
use std::io;
use std::path::Path;

/// Every line of every regular, non-hidden file directly in `dir`, in file
/// name order. A link or a directory inside is refused, not followed.
pub fn read_output_lines(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let kind = entry.file_type()?;
        if !kind.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a regular file", entry.path().display()),
            ));
        }
        names.push(name);
    }
    names.sort();
    let mut lines = Vec::new();
    for name in names {
        let text = fs::read_to_string(dir.join(&name))?;
        lines.extend(text.lines().map(str::to_string));
    }
    Ok(lines)
}

/// Lines of a file (an expected output).
pub fn read_lines(path: &Path) -> io::Result<Vec<String>> {
    Ok(fs::read_to_string(path)?.lines().map(str::to_string).collect())
}
