//! The daemon's hand-back of free memory: memory freed between blocks still in use, which no
//! arena gives back by itself, leaves the resident set once trimmed. In a process of its own:
//! the resident set is the whole process's.

/// This process's resident set, in bytes (`/proc/self/statm`, in pages).
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages in /proc/self/statm");
    // SAFETY: sysconf has no memory effects.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

#[test]
#[cfg(target_env = "gnu")]
fn freed_memory_between_blocks_in_use_leaves_the_resident_set_once_trimmed() {
    const BLOCK: usize = 64 << 10;
    const BLOCKS: usize = 2048;
    // Blocks under glibc's mmap threshold, each followed by a small one kept: the freed blocks
    // are holes in the heap, which the heap's own trimming at its top never reaches.
    let mut freed = Vec::with_capacity(BLOCKS);
    let mut kept = Vec::with_capacity(BLOCKS);
    for i in 0..BLOCKS {
        freed.push(vec![i as u8 | 1; BLOCK]);
        kept.push(vec![i as u8; 64]);
    }
    drop(freed);
    let held = resident();
    presso_fs::memory::trim();
    let trimmed = resident();
    let holes = (BLOCK * BLOCKS) as u64;
    assert!(
        held.saturating_sub(trimmed) >= holes / 2,
        "trimming gave back {} of {} bytes freed (resident {held} before, {trimmed} after)",
        held.saturating_sub(trimmed),
        holes
    );
    assert!(kept.iter().enumerate().all(|(i, k)| k[63] == i as u8));
}

#[test]
fn the_trimmer_stops_when_dropped() {
    let trimmer = presso_fs::memory::Trimmer::start(|| 0);
    drop(trimmer);
}
