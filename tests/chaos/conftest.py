"""Fixtures of the chaos suite: a lakehouse per scenario, its checkpoints on a disk of their own."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.chaos.harness import Lake
from tests.integration.own_lakehouse import own_lakehouse


class CheckpointDisk:
    """The folder the streaming checkpoints live in, on a small disk of its own that the test
    can fill up (disk full) or make read-only, and then repair.

    A tmpfs mount needs root with mount rights (the development machine and CI have them);
    without them the disk cannot be filled, and "unwritable" falls back to file permissions,
    which only bind a non-root user.
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

    @property
    def can_fill(self) -> bool:
        return self.mounted

    @property
    def can_make_read_only(self) -> bool:
        return self.mounted or os.geteuid() != 0

    def fill(self) -> int:
        """Write until the disk is full; the bytes written."""
        written, chunk = 0, b"\0" * (1 << 20)
        with open(self.filler, "ab", buffering=0) as out:
            try:
                while True:
                    written += out.write(chunk)
            except OSError:
                pass
            # the last partial megabyte, so not even a small file fits
            try:
                while True:
                    written += out.write(b"\0" * 4096)
            except OSError:
                pass
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def read_only(self) -> None:
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True)
        else:
            for folder in [self.path, *[p for p in self.path.rglob("*") if p.is_dir()]]:
                folder.chmod(0o555)

    def writable(self) -> None:
        if self.mounted:
            subprocess.run(["mount", "-o", "remount,rw", str(self.path)], check=True)
        else:
            for folder in [self.path, *[p for p in self.path.rglob("*") if p.is_dir()]]:
                folder.chmod(0o755)

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
