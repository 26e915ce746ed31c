//! How this process asks the kernel for memory.

/// Turns transparent huge pages off for this process (Linux; elsewhere a no-op).
///
/// mimalloc marks its arenas `MADV_HUGEPAGE` and, a second after a block is freed, gives
/// 64 KiB pieces of it back with `MADV_DONTNEED`. In a huge-page region the next touch of
/// such a piece faults in a whole new 2 MiB page, which the kernel zeroes first. `delayq run`
/// allocates and frees a few MiB per large transaction (a transaction's index, the pieces
/// read back), and in the 50,000-row benchmark this zeroing (`clear_page_erms`) was a third
/// of pgyard's CPU. The flag is per process and checked at every fault, so regions mapped
/// before `main` obey it too. A failure only costs speed, so it is ignored.
pub fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    disable();
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn disable() {
    // SAFETY: PR_SET_THP_DISABLE takes plain integers, reads and writes none of our memory,
    // and changes only how the kernel backs later page faults.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}
