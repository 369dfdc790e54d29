//! A small ext4 image loop-mounted for one test ([`LoopMount`]): the space tests fill it, the
//! conformance tests use it as the reference file system.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

use super::mount::is_mounted;
use super::process::{cmd, exec, tool, wait_until};

/// An ext4 image loop-mounted for one test; unmounted and its loop device detached on drop.
pub struct LoopMount {
    /// The image file.
    pub image: PathBuf,
    /// Where the image is mounted.
    pub dir: PathBuf,
}

impl LoopMount {
    /// A fresh `megabytes` MB ext4 image at `image` (no reserved blocks), mounted at `dir`.
    pub fn new(image: PathBuf, dir: PathBuf, megabytes: u64) -> LoopMount {
        LoopMount::with_options(image, dir, megabytes, &[], &[])
    }

    /// [`LoopMount::new`] with arguments added to `mkfs.ext4` and mount options to `loop`.
    pub fn with_options(
        image: PathBuf,
        dir: PathBuf,
        megabytes: u64,
        mkfs: &[&str],
        options: &[&str],
    ) -> LoopMount {
        File::create(&image)
            .unwrap()
            .set_len(megabytes << 20)
            .unwrap();
        let mut mkfs_cmd = cmd("mkfs.ext4", ["-q", "-F", "-m", "0"]);
        mkfs_cmd.args(mkfs).arg(&image);
        exec(&mut mkfs_cmd).ok();
        std::fs::create_dir_all(&dir).unwrap();
        let guard = LoopMount { image, dir };
        let mut all = vec!["loop"];
        all.extend_from_slice(options);
        tool("mount", &[&"-o", &all.join(","), &guard.image, &guard.dir]).ok();
        guard
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(program)
                .args(args)
                .stdin(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // A program another test starts holds a copy of this process's descriptors, files on
        // this disk among them, until its exec; a daemon killed by a test ends on its own time.
        let unmounted = wait_until(Duration::from_secs(10), || {
            !is_mounted(&self.dir) || run("umount", &[self.dir.as_os_str()])
        });
        if !unmounted {
            run("umount", &["-l".as_ref(), self.dir.as_os_str()]);
        }
        // `mount -o loop` detaches on unmount; detach explicitly if that did not happen.
        if let Ok(out) = std::process::Command::new("losetup")
            .arg("-j")
            .arg(&self.image)
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some((dev, _)) = line.split_once(':') {
                    run("losetup", &["-d".as_ref(), dev.as_ref()]);
                }
            }
        }
    }
}
