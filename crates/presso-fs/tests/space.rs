//! Free space, in process: a write is refused once the disk's free space, less the buffers not
//! yet stored, would fall under `min_free`, whatever the size of the writes (the file layer
//! looks at the free space again when the writes since its last look could have used half the
//! room it saw, or a tenth of a second later); and a write short of room is not refused while
//! collecting garbage makes room, with writers overwriting their files, several at once, on a
//! disk smaller than a segment.

mod common;
mod sim;

use std::sync::Arc;

use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::reclaim::ReclaimPolicy;
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{MetaStore, NewNode, ROOT_INO};
use sim::{Config, Fs};

#[test]
fn writes_stop_at_min_free_however_they_are_split() {
    let config = Config {
        compression: "off",
        offload: "off",
        recordsize: 128 << 10,
    };
    let min_free: u64 = 2 << 20;
    let room: u64 = 16 << 20;
    for chunk in [4u64 << 10, 64 << 10, 1 << 20] {
        let mut fs = Fs::new(&config);
        fs.close();
        // Set before the mount, so that the file layer's first look sees it: a disk filled by
        // another program is seen within a tenth of a second, not at the very next write.
        fs.dir.set_space_budget(Some(fs.dir.used_bytes() + room));
        fs.mount_with(VfsConfig {
            min_free,
            ..sim::vfs_config()
        })
        .expect("mount");
        fs.create(0, 0).unwrap();
        let data = vec![0x5a; chunk as usize];
        let mut accepted = 0u64;
        let refusal = loop {
            match fs.write(0, accepted, &data) {
                Ok(()) => accepted += chunk,
                Err(e) => break e,
            }
            assert!(accepted < 2 * room, "writes of {chunk} bytes never refused");
        };
        assert!(refusal.contains("errno 28"), "{refusal}");
        // Frames and segment headers take a little room beside the bytes themselves.
        let slack = 1 << 20;
        assert!(
            accepted <= room - min_free + chunk,
            "writes of {chunk} bytes took {accepted} of {room} bytes, past min_free"
        );
        assert!(
            accepted + chunk + slack >= room - min_free,
            "writes of {chunk} bytes refused after {accepted} of {room} bytes"
        );
    }
}

/// Writers overwriting their files on a disk with room for their live data and little more:
/// only collection makes room. Every writer that finds space short waits for a pass and looks
/// again, so none is refused while the garbage is being collected, even when another writer's
/// pass collected it all first.
#[test]
fn concurrent_overwriters_are_not_refused_while_collection_makes_room() {
    const FILE: usize = 6 << 20;
    const CHUNK: usize = 1 << 20;
    let config = Config {
        compression: "off",
        offload: "off",
        recordsize: 128 << 10,
    };
    let mut fs = Fs::new(&config);
    fs.close();
    // Room beyond min_free for both files twice over (the old version stays live until the
    // new one commits), one segment's copy during a pass, and 8 MiB of garbage.
    let min_free: u64 = 8 << 20;
    let room = 4 * FILE as u64 + (4 << 20) + (8 << 20);
    fs.dir
        .set_space_budget(Some(fs.dir.used_bytes() + min_free + room));
    fs.mount_with(VfsConfig {
        min_free,
        reclaim: Some(ReclaimPolicy::default()),
        ..sim::vfs_config()
    })
    .expect("mount");
    let vfs = fs.vfs().clone();
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let vfs = vfs.clone();
            std::thread::spawn(move || {
                let name = format!("table{w}");
                let ino = vfs
                    .make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0))
                    .unwrap()
                    .ino;
                vfs.open(ino).unwrap();
                let mut last = Vec::new();
                for generation in 0..24u64 {
                    let data = common::noise(w * 1000 + generation, FILE);
                    for (i, chunk) in data.chunks(CHUNK).enumerate() {
                        let written = vfs.write(ino, (i * CHUNK) as u64, chunk);
                        if let Err(e) = written {
                            panic!("writer {w}, generation {generation}, chunk {i}: {e}");
                        }
                    }
                    vfs.fsync(ino).unwrap();
                    last = data;
                }
                (ino, last)
            })
        })
        .collect();
    for writer in writers {
        let (ino, last) = writer.join().unwrap();
        let read = vfs.read(ino, 0, FILE as u32).unwrap();
        assert!(read == last, "file {ino} does not read its last generation");
    }
}

/// One file overwritten again and again on a disk smaller than a default segment (256 MiB):
/// its segments are fitted to the disk, so each overwrite's garbage lies mostly in segments
/// with nothing live, which a pass for room removes without a copy. With one segment as large
/// as the disk, every pass copied all the live data, new records stored meanwhile included,
/// and took room it did not have.
#[test]
fn overwrites_on_a_disk_smaller_than_a_segment_are_not_refused() {
    const FILE: usize = 24 << 20;
    const CHUNK: usize = 1 << 20;
    let (dir, meta) = sim::new_pool();
    let min_free: u64 = 8 << 20;
    // The file's old and new versions, and one more of garbage.
    dir.set_space_budget(Some(dir.used_bytes() + min_free + 3 * FILE as u64));
    let (pool, _) = Pool::open_with(
        Arc::new(dir.clone()),
        MetaStore::new(Box::new(meta.handle())),
        PoolOptions {
            workers: 2,
            ..PoolOptions::default()
        },
    )
    .expect("open");
    let vfs = Vfs::new(
        pool,
        VfsConfig {
            min_free,
            reclaim: Some(ReclaimPolicy::default()),
            ..sim::vfs_config()
        },
    );
    let ino = vfs
        .make_node(ROOT_INO, b"table", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    vfs.open(ino).unwrap();
    let mut last = Vec::new();
    for generation in 0..12u64 {
        let data = common::noise(generation, FILE);
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            if let Err(e) = vfs.write(ino, (i * CHUNK) as u64, chunk) {
                panic!("generation {generation}, chunk {i}: {e}");
            }
        }
        if let Err(e) = vfs.fsync(ino) {
            panic!("generation {generation}: fsync: {e}");
        }
        last = data;
    }
    assert!(vfs.read(ino, 0, FILE as u32).unwrap() == last);
    vfs.shutdown().unwrap();
}

/// A write from the kernel's cache that was refused for space leaves the file grown to the
/// write's end, as the kernel keeps it: zeros past what was stored, also after a remount. A
/// refused write that ended within the file changes nothing.
#[test]
fn a_refused_cached_write_grows_the_file_with_zeros() {
    let config = Config {
        compression: "off",
        offload: "off",
        recordsize: 128 << 10,
    };
    let mut fs = Fs::new(&config);
    fs.create(0, 0).unwrap();
    let kept = common::noise(5, 50_000);
    fs.write(0, 0, &kept).unwrap();
    fs.fsync(0).unwrap();
    fs.close();
    fs.dir.set_space_budget(Some(fs.dir.used_bytes()));
    fs.mount().expect("mount");
    let refusal = fs.write(0, 20_000, &[1; 100_000]).unwrap_err();
    assert!(refusal.contains("errno 28"), "{refusal}");
    let ino = fs.ino_of(0).unwrap();
    fs.vfs().grow_for_refused_write(ino, 120_000).unwrap();
    fs.vfs().grow_for_refused_write(ino, 30_000).unwrap();
    let mut expected = kept.clone();
    expected.resize(120_000, 0);
    assert_eq!(fs.size(0).unwrap(), 120_000);
    assert!(fs.read(0, 0, 200_000).unwrap() == expected);
    fs.sync_all().unwrap();
    fs.close();
    fs.dir.set_space_budget(None);
    fs.mount().expect("mount");
    assert_eq!(fs.size(0).unwrap(), 120_000);
    assert!(fs.read(0, 0, 200_000).unwrap() == expected);
}
