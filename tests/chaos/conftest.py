"""Fixtures of the chaos suite: a lakehouse per scenario, its checkpoints on a disk of their own."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.chaos.harness import Lake
from tests.integration.own_lakehouse import own_lakehouse


class CheckpointDisk:
    """The folder the streaming checkpoints live in, on a small disk of its own that the test
    can fill up (disk full) or make read-only, and then repair.

    A tmpfs mount needs root with mount rights (the development machine and CI have them); a
    non-root user gets "unwritable" through file permissions instead (which do not bind root).
    """

    SIZE_MB = 256

    def __init__(self, path: Path):
        self.path = path
        self.mounted = False
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.SIZE_MB}m", "tmpfs", str(path)],
                                    capture_output=True, text=True)
            self.mounted = result.returncode == 0
        self.filler = path / "filler"

    def faults(self) -> list[tuple[str, object, object, str]]:
        """The ways this machine can break the disk: (name, break it, repair it, the OS error)."""
        if self.mounted:
            return [("full", self.fill, self.free, "No space left on device"),
                    ("read-only", lambda: self._remount("ro"), lambda: self._remount("rw"), "Read-only file system")]
        if os.geteuid() != 0:
            return [("unwritable", lambda: self._chmod(0o555), lambda: self._chmod(0o755), "Permission denied")]
        raise AssertionError("cannot break the checkpoint disk here: root without mount rights "
                             "(a tmpfs mount is needed), and file permissions do not bind root")

    def fill(self) -> int:
        """Write until the disk is full; the bytes written."""
        written = 0
        with open(self.filler, "ab", buffering=0) as out:
            # megabytes, then the last blocks, so not even a small file fits
            for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
                try:
                    while True:
                        written += out.write(chunk)
                except OSError:
                    pass
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def _remount(self, mode: str) -> None:
        # A read-only remount is refused ("busy") while a file on the disk is open for writing,
        # as Spark's checkpoint files are for a moment each batch: try again until it fits.
        deadline = time.monotonic() + 60
        while (result := subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)],
                                        capture_output=True, text=True)).returncode != 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"cannot remount {self.path} {mode}: {result.stderr.strip()}")
            time.sleep(0.05)

    def _chmod(self, mode: int) -> None:
        for folder in [self.path, *[p for p in self.path.rglob("*") if p.is_dir()]]:
            folder.chmod(mode)

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@contextmanager
def chaos_lake(spark, settings, tmp_path_factory, name: str):
    with own_lakehouse(spark, settings, tmp_path_factory, name) as (own, session, target):
        disk = CheckpointDisk(own.checkpoint_root)
        logs = tmp_path_factory.mktemp(f"{name}-logs")
        try:
            yield Lake(own, session, target, logs, disk)
        finally:
            disk.close()


@pytest.fixture
def lake(spark, settings, tmp_path_factory, request):
    """A fresh lakehouse for one scenario (its own broker, catalog, checkpoints)."""
    with chaos_lake(spark, settings, tmp_path_factory, request.node.name[:40].replace("[", "-").rstrip("]")) as lake:
        yield lake
