//! Shared pools on the real servers the tests start (PostgreSQL, and SeaweedFS for S3): a pool
//! made for one test ([`SharedPool`]) and its mounted clients ([`Client`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::*;
use presso_meta::postgres::test_server::TestServer as Postgres;
use presso_objects::test_server::{TestServer as S3, ACCESS_KEY, SECRET_KEY};

/// Longest a command of these tests may take: a client keeps retrying a failing server for its
/// server timeout before it says what failed, and a failing test should show that.
const COMMAND_LIMIT: Duration =
    Duration::from_secs(presso_fs::pool::DEFAULT_SERVER_TIMEOUT.as_secs() + 60);

/// Runs `cmd` as [`super::exec`] does, within [`COMMAND_LIMIT`]; when it hangs, the failure
/// shows the object store's last log lines too.
pub fn exec_logging_the_store(cmd: impl std::borrow::BorrowMut<Command>) -> Output {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        exec_within(cmd, COMMAND_LIMIT)
    }))
    .unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "{message}\nthe object store's last log lines:\n{}",
            S3::shared().log_tail()
        )
    })
}

/// `presso` with the object store's credentials in its environment, as users give them.
pub fn presso_s3() -> Command {
    let mut c = presso();
    c.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
    c
}

/// A shared pool made for one test, and the scratch directory its clients live in.
pub struct SharedPool {
    /// The metadata server's URL, with the pool's schema.
    pub meta_url: String,
    /// The object store's URL, with the pool's prefix.
    pub data: String,
    /// The scratch directory its clients live in.
    pub dir: tempfile::TempDir,
}

impl SharedPool {
    /// A new shared pool on the servers the tests share, `props` given to `presso create`.
    pub fn create(tag: &str, props: &[&str]) -> SharedPool {
        Self::create_through(tag, props, &S3::shared().endpoint())
    }

    /// [`SharedPool::create`] with the object store reached at `endpoint` (a proxy of it).
    pub fn create_through(tag: &str, props: &[&str], endpoint: &str) -> SharedPool {
        require_fuse();
        let meta_url = Postgres::shared().url(&Postgres::fresh_schema(tag));
        let data = format!("{}?endpoint={endpoint}", S3::fresh_url(tag));
        let dir = scratch_dir(tag);
        let mut c = presso_s3();
        c.args(["create", "--meta", &meta_url, "--data", &data]);
        for p in props {
            c.args(["-o", p]);
        }
        let out = exec_logging_the_store(&mut c).ok();
        assert!(out.contains("created shared pool"), "{out}");
        SharedPool {
            meta_url,
            data,
            dir,
        }
    }

    /// The cache directory the clients of this machine share.
    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// `presso mount URL MNT -o cache_dir=…` of a new client at `name` in the scratch dir.
    pub fn mount(&self, name: &str) -> Client {
        self.mount_with(name, &[])
    }

    /// The mount options every client of the pool gets, and `more`.
    pub fn options(&self, more: &[&str]) -> String {
        let mut all = vec![format!("cache_dir={}", self.cache().display())];
        all.extend(more.iter().map(|s| s.to_string()));
        all.join(",")
    }

    /// [`SharedPool::mount`] with more mount options.
    pub fn mount_with(&self, name: &str, options: &[&str]) -> Client {
        let mnt = self.dir.path().join(name);
        std::fs::create_dir_all(&mnt).unwrap();
        let out = exec_logging_the_store(
            presso_s3()
                .args(["mount", &self.meta_url])
                .arg(&mnt)
                .args(["-o", &self.options(options)]),
        );
        let client = Client { mnt, mounted: true };
        out.ok();
        assert!(
            is_mounted(&client.mnt),
            "nothing mounted at {}",
            client.mnt.display()
        );
        client
    }
}

/// One mounted client; unmounted on drop, also when the test panics.
pub struct Client {
    /// The mount point.
    pub mnt: PathBuf,
    /// Whether it is mounted (for the drop guard).
    pub mounted: bool,
}

impl Client {
    /// A path inside the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `presso unmount`; asserts it committed to the shared pool.
    pub fn unmount(&mut self) {
        let out = exec_logging_the_store(presso().arg("unmount").arg(&self.mnt)).ok();
        assert!(
            out.contains("is in the shared pool at postgres://"),
            "{out}"
        );
        self.mounted = false;
        assert!(!is_mounted(&self.mnt));
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.mounted || is_mounted(&self.mnt) {
            force_unmount(&self.mnt);
        }
    }
}
