//! The FUSE floor: the least any FUSE file system can cost on this machine, for benchmarks.
//!
//! It is mounted with Presso's own options and INIT capabilities (`mount_config`,
//! `configure_kernel`: writeback cache, READDIRPLUS, several request channels, permissions
//! checked by the kernel), keeps names and attributes in one in-memory table, and writes each
//! regular file's bytes to a file of its own in DATA_DIR: one copy per byte, no metadata
//! database, no records, no checksums, no compression, nothing durable but what fsync reaches.
//! What a workload costs on it is what the kernel's FUSE costs plus a plain store; what Presso
//! costs beyond it is Presso's own (bench/namespace.sh and bench/run.sh, target `fuse-floor`, compare them).
//!
//! ```text
//! cargo build --release -p presso-fs --example fuse_floor
//! target/release/examples/fuse_floor DATA_DIR MOUNTPOINT [CHANNELS]
//! ```
//! It prints `mounted` once the mount is in place and serves until it is unmounted.

mod filesystem;
mod table;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use fuser::{FileAttr, FileType, INodeNo, MountOption};
use parking_lot::Mutex;
use presso_fs::fuse::{mount_config, DEFAULT_CHANNELS};

use table::{now, Floor, Node, Table, ROOT};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || args.len() > 4 {
        eprintln!("usage: fuse_floor DATA_DIR MOUNTPOINT [CHANNELS]");
        std::process::exit(2);
    }
    let data = PathBuf::from(&args[1]);
    let channels = match args.get(3).map(|c| c.parse::<usize>()) {
        None => DEFAULT_CHANNELS,
        Some(Ok(c)) if c > 0 => c,
        Some(_) => {
            eprintln!(
                "fuse_floor: CHANNELS must be a positive number, not {}",
                args[3]
            );
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&data) {
        eprintln!("fuse_floor: cannot make {}: {e}", data.display());
        std::process::exit(1);
    }
    let mut root = Node {
        attr: FileAttr {
            ino: INodeNo(ROOT),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: now(),
            ctime: now(),
            crtime: now(),
            kind: FileType::Directory,
            perm: 0o755,
            nlink: 2,
            uid: unsafe { libc::getuid() },
            gid: unsafe { libc::getgid() },
            rdev: 0,
            blksize: 128 << 10,
            flags: 0,
        },
        children: BTreeMap::new(),
        target: Vec::new(),
        file: None,
        opens: 0,
    };
    root.attr.atime = root.attr.mtime;
    let floor = Floor {
        table: Mutex::new(Table {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
        }),
        data: data.clone(),
    };
    let mut config = mount_config(&data, false, false, false, channels);
    for option in &mut config.mount_options {
        if let MountOption::Subtype(s) = option {
            *s = "presso-floor".into();
        }
    }
    let session = match fuser::Session::new(floor, Path::new(&args[2]), &config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fuse_floor: cannot mount at {}: {e}", args[2]);
            std::process::exit(1);
        }
    };
    println!("mounted");
    let _ = std::io::stdout().flush();
    if let Err(e) = session.run() {
        eprintln!("fuse_floor: {e}");
        std::process::exit(1);
    }
}
