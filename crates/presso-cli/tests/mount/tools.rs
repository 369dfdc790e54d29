//! Ordinary tools as the mount's clients: a mixed corpus copied in and out, tar, git and
//! rsync, each surviving a remount.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::common::*;

/// The bytes of `data` in records that are not all zeros: what the pool stores as logical
/// bytes (all-zero records are holes).
fn non_hole_bytes(data: &[u8]) -> u64 {
    data.chunks(RECORD)
        .filter(|c| c.iter().any(|&b| b != 0))
        .map(|c| c.len() as u64)
        .sum()
}

/// Writes ~64 MB of mixed data below `dir`; returns (bytes written, bytes outside holes).
fn write_corpus(dir: &Path) -> (u64, u64) {
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("text/app-1.log".into(), text_like(1, 9 << 20)),
        ("text/app-2.log".into(), text_like(2, (7 << 20) + 12_345)),
        (
            "text/nested/deeper/app-3.log".into(),
            text_like(3, (5 << 20) - 777),
        ),
        ("fastq/sample-1.fastq".into(), fastq_like(4, 10 << 20)),
        (
            "fastq/sample-2.fastq".into(),
            fastq_like(5, (8 << 20) + 333),
        ),
        ("random/blob.bin".into(), random_bytes(6, (10 << 20) + 4321)),
        ("zeros/zeros.img".into(), vec![0; 8 << 20]),
    ];
    // Text, then zeros, then FASTQ, then zeros again up to an unaligned end.
    let mut mixed = text_like(7, (2 << 20) + 1000);
    mixed.resize(mixed.len() + (2 << 20), 0);
    mixed.extend(fastq_like(8, (1 << 20) + 17));
    mixed.resize(mixed.len() + 999_999, 0);
    files.push(("zeros/mixed.img".into(), mixed));
    let mut rng = Rng::new(9);
    for i in 0..40 {
        let n = rng.range(1, 64 << 10) as usize;
        files.push((format!("small/random-{i:02}.bin"), random_bytes(100 + i, n)));
    }
    for i in 0..120 {
        let n = rng.range(0, 20_000) as usize;
        files.push((
            format!("small/d{}/note-{i:03}.txt", i % 7),
            text_like(200 + i, n),
        ));
    }
    let (mut written, mut logical) = (0, 0);
    for (name, data) in &files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
        written += data.len() as u64;
        logical += non_hole_bytes(data);
    }
    (written, logical)
}

#[test]
fn corpus_round_trip_compresses_and_survives_a_remount() {
    require_tool("cp", "coreutils");
    let mut f = Fixture::new("corpus");
    let src = f.scratch("corpus");
    let (written, logical) = write_corpus(&src);
    assert!(written > 60 << 20, "the corpus is {written} bytes");

    tool("cp", &[&"-r", &src, &f.p("corpus")]).ok();
    fsync_tree(&f.p("corpus"));
    let s = f.status();
    assert_eq!(s["logical_bytes"], logical, "status after the copy: {s}");
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "no compression: {s}");
    assert!(
        s["holes"].as_u64().unwrap() >= 64,
        "zeros not stored as holes: {s}"
    );
    assert!(s["stored_bytes"].as_u64().unwrap() < logical, "{s}");
    assert_eq!(s["corruptions"], 0, "{s}");
    assert_eq!(assert_trees_equal(&src, &f.p("corpus")), 168);

    f.remount(&[]);
    assert_eq!(assert_trees_equal(&src, &f.p("corpus")), 168);
    let s = f.status();
    assert_eq!(s["logical_bytes"], logical, "status after the remount: {s}");
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "{s}");
    let out = f.presso_on_mount(&["scrub", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["damaged"], serde_json::json!([]), "{report}");
    assert!(
        report["records_checked"].as_u64().unwrap() > 300,
        "{report}"
    );
    // The same figures from the pool itself once unmounted.
    f.unmount();
    let offline = f.status();
    assert_eq!(offline["logical_bytes"], logical, "{offline}");
    assert_eq!(offline["stored_bytes"], s["stored_bytes"], "{offline}");
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

#[test]
fn tar_of_a_source_tree_in_and_out() {
    require_tool("tar", "tar");
    require_tool("diff", "diffutils");
    let f = Fixture::new("tar");
    let tarball = f.p("crates.tar");
    let root = repo_root();
    tool("tar", &[&"-cf", &tarball, &"-C", &root, &"crates"]).ok();

    // Extract inside the mount, and (from the tarball in the mount) on the host.
    let inside = f.p("extracted");
    let outside = f.scratch("extracted");
    for dir in [&inside, &outside] {
        std::fs::create_dir(dir).unwrap();
        tool("tar", &[&"-xf", &tarball, &"-C", dir]).ok();
    }
    tool("diff", &[&"-r", &outside, &inside]).ok();
    // tar's own comparison also checks sizes, modes and modification times in the mount.
    tool("tar", &[&"-df", &tarball, &"-C", &inside]).ok();
    let files = assert_trees_equal(&outside.join("crates"), &inside.join("crates"));
    assert!(files > 20, "only {files} files in the source tree");

    // And out again: a tarball of the tree in the mount lists the same entries.
    let out_tar = f.scratch("out.tar");
    tool("tar", &[&"-cf", &out_tar, &"-C", &inside, &"crates"]).ok();
    let list = |t: &Path| {
        let out = tool("tar", &[&"-tvf", &t]).ok();
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(list(&tarball), list(&out_tar));
}

fn git(repo: &Path, home: &Path, args: &[&str]) -> String {
    let mut c = cmd("git", args);
    c.current_dir(repo)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com");
    exec(&mut c).ok()
}

#[test]
fn git_repository_in_the_mount_survives_a_remount() {
    require_tool("git", "git");
    let mut f = Fixture::new("git");
    let home = f.scratch("home");
    std::fs::create_dir(&home).unwrap();
    let repo = f.p("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &home, &["init", "-q", "-b", "main"]);
    for i in 0..6u64 {
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join(format!("src/file-{i}.txt")), text_like(i, 30_000)).unwrap();
        std::fs::write(
            repo.join("data.log"),
            text_like(50 + i, 200_000 + 999 * i as usize),
        )
        .unwrap();
        if i == 3 {
            std::fs::rename(repo.join("src/file-0.txt"), repo.join("renamed.txt")).unwrap();
            std::fs::remove_file(repo.join("src/file-1.txt")).unwrap();
        }
        git(&repo, &home, &["add", "-A"]);
        git(
            &repo,
            &home,
            &["commit", "-q", "-m", &format!("commit {i}")],
        );
        if i == 4 {
            // Pack files and their index, written and renamed by git itself.
            git(&repo, &home, &["gc", "-q"]);
        }
    }
    git(&repo, &home, &["fsck", "--full", "--strict"]);

    f.remount(&[]);
    git(&repo, &home, &["fsck", "--full", "--strict"]);
    let log = git(&repo, &home, &["log", "--format=%s"]);
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(
        subjects,
        ["commit 5", "commit 4", "commit 3", "commit 2", "commit 1", "commit 0"]
    );
    assert_eq!(git(&repo, &home, &["status", "--porcelain"]), "");
    let shown = git(&repo, &home, &["show", "HEAD~2:data.log"]);
    assert_bytes_eq(
        shown.as_bytes(),
        &text_like(53, 200_000 + 999 * 3),
        "data.log at HEAD~2",
    );
    assert_file_eq(&repo.join("data.log"), &text_like(55, 200_000 + 999 * 5));
}

/// A tree with nested directories, small and large files, symlinks, modes and old mtimes.
fn make_tree(dir: &Path) {
    let mut rng = Rng::new(77);
    for i in 0..60u64 {
        let sub = dir.join(format!("d{}/e{}", i % 5, i % 3));
        std::fs::create_dir_all(&sub).unwrap();
        let n = match i % 4 {
            0 => rng.range(0, 4096),
            1 => rng.range(4096, 300_000),
            2 => rng.range(300_000, 2_000_000),
            _ => rng.range(1, 100),
        } as usize;
        let data = if i % 2 == 0 {
            text_like(1000 + i, n)
        } else {
            random_bytes(1000 + i, n)
        };
        let path = sub.join(format!("f{i}.dat"));
        std::fs::write(&path, data).unwrap();
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(0o600 + (i as u32 % 0o100)),
        )
        .unwrap();
        set_mtime(&path, 1_600_000_000 + i as i64 * 1000);
    }
    std::os::unix::fs::symlink("d0/e0/f0.dat", dir.join("link-to-f0")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
}

fn set_mtime(path: &Path, secs: i64) {
    let times = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c_path(path).as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}: errno {}", path.display(), errno());
}

#[test]
fn rsync_in_and_checksummed_rsync_out() {
    require_tool("rsync", "rsync");
    let mut f = Fixture::new("rsync");
    let src = f.scratch("src");
    make_tree(&src);
    let slash = |p: &Path| format!("{}/", p.display());
    let dst = f.p("dst");
    tool("rsync", &[&"-a", &slash(&src), &slash(&dst)]).ok();
    f.remount(&[]);

    // Nothing to transfer by checksum: contents, modes, times and links all arrived.
    let changes = tool(
        "rsync",
        &[
            &"-a",
            &"--checksum",
            &"--dry-run",
            &"--itemize-changes",
            &slash(&src),
            &slash(&dst),
        ],
    )
    .ok();
    assert_eq!(
        changes.trim(),
        "",
        "rsync sees differences after the remount"
    );

    let fresh = f.scratch("fresh");
    tool(
        "rsync",
        &[&"-a", &"--checksum", &slash(&dst), &slash(&fresh)],
    )
    .ok();
    assert_eq!(assert_trees_equal(&src, &fresh), 60);
    for i in 0..60u64 {
        let rel = format!("d{}/e{}/f{i}.dat", i % 5, i % 3);
        let (a, b) = (
            std::fs::metadata(src.join(&rel)).unwrap(),
            std::fs::metadata(fresh.join(&rel)).unwrap(),
        );
        assert_eq!(a.mode(), b.mode(), "mode of {rel}");
        assert_eq!(a.mtime(), b.mtime(), "mtime of {rel}");
    }
}
