"""Files the project writes for others to read (pid file, broker config, fault manifest, maintenance
log): written whole or not at all, so a crash or a full disk mid-write never leaves a reader an empty
or half-written file, and never destroys the previous content.

The new content goes to a temporary file next to the target (same folder, so the same file
system), is flushed to disk, then renamed over the target: ``os.replace`` is atomic on POSIX.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from filelock import FileLock


def write_atomically(path: str | os.PathLike, content: str | bytes) -> None:
    """Replace the file at ``path`` with ``content``: readers see the old content or the new."""
    path = Path(path)
    data = content.encode() if isinstance(content, str) else content
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # 0o666 less the umask, as open() would make the file (a NamedTemporaryFile would be 0600).
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def append_atomically(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` to a text file by writing the whole new file atomically.

    A plain append that fails half-way (disk full, a kill) leaves a torn last line; this leaves
    the old file. Concurrent appenders take turns on a lock file next to it, so none loses
    another's lines (the cost, a rewrite of the file per append, suits small logs).
    """
    path = Path(path)
    with FileLock(path.with_name(f".{path.name}.lock")):
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        write_atomically(path, old + text.encode())
