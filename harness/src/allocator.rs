//! How the `clink` binary's allocator (mimalloc, chosen in main.rs) treats
//! the memory a command frees. Only the binary decides this; libraries never
//! touch the allocator.

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

/// mimalloc's `mi_option_purge_delay` (mimalloc.h, `mi_option_e`; the
/// bindings do not name it). Its default is 1000 (ms), which no other option
/// of the bundled mimalloc has: the test below checks that this index is it.
const PURGE_DELAY: mi_option_t = 15;

/// Keeps the pages this process frees instead of returning them to the
/// kernel a second later. A verification decodes and drops hundreds of
/// captures of similar sizes: with the default, each freed stretch went back
/// to the kernel and the next capture faulted it in again, which the kernel
/// zeroes first (`clear_page_erms`, 5.5% of `incident-verify --profile
/// replay`'s CPU over the 1M bundle, and half its system time). The process
/// keeps its peak until it exits, which a command that ends when its work
/// does may; a running job (`clink run`) keeps the default.
pub fn keep_freed_pages() {
    // SAFETY: mi_option_set only stores the value; mimalloc reads it at its
    // next purge, from any thread.
    unsafe { mi_option_set(PURGE_DELAY, -1) }
}

/// The purge delay the allocator holds now, in milliseconds (-1: never).
#[cfg_attr(not(test), allow(dead_code))]
pub fn purge_delay_ms() -> std::ffi::c_long {
    // SAFETY: reading an option has no preconditions.
    unsafe { mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_set_is_the_purge_delay() {
        assert_eq!(purge_delay_ms(), 1000, "index {PURGE_DELAY} is not mimalloc's purge delay (default 1000 ms)");
        keep_freed_pages();
        assert_eq!(purge_delay_ms(), -1);
    }
}
