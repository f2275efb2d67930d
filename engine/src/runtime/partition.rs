//! Which subtask a keyed record goes to.
//!
//! A key's group is a stable hash of its canonical bytes modulo
//! [`KEY_GROUPS`]; a subtask owns a contiguous range of groups. The hash is
//! FNV-1a, written out here rather than taken from a crate, because it must
//! never change between builds: a restored subtask must own the keys whose state
//! it restored, and the std hasher promises no stability.

/// The number of key groups (the most a keyed operator can be scaled to).
pub const KEY_GROUPS: u32 = 128;

pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub fn key_group(key: &[u8]) -> u32 {
    (fnv1a64(key) % u64::from(KEY_GROUPS)) as u32
}

/// The subtask of `parallelism` that owns a key group.
pub fn subtask_for_group(group: u32, parallelism: u32) -> u32 {
    group * parallelism / KEY_GROUPS
}

pub fn subtask_for_key(key: &[u8], parallelism: u32) -> u32 {
    subtask_for_group(key_group(key), parallelism)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_published_fnv1a() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn every_group_has_an_owner_in_range() {
        for p in 1..=KEY_GROUPS {
            for g in 0..KEY_GROUPS {
                assert!(subtask_for_group(g, p) < p);
            }
        }
    }
}
