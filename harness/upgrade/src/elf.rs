//! What a candidate binary is, read from its first bytes: an ELF executable
//! for this machine, and the loader it names; or why it is not one.
//!
//! The reader sees only a bounded prefix of the file and never follows an
//! offset outside it. It never runs anything.

/// How many bytes of a binary are read to find its program headers and its
/// loader's name (linkers put both in the first page).
pub const PREFIX_BYTES: usize = 64 * 1024;

/// The longest loader path taken.
const MAX_INTERP: usize = 4096;

const PT_INTERP: u32 = 3;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// The ELF machine this build runs on; a binary for another cannot run here.
pub fn this_machine() -> Option<u16> {
    if cfg!(target_arch = "x86_64") {
        Some(EM_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(EM_AARCH64)
    } else {
        None
    }
}

/// What the prefix says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binary {
    /// Statically linked: no loader, no library.
    Static,
    /// The loader (the program interpreter) the kernel starts it with.
    Dynamic { loader: String },
}

/// Why a file cannot be pinned as a binary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotPinnable {
    #[error(
        "it is an interpreter script (it begins with #!): what runs is its interpreter and whatever the script reads, which no hash of the script names"
    )]
    Script,
    #[error("it is not an ELF executable ({0})")]
    NotElf(String),
    #[error("it is an ELF file this machine does not run ({0})")]
    OtherMachine(String),
    #[error("its ELF headers are malformed ({0})")]
    Malformed(String),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Reads a binary's kind from its first bytes (at most [`PREFIX_BYTES`]).
pub fn read_prefix(prefix: &[u8]) -> Result<Binary, NotPinnable> {
    let malformed = |what: &str| NotPinnable::Malformed(what.to_string());
    if prefix.starts_with(b"#!") {
        return Err(NotPinnable::Script);
    }
    if !prefix.starts_with(b"\x7fELF") {
        return Err(NotPinnable::NotElf("it does not begin with the ELF magic".into()));
    }
    if prefix.len() < 64 {
        return Err(malformed("shorter than an ELF64 header"));
    }
    if prefix[4] != 2 || prefix[5] != 1 {
        return Err(NotPinnable::OtherMachine(format!(
            "class {} data {}, not 64-bit little-endian",
            prefix[4], prefix[5]
        )));
    }
    let kind = u16_at(prefix, 16).ok_or_else(|| malformed("no type"))?;
    if kind != ET_EXEC && kind != ET_DYN {
        return Err(NotPinnable::NotElf(format!("ELF type {kind}, not an executable")));
    }
    let machine = u16_at(prefix, 18).ok_or_else(|| malformed("no machine"))?;
    if Some(machine) != this_machine() {
        return Err(NotPinnable::OtherMachine(format!("machine {machine}")));
    }
    let phoff = u64_at(prefix, 32).ok_or_else(|| malformed("no program header offset"))?;
    let phentsize = usize::from(u16_at(prefix, 54).ok_or_else(|| malformed("no program header size"))?);
    let phnum = usize::from(u16_at(prefix, 56).ok_or_else(|| malformed("no program header count"))?);
    if phentsize < 56 {
        return Err(malformed("program headers shorter than ELF64's"));
    }
    let start = usize::try_from(phoff).map_err(|_| malformed("program headers out of reach"))?;
    let mut loader = None;
    for i in 0..phnum {
        let at = i
            .checked_mul(phentsize)
            .and_then(|o| start.checked_add(o))
            .ok_or_else(|| malformed("program headers out of reach"))?;
        let p_type = u32_at(prefix, at)
            .ok_or_else(|| malformed(&format!("program header {i} lies past the first {} bytes read", prefix.len())))?;
        if p_type != PT_INTERP {
            continue;
        }
        if loader.is_some() {
            return Err(malformed("two program interpreters"));
        }
        let offset = u64_at(prefix, at + 8).ok_or_else(|| malformed("interpreter header cut"))?;
        let size = u64_at(prefix, at + 32).ok_or_else(|| malformed("interpreter header cut"))?;
        loader = Some(interpreter_name(prefix, offset, size)?);
    }
    Ok(match loader {
        None => Binary::Static,
        Some(loader) => Binary::Dynamic { loader },
    })
}

/// The loader's path: absolute UTF-8 text ending in one NUL.
fn interpreter_name(prefix: &[u8], offset: u64, size: u64) -> Result<String, NotPinnable> {
    let malformed = |what: &str| NotPinnable::Malformed(what.to_string());
    let (offset, size) = match (usize::try_from(offset), usize::try_from(size)) {
        (Ok(o), Ok(s)) if s <= MAX_INTERP => (o, s),
        _ => return Err(malformed("the interpreter's name is out of reach")),
    };
    let bytes = offset
        .checked_add(size)
        .and_then(|end| prefix.get(offset..end))
        .ok_or_else(|| malformed("the interpreter's name lies past the bytes read"))?;
    let text = bytes.strip_suffix(b"\0").ok_or_else(|| malformed("the interpreter's name is not NUL-terminated"))?;
    let text = std::str::from_utf8(text).map_err(|_| malformed("the interpreter's name is not UTF-8"))?;
    if !text.starts_with('/') || text.contains('\0') {
        return Err(malformed("the interpreter's name is not an absolute path"));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A minimal ELF64 header for this machine with `phnum` program headers at 64.
    fn header(kind: u16, phnum: u16) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&kind.to_le_bytes());
        b[18..20].copy_from_slice(&this_machine().unwrap().to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&phnum.to_le_bytes());
        b
    }

    fn with_interp(name: &[u8]) -> Vec<u8> {
        let mut b = header(ET_DYN, 1);
        let mut ph = vec![0u8; 56];
        ph[..4].copy_from_slice(&PT_INTERP.to_le_bytes());
        ph[8..16].copy_from_slice(&120u64.to_le_bytes());
        ph[32..40].copy_from_slice(&(name.len() as u64).to_le_bytes());
        b.extend(ph);
        b.extend(name);
        b
    }

    #[test]
    fn this_test_binary_is_read_as_what_it_is() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let kind = read_prefix(&me[..me.len().min(PREFIX_BYTES)]).unwrap();
        match kind {
            Binary::Dynamic { loader } => assert!(std::path::Path::new(&loader).exists(), "{loader}"),
            Binary::Static => {}
        }
    }

    #[test]
    fn scripts_other_files_and_bent_headers_are_refused_each_with_its_reason() {
        assert_eq!(read_prefix(b"#!/bin/sh\nexec x\n"), Err(NotPinnable::Script));
        assert!(matches!(read_prefix(b"MZ\x90\x00"), Err(NotPinnable::NotElf(_))));
        assert!(matches!(read_prefix(b"\x7fELF"), Err(NotPinnable::Malformed(_))));
        assert_eq!(read_prefix(&header(ET_EXEC, 0)), Ok(Binary::Static));
        assert!(matches!(read_prefix(&header(1, 0)), Err(NotPinnable::NotElf(_))), "a relocatable object");
        let mut other = header(ET_EXEC, 0);
        other[18] ^= 0xff;
        assert!(matches!(read_prefix(&other), Err(NotPinnable::OtherMachine(_))));
        assert_eq!(read_prefix(&with_interp(b"/lib/ld.so\0")), Ok(Binary::Dynamic { loader: "/lib/ld.so".into() }));
        for bad in [&b"lib/ld.so\0"[..], b"/lib/ld.so", b"/lib/\xffld\0"] {
            assert!(matches!(read_prefix(&with_interp(bad)), Err(NotPinnable::Malformed(_))), "{bad:?}");
        }
        let mut twice = with_interp(b"/a\0");
        twice[56..58].copy_from_slice(&2u16.to_le_bytes());
        let first: Vec<u8> = twice[64..120].to_vec();
        twice.truncate(120);
        twice.extend(&first);
        assert!(matches!(read_prefix(&twice), Err(NotPinnable::Malformed(_))), "headers overlapping the name");
        let mut far = header(ET_EXEC, 3);
        far[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(read_prefix(&far), Err(NotPinnable::Malformed(_))));
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = read_prefix(&bytes);
        }

        #[test]
        fn any_change_to_a_valid_header_is_read_or_refused(at in 0usize..140, value: u8) {
            let mut b = with_interp(b"/lib64/ld-linux-x86-64.so.2\0");
            if at < b.len() {
                b[at] = value;
            }
            if let Ok(Binary::Dynamic { loader }) = read_prefix(&b) {
                prop_assert!(loader.starts_with('/'));
            }
        }
    }
}
