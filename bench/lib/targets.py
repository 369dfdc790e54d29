"""The file systems under test. Each target sets itself up on image files under the work
directory (ext4 and btrfs on loop devices, zfs-fuse on a file vdev, Presso on a pool directory on an
ext4 loop image), registers every resource it creates with the Registry before using it, and
offers the same operations to the workloads:

    setup()                 make and mount; .mnt is the mount point
    cold_cycle()            flush, unmount everything, drop the page cache, mount again
    make_dir(name)          a directory for one workload (a dataset of its own on zfs-fuse)
    remove_dir(name)
    usage_begin(path) / usage_end(path, token)
                            the file system's own accounting of what PATH stores: {"logical",
                            "stored", "ratio", "source"}; call usage_end after cold_cycle()
    commands                the exact commands it ran to set itself up (for the report)
    teardown()              undo everything it registered
"""
import os
import re
import shutil
import subprocess
import time

import parsers
import sysutil

MKFS_EXT4 = ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]


class TargetError(RuntimeError):
    pass


class Target:
    fs = "?"
    anchor = True
    # True when usage can only be read for the whole file system (then usage_between is used).
    pool_accounting = False

    def __init__(self, name, setting, ctx):
        self.name, self.setting, self.ctx = name, setting, ctx
        self.dir = os.path.join(ctx.work, "targets", safe_name(name))
        self.mnt = os.path.join(self.dir, "mnt")
        self.commands = []

    # helpers -------------------------------------------------------------------------------
    def sh(self, cmd, record=True, **kw):
        if record:
            self.commands.append(" ".join("presso" if c == self.ctx.presso else _rel(str(c), self.ctx.work)
                                          for c in cmd))
        return sysutil.run(cmd, **kw)

    def add(self, kind, **fields):
        return self.ctx.registry.add(kind, group=self.name, **fields)

    def _fresh_dir(self):
        if os.path.exists(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.mnt)

    def _image(self, fname):
        img = os.path.join(self.dir, fname)
        with open(img, "wb") as f:
            f.truncate(self.ctx.image_bytes)  # sparse
        self.commands.append(f"truncate -s {self.ctx.image_bytes} {fname}")
        return img

    def _loop(self, img):
        # Direct I/O: the loop device reads and writes the image like a disk, without a second
        # page cache (and a second copy of every byte) on the host file system below it.
        dev = self.sh(["losetup", "--direct-io=on", "--find", "--show", img], record=False).stdout.strip()
        self.add("loop", dev=dev, image=img)
        self.commands.append(f"losetup --direct-io=on --find --show {os.path.basename(img)}  # -> LOOP")
        return dev

    def _mount(self, dev, path, opts=None, record=True):
        cmd = ["mount"] + (["-o", opts] if opts else []) + [dev, path]
        self.sh(cmd, record=False)
        if record:
            self.add("mount", path=path)
            self.commands.append(" ".join(["mount"] + (["-o", opts] if opts else []) + ["LOOP", _rel(path, self.ctx.work)]))

    def _umount(self, path):
        for _ in range(10):
            if sysutil.run(["umount", path], check=False).returncode == 0:
                return
            time.sleep(0.5)
        raise TargetError(f"cannot unmount {path} (busy)")

    def _backing_disk(self):
        """A fresh ext4 loop disk mounted at self.backing, for a FUSE file system's files."""
        self._fresh_dir()
        self.backing = os.path.join(self.dir, "backing")
        os.makedirs(self.backing)
        self.img = self._image("disk.img")
        self.dev = self._loop(self.img)
        self.sh(MKFS_EXT4 + [self.dev], record=False)
        self.commands.append(" ".join(MKFS_EXT4 + ["LOOP"]))
        self._mount(self.dev, self.backing)

    def make_dir(self, name):
        p = os.path.join(self.mnt, name)
        os.makedirs(p, exist_ok=True)
        return p

    def remove_dir(self, name):
        shutil.rmtree(os.path.join(self.mnt, name), ignore_errors=True)

    def usage_begin(self, path):
        return None

    def usage_end(self, path, token):
        return usage_from_blocks(path)

    def barrier(self, path):
        """Called at the end of every timed write phase, after fsync: returns once the data under
        PATH is compressed and written. fsync is that barrier on ext4, btrfs and Presso."""

    def teardown(self):
        return self.ctx.registry.teardown(group=self.name)


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _rel(s, work):
    return s.replace(work.rstrip("/") + "/", "") if work else s


def usage_from_blocks(path):
    """Apparent size against allocated blocks (st_blocks): the accounting of a file system
    without compression."""
    logical = stored = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(root, f))
            logical += st.st_size
            stored += st.st_blocks * 512
    return {"logical": logical, "stored": stored,
            "ratio": logical / stored if stored else None, "source": "st_blocks"}


def apparent_size(path):
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_size
    return total


class Ext4(Target):
    fs = "ext4"

    def setup(self):
        self._fresh_dir()
        self.img = self._image("disk.img")
        self.dev = self._loop(self.img)
        self.sh(MKFS_EXT4 + [self.dev], record=False)
        self.commands.append(" ".join(MKFS_EXT4 + ["LOOP"]))
        self._mount(self.dev, self.mnt)

    def cold_cycle(self):
        self._umount(self.mnt)
        sysutil.drop_caches()
        self._mount(self.dev, self.mnt, record=False)


class Btrfs(Target):
    fs = "btrfs"

    def __init__(self, name, setting, ctx, algo):
        super().__init__(name, setting, ctx)
        self.opts = f"compress-force={algo}"

    def setup(self):
        self._fresh_dir()
        self.img = self._image("disk.img")
        self.dev = self._loop(self.img)
        self.sh(["mkfs.btrfs", "-q", "-f", self.dev], record=False)
        self.commands.append("mkfs.btrfs -q -f LOOP")
        self._mount(self.dev, self.mnt, self.opts)

    def cold_cycle(self):
        self._umount(self.mnt)
        sysutil.drop_caches()
        self._mount(self.dev, self.mnt, self.opts, record=False)

    def usage_end(self, path, token):
        c = parsers.parse_compsize(sysutil.run(["compsize", "-b", path]).stdout)
        return {"logical": c["uncompressed"], "stored": c["disk"], "ratio": c["ratio"],
                "source": "compsize"}


class ZfsFuse(Target):
    fs = "zfs-fuse"

    def __init__(self, name, setting, ctx, compression):
        super().__init__(name, setting, ctx)
        self.compression = compression
        self.pool = "pbench-" + safe_name(name).replace(".", "-").replace("_", "-")

    def setup(self):
        self._fresh_dir()
        self.ctx.ensure_zfs_daemon()
        self.vdev = self._image("vdev.img")
        # A pool of ours left by a killed run would block the name: the journal teardown handles
        # that before we get here.
        self.sh(["zpool", "create", "-f", "-m", self.mnt, self.pool, self.vdev], timeout=120)
        self.add("zpool", name=self.pool)
        self.sh(["zfs", "set", f"compression={self.compression}", self.pool])
        got = parsers.parse_zfs_get(self.sh(["zfs", "get", "-Hp", "compression", self.pool],
                                            record=False).stdout)["compression"]
        want = "gzip" if self.compression == "gzip-6" else self.compression
        if got not in (self.compression, want):
            raise TargetError(f"compression is {got}, wanted {self.compression}")
        if not sysutil.is_mounted(self.mnt):
            raise TargetError(f"pool {self.pool} is not mounted at {self.mnt}")

    def cold_cycle(self):
        # Export writes everything out and drops the pool's ARC; import mounts it again.
        self.sh(["zpool", "export", self.pool], record=False, timeout=300)
        sysutil.drop_caches()
        self.sh(["zpool", "import", "-d", os.path.dirname(self.vdev), self.pool], record=False,
                timeout=300)
        for _ in range(50):
            if sysutil.is_mounted(self.mnt):
                return
            time.sleep(0.2)
        raise TargetError("pool did not mount after import")

    def barrier(self, path):
        # zfs-fuse answers fsync from its intent log and compresses in the transaction group sync
        # later (after the timed phase, unless forced). A snapshot waits for that sync.
        self._snap = getattr(self, "_snap", 0) + 1
        snap = f"{self.pool}/{os.path.relpath(path, self.mnt)}@barrier{self._snap}"
        self.sh(["zfs", "snapshot", snap], record=False, timeout=1800)
        self.sh(["zfs", "destroy", snap], record=False, timeout=600)

    def make_dir(self, name):
        # A dataset of the same name left by an earlier repetition would refuse the create.
        self.remove_dir(name)
        self.sh(["zfs", "create", f"{self.pool}/{name}"], record=False)
        p = os.path.join(self.mnt, name)
        for _ in range(50):
            if sysutil.is_mounted(p):
                return p
            time.sleep(0.2)
        raise TargetError(f"dataset {self.pool}/{name} did not mount")

    def remove_dir(self, name, attempts=20):
        # Right after an export/import or a workload's last close, zfs-fuse may still call the
        # dataset busy; it lets go within a second or two, so retry before giving up loudly (a
        # dataset left behind makes the next repetition's create fail).
        ds = f"{self.pool}/{name}"
        for attempt in range(attempts):
            if self.sh(["zfs", "list", "-H", "-o", "name", ds], record=False, check=False).returncode != 0:
                return
            r = self.sh(["zfs", "destroy", "-r", ds], record=False, check=False, timeout=300)
            if r.returncode == 0:
                return
            if attempt + 1 < attempts:
                time.sleep(0.5)
        raise TargetError(f"cannot destroy {ds}: {r.stderr.strip()}")

    def usage_end(self, path, token):
        ds = f"{self.pool}/{os.path.relpath(path, self.mnt)}"
        p = parsers.parse_zfs_get(self.sh(["zfs", "get", "-Hp", "compressratio,used,referenced", ds],
                                          record=False).stdout)
        stored = p["referenced"]
        return {"logical": apparent_size(path), "stored": stored, "ratio": p["compressratio"],
                "source": "zfs compressratio"}


class FuseFloor(Target):
    """The least a FUSE file system costs here: Presso's mount options and INIT capabilities, names
    in memory, each file's bytes in a plain file of its own on an ext4 disk, nothing else
    (crates/presso-fs/examples/fuse_floor/). Presso ÷ this is Presso's own cost; this ÷ ext4 is
    the kernel's FUSE."""
    fs = "fuse-floor"

    def setup(self):
        if not self.ctx.floor or not os.access(self.ctx.floor, os.X_OK):
            raise TargetError(f"no fuse_floor binary at {self.ctx.floor} (it is looked for beside --presso, in "
                              "examples/; cargo build --release -p presso-fs --example fuse_floor builds it there)")
        self._backing_disk()
        # Registered first: a mount that half-succeeded must still be undone. Unmounting ends
        # the daemon.
        self.add("fuse_mount", path=self.mnt, unmount_cmd=["umount", self.mnt])
        data = os.path.join(self.backing, "data")
        self.commands.append(f"fuse_floor {_rel(data, self.ctx.work)} {_rel(self.mnt, self.ctx.work)} &")
        self.daemon = subprocess.Popen([self.ctx.floor, data, self.mnt], stdout=subprocess.PIPE)
        # The daemon prints one line once the mount is in place (or exits with an error).
        if self.daemon.stdout.readline().strip() != b"mounted":
            raise TargetError(f"fuse_floor did not mount (exit status {self.daemon.wait()})")

    def cold_cycle(self):
        # The floor's names live in its memory, so it is not remounted: dropping the caches
        # makes the kernel forget the mount's pages, names and attributes, and the backing disk's.
        sysutil.drop_caches()


class Presso(Target):
    fs = "presso"
    anchor = False
    pool_accounting = True

    def __init__(self, name, setting, ctx, options):
        super().__init__(name, setting, ctx)
        self.options = options  # ["compression=gzip-6", "offload=off", ...]

    @property
    def presso(self):
        return self.ctx.presso

    def setup(self):
        if not self.presso or not os.access(self.presso, os.X_OK):
            raise TargetError("no presso binary (build it: cargo build --release -p presso-cli)")
        self._backing_disk()
        self.pool_dir = os.path.join(self.backing, "pool")
        opts = [x for o in self.options for x in ("-o", o)]
        self.sh([self.presso, "create", self.pool_dir] + opts, timeout=120)
        self._presso_mount(register=True)

    def _presso_mount(self, register=False):
        if register:
            # Registered first: a mount that half-succeeded must still be undone.
            self.add("fuse_mount", path=self.mnt, unmount_cmd=[self.presso, "unmount", self.mnt])
        self.sh([self.presso, "mount", self.pool_dir, self.mnt], record=register, timeout=120)
        if not sysutil.is_mounted(self.mnt):
            raise TargetError("presso mount returned but nothing is mounted")

    def cold_cycle(self):
        self.sh([self.presso, "unmount", self.mnt], record=False, timeout=600)
        if sysutil.is_mounted(self.mnt):
            raise TargetError("still mounted after presso unmount")
        self._umount(self.backing)
        sysutil.drop_caches()
        self._mount(self.dev, self.backing, record=False)
        self._presso_mount()

    def status(self):
        return parsers.parse_presso_status(
            self.sh([self.presso, "status", self.mnt, "--json"], record=False, timeout=120).stdout)

    def usage_begin(self, path):
        return self.status()

    def usage_end(self, path, token):
        return self.usage_between(token, self.status())

    @staticmethod
    def usage_between(a, b):
        logical = b["logical_bytes"] - a["logical_bytes"]
        stored = b["stored_bytes"] - a["stored_bytes"]
        return {"logical": logical, "stored": stored,
                "ratio": logical / stored if stored > 0 else None, "source": "presso status (delta)"}


# --- the target list ---------------------------------------------------------------------------
def all_targets(ctx):
    """Every target, anchors first, in the order they run."""
    t = [Ext4("ext4", "no compression", ctx), FuseFloor("fuse-floor", "no compression", ctx)]
    for algo in ("zlib:3", "zstd:1", "zstd:3", "lzo"):
        t.append(Btrfs(f"btrfs-{algo}", f"compress-force={algo}", ctx, algo))
    for comp in ("off", "lzjb", "gzip-1", "gzip-6", "zle"):
        t.append(ZfsFuse(f"zfs-{comp}", f"compression={comp}", ctx, comp))
    for name, opts in (
        ("presso-off", ["compression=off"]),
        ("presso-lz4", ["compression=lz4"]),
        ("presso-gzip-6", ["compression=gzip-6", "offload=off"]),
        ("presso-gzip-6-isal", ["compression=gzip-6", "offload=on"]),
        ("presso-zstd-3", ["compression=zstd-3"]),
    ) + tuple(ctx.extra_presso):
        t.append(Presso(name, " ".join(opts), ctx, list(opts)))
    return t
