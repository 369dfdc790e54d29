//! Free space, in process: a write is refused once the disk's free space, less the buffers not
//! yet stored, would fall under `min_free`, whatever the size of the writes (the file layer
//! looks at the free space again when the writes since its last look could have used half the
//! room it saw, or a tenth of a second later).

mod sim;

use presso_fs::vfs::VfsConfig;
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
