//! SHA-256 digests in lowercase hex.
//!
//! Files are hashed by streaming them through the hasher, never by reading
//! them whole: an artifact of any size costs a fixed buffer.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Whether text is a SHA-256 in lowercase hex (64 digits).
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What hashing a stream found: its length and its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDigest {
    pub bytes: u64,
    pub sha256: String,
}

/// Hashes everything a reader yields, reading at most `limit + 1` bytes so a
/// stream longer than its limit is seen as such without being read to its end.
pub fn sha256_reader(reader: impl Read, limit: u64) -> io::Result<StreamDigest> {
    let mut hasher = Sha256::new();
    let bytes = io::copy(&mut reader.take(limit.saturating_add(1)), &mut hasher)?;
    Ok(StreamDigest { bytes, sha256: hex(&hasher.finalize()) })
}

/// Hashes a file by streaming it; `limit` bounds how much is read.
pub fn sha256_file(path: &Path, limit: u64) -> io::Result<StreamDigest> {
    sha256_reader(File::open(path)?, limit)
}

/// Copies everything a reader yields into a writer while hashing it: one
/// pass, a fixed buffer, whatever the size.
pub fn copy_hashed(mut reader: impl Read, mut writer: impl Write) -> io::Result<StreamDigest> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        writer.write_all(&buf[..n])?;
        bytes += n as u64;
    }
    Ok(StreamDigest { bytes, sha256: hex(&hasher.finalize()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_nothing_is_the_published_one() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert!(is_sha256_hex(&sha256_hex(b"x")));
        assert!(!is_sha256_hex(&sha256_hex(b"x").to_uppercase()));
    }

    #[test]
    fn streaming_agrees_with_hashing_in_memory_and_stops_past_the_limit() {
        let data = vec![7u8; 200_000];
        let d = sha256_reader(&data[..], u64::MAX).unwrap();
        assert_eq!(d, StreamDigest { bytes: 200_000, sha256: sha256_hex(&data) });
        let cut = sha256_reader(&data[..], 10).unwrap();
        assert_eq!(cut.bytes, 11, "one byte past the limit shows the stream is longer");
        let mut copy = Vec::new();
        assert_eq!(copy_hashed(&data[..], &mut copy).unwrap(), d);
        assert_eq!(copy, data);
    }
}
