"""zfs-fuse dataset lifecycle across repetitions: a dataset the daemon still calls busy is
destroyed on a later attempt, one left by an earlier repetition is removed before the create, and
one that never goes is a clear error instead of a silent leftover. `zfs` is scripted here; the
full run exercises the real one."""
import subprocess
import types
import unittest
from unittest import mock

import helpers  # noqa: F401  (puts bench/lib on the path)
import targets


class ScriptedZfs:
    """Answers `zfs list/destroy/create` from a set of datasets; `busy` destroys fail first."""

    def __init__(self, datasets=(), busy=0):
        self.datasets, self.busy, self.calls = set(datasets), busy, []

    def __call__(self, cmd, record=True, check=True, **_kw):
        self.calls.append(cmd[:2])
        verb, ds = cmd[1], cmd[-1]
        rc, err = 0, ""
        if verb == "list":
            rc = 0 if ds in self.datasets else 1
        elif verb == "destroy":
            if self.busy:
                self.busy -= 1
                rc, err = 1, f"cannot destroy '{ds}': dataset is busy"
            else:
                self.datasets.discard(ds)
        elif verb == "create":
            if ds in self.datasets:
                rc, err = 1, f"cannot create '{ds}': dataset already exists"
            else:
                self.datasets.add(ds)
        if check and rc:
            raise RuntimeError(err)
        return subprocess.CompletedProcess(cmd, rc, "", err)


def zfs_target(zfs):
    ctx = types.SimpleNamespace(work="/nonexistent", presso="presso")
    t = targets.ZfsFuse("zfs-gzip-6", "compression=gzip-6", ctx, "gzip-6")
    t.sh = zfs
    return t


@mock.patch.object(targets.time, "sleep", lambda _s: None)
@mock.patch.object(targets.sysutil, "is_mounted", lambda _p: True)
class ZfsDatasetTest(unittest.TestCase):
    def test_busy_dataset_is_destroyed_on_a_later_attempt(self):
        t = zfs_target(ScriptedZfs({"pbench-zfs-gzip-6/fio"}, busy=3))
        t.remove_dir("fio")
        self.assertEqual(t.sh.datasets, set())
        self.assertEqual([c[1] for c in t.sh.calls].count("destroy"), 4)

    def test_every_repetition_gets_a_fresh_dataset(self):
        zfs = ScriptedZfs(busy=1)
        t = zfs_target(zfs)
        for _rep in range(3):
            t.make_dir("fio")
            # the first repetition's destroy fails once, as zfs-fuse does after an import
            zfs.calls.append(("rep-end",))
            try:
                t.remove_dir("fio", attempts=1)
            except targets.TargetError:
                pass
        self.assertEqual(zfs.datasets, set(), "the leftover went before the next create")
        self.assertEqual([c[1] for c in zfs.calls if len(c) > 1].count("create"), 3)

    def test_a_dataset_that_never_goes_is_an_error(self):
        t = zfs_target(ScriptedZfs({"pbench-zfs-gzip-6/files-text"}, busy=100))
        with self.assertRaisesRegex(targets.TargetError, "dataset is busy"):
            t.remove_dir("files-text", attempts=3)
        self.assertEqual(t.sh.datasets, {"pbench-zfs-gzip-6/files-text"})

    def test_a_missing_dataset_is_not_an_error(self):
        t = zfs_target(ScriptedZfs())
        t.remove_dir("genomics")
        self.assertEqual([c[1] for c in t.sh.calls], ["list"])


if __name__ == "__main__":
    unittest.main()
