"""Shared by the harness's tests: puts bench/lib on the import path and says what the machine
allows (the teardown tests need root, losetup and mkfs.ext4)."""
import os
import shutil
import sys

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
if LIB not in sys.path:
    sys.path.insert(0, LIB)
BENCH = os.path.dirname(LIB)
REPO = os.path.dirname(BENCH)


def can_mount():
    """Root, the tools, and a loop device that can actually be attached."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("losetup", "mkfs.ext4", "mount", "umount")):
        return False
    return os.path.exists("/dev/loop-control")


class FakeTarget:
    """Enough of a Target for metrics.make_row."""

    def __init__(self, name, fs="ext4", setting="s"):
        self.name, self.fs, self.setting = name, fs, setting
