//! Comparing what a mount holds with what is expected: bytes, files (through the page cache and
//! with O_DIRECT) and whole trees; and fsync of a whole tree.

use std::io::Read;
use std::path::Path;

/// Byte-compares the file at `path` in a mount with `expected`, read both through the page
/// cache and with O_DIRECT (past the cache, from the daemon); panics at the first difference.
pub fn assert_file_eq(path: &Path, expected: &[u8]) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_bytes_eq(&got, expected, &path.display().to_string());
    let direct = read_direct(path);
    assert_bytes_eq(&direct, expected, &format!("{} (O_DIRECT)", path.display()));
}

/// Reads a whole file in a FUSE mount with O_DIRECT, so the daemon answers rather than the
/// kernel's page cache (the kernel writes cached dirty pages back first).
pub fn read_direct(path: &Path) -> Vec<u8> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} with O_DIRECT: {e}", path.display()));
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .unwrap_or_else(|e| panic!("read {} with O_DIRECT: {e}", path.display()));
    data
}

/// Panics with the first differing offset unless `got == expected`.
pub fn assert_bytes_eq(got: &[u8], expected: &[u8], what: &str) {
    if got == expected {
        return;
    }
    let first = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    panic!(
        "{what}: {} bytes, expected {}; first difference at offset {first}",
        got.len(),
        expected.len()
    );
}

/// Compares two trees: the same names, kinds, symlink targets and file contents. Returns the
/// number of regular files compared.
pub fn assert_trees_equal(a: &Path, b: &Path) -> usize {
    let mut files = 0;
    compare_dirs(a, b, &mut files);
    files
}

fn sorted_names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").file_name())
        .collect();
    names.sort();
    names
}

fn compare_dirs(a: &Path, b: &Path, files: &mut usize) {
    let (na, nb) = (sorted_names(a), sorted_names(b));
    assert_eq!(
        na,
        nb,
        "{} and {} list different names",
        a.display(),
        b.display()
    );
    for name in na {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let ma = std::fs::symlink_metadata(&pa).expect("stat a");
        let mb = std::fs::symlink_metadata(&pb).expect("stat b");
        let (ta, tb) = (ma.file_type(), mb.file_type());
        if ta.is_symlink() {
            assert!(tb.is_symlink(), "{} is not a symlink", pb.display());
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap(),
                "symlink target of {}",
                pb.display()
            );
        } else if ta.is_dir() {
            assert!(tb.is_dir(), "{} is not a directory", pb.display());
            compare_dirs(&pa, &pb, files);
        } else {
            assert!(tb.is_file(), "{} is not a regular file", pb.display());
            assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
            assert_same_contents(&pa, &pb);
            *files += 1;
        }
    }
}

/// Streams two files and panics at the first differing byte.
pub fn assert_same_contents(a: &Path, b: &Path) {
    let mut fa = std::fs::File::open(a).unwrap_or_else(|e| panic!("open {}: {e}", a.display()));
    let mut fb = std::fs::File::open(b).unwrap_or_else(|e| panic!("open {}: {e}", b.display()));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut fa, &mut ba);
        let m = read_full(&mut fb, &mut bb);
        if ba[..n] != bb[..m] {
            let at = ba[..n]
                .iter()
                .zip(&bb[..m])
                .position(|(x, y)| x != y)
                .unwrap_or(n.min(m));
            panic!(
                "{} and {} differ at offset {}",
                a.display(),
                b.display(),
                offset + at as u64
            );
        }
        if n == 0 {
            return;
        }
        offset += n as u64;
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

/// Calls fsync on every regular file below `dir`.
pub fn fsync_tree(dir: &Path) {
    for name in sorted_names(dir) {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        if meta.is_dir() {
            fsync_tree(&path);
        } else if meta.is_file() {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .unwrap_or_else(|e| panic!("fsync {}: {e}", path.display()));
        }
    }
}
