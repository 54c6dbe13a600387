"""Durable, atomic part files and folder swaps: the file-system half of the run store.

A part is an immutable parquet file. It is written under a temporary name that
no reader glob matches (`.<pid>-<hex>.tmp`), flushed and fsynced, then renamed
into place with os.replace and the folder fsynced: once `write_part` returns,
the part survives a SIGKILL (and a power cut), and a reader sees all of it or
none of it.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

TEMP_SUFFIX = ".tmp"
# Small enough that DuckDB scans a compacted run on several threads, large enough to keep metadata small.
ROW_GROUP_SIZE = 128 * 1024
# A temp file of a live process this old is abandoned (a hung writer); younger ones may still be renamed.
STALE_TEMP_AGE_S = 24 * 3600


def partition_folder_name(column: str, value: str) -> str:
    """`run_id=<percent-encoded id>`: a Hive-style folder, so DuckDB skips other runs' files unopened.

    A leading '_' is encoded too, which keeps `<column>=_seed` free for the seed part.
    """
    encoded = quote(str(value), safe="-_.")
    if encoded[:1] == "_":
        encoded = "%5F" + encoded[1:]
    return f"{column}={encoded}"


def new_part_name() -> str:
    """Names sort by creation time, so a folder listing is in append order."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"


def _temp_name() -> str:
    return f".{os.getpid()}-{uuid.uuid4().hex}{TEMP_SUFFIX}"


def fsync_folder(folder: Path) -> None:
    """Make a rename or create inside `folder` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_part(folder: Path, data: pa.Table, name: str | None = None, compression: str = "snappy") -> Path:
    """Write `data` as one parquet file in `folder`, durably and atomically; return its path.

    Snappy suits appends (a third of zstd's fixed cost on a 64-row step); compaction asks for zstd.
    """
    final = folder / (name or new_part_name())
    temp = folder / _temp_name()
    try:
        with open(temp, "wb") as handle:
            pq.write_table(data, handle, compression=compression, row_group_size=ROW_GROUP_SIZE)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_folder(folder)
    return final


def list_parts(folder: Path) -> list[Path]:
    """Finished part files in a folder, oldest first (temp files never end in .parquet)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".parquet") and not n.startswith("."))
    except FileNotFoundError:
        return []
    return [folder / n for n in names]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(path: Path, now: float | None = None) -> bool:
    """A temp file or folder is stale when the process that made it is gone (or it is a day old)."""
    stem = path.name.lstrip(".").split("-", 1)[0]
    try:
        age = (now or time.time()) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if not stem.isdigit():
        return age > STALE_TEMP_AGE_S
    return not _pid_alive(int(stem)) or age > STALE_TEMP_AGE_S


def remove_stale_temps(folders: list[Path]) -> int:
    """Delete temp files and folders left by killed writers; return how many went."""
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if not entry.name.endswith(TEMP_SUFFIX) or not is_stale(path):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def new_temp_folder(parent: Path) -> Path:
    folder = parent / _temp_name()
    folder.mkdir(parents=True)
    return folder


_RENAME_EXCHANGE = 2


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Linux renameat2(RENAME_EXCHANGE): swap two paths in one atomic step. False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))


def swap_folders(a: Path, b: Path) -> bool:
    """Exchange two folders' contents; True when the swap was atomic.

    Without renameat2 (not Linux, or a file system without it) this falls back
    to two renames, and for a moment neither version is at `b`.
    """
    if _renameat2_exchange(a, b):
        return True
    parked = a.with_name(_temp_name())  # beside `a`, never inside a folder that readers glob
    os.rename(b, parked)
    os.rename(a, b)
    os.rename(parked, a)
    return False
