"""Ingest dumps that arrive as uploads (the web service): single dumps or tar archives.

Each upload gets a private folder, ``LAKE/.uploads/<id>/``. Its parts are
copied there and archives are unpacked there member by member, in blocks, so
memory stays bounded whatever the upload unpacks to; the worker processes then
read the files from disk. The folder is removed when the upload ends, however
it ends.

An upload is checked whole before anything reaches the lake: an archive member
that would escape its folder (absolute path, ``..``), a link, a device or other
special file, too many members, a member or a whole upload over its cap
(counted in bytes actually unpacked, not in declared sizes) refuse the whole
upload (:class:`UploadRefused`), and then nothing is written to the lake.

A :class:`DiskBudget` bounds the unpacked bytes all uploads of a process hold
on disk at once; an upload that would go over it is refused
(:class:`UploadOverBudget`) and can be sent again later.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from frlake.errors import FrlakeError
from frlake.ingest.identity import IdentityOptions, IdentityResolver
from frlake.ingest.sources import ARCHIVE_SEP, Source, member_mtime_ok

UPLOADS_DIR = ".uploads"  # under the lake root: the same filesystem, and never cleared by an ingest
_MAX_NAME = 255  # an uploaded file's name
_MAX_MEMBER_NAME = 4096
_MAX_HEADER_BYTES = 1 << 20  # a pax or GNU long-name header; tarfile reads these into memory


class UploadRefused(FrlakeError):
    """The upload as a whole is unsafe or too large; nothing was written."""


class UploadOverBudget(FrlakeError):
    """Other uploads hold the unpacking budget; this one may be sent again later."""


@dataclass(frozen=True)
class UploadLimits:
    max_members: int = 100_000
    max_unpacked_bytes: int = 8 << 30  # one upload, unpacked
    max_member_bytes: int = 2 << 30
    budget_bytes: int = 16 << 30  # all uploads of the process on disk at once (see DiskBudget)
    block_bytes: int = 1 << 20  # what is read and written at a time


class DiskBudget:
    """Bytes of unpacked uploads on disk at once, across the concurrent uploads
    of one process (the server holds one). Thread-safe."""

    def __init__(self, limit: int):
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n


class _TarInfo(tarfile.TarInfo):
    """Refuses a pax or GNU long-name header over a MiB before tarfile reads
    it into memory (a gzip-compressed header of zeros is a memory bomb)."""

    def _proc_member(self, tarfile_):
        long_header = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                       tarfile.SOLARIS_XHDTYPE)
        if self.type in long_header and self.size > _MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"a {self.size:,}-byte extended header, over the {_MAX_HEADER_BYTES:,}-byte limit")
        return super()._proc_member(tarfile_)


def _is_archive(name: str, head: bytes) -> bool:
    if name.lower().endswith((".tar", ".tar.gz", ".tgz")):
        return True
    if head[:2] == b"\x1f\x8b":
        return True
    return len(head) > 262 and head[257:262] == b"ustar"


def _safe_member_name(name: str) -> bool:
    path = PurePosixPath(name)
    return (bool(name) and len(name) <= _MAX_MEMBER_NAME and not path.is_absolute() and ".." not in path.parts
            and "\\" not in name and not any(ord(c) < 32 for c in name))


class Upload:
    """One upload: a private folder on the lake's filesystem, the files saved
    into it (:meth:`add`), then ingested (:meth:`ingest`). Use it as a context
    manager: leaving it removes the folder and gives the budget back.

    Catalog paths read ``upload:<id>/<file name>`` (and ``::member`` for archive
    members), so a layout template matches archive member paths as it would on disk.
    """

    def __init__(self, lake_root: Path, identity: IdentityOptions = IdentityOptions(),
                 limits: UploadLimits = UploadLimits(), budget: DiskBudget | None = None):
        IdentityResolver(identity)  # a bad layout is refused before a byte is saved
        self.limits = limits
        self.budget = budget if budget is not None else DiskBudget(limits.budget_bytes)
        self.id = uuid.uuid4().hex[:12]
        self.folder = Path(lake_root) / UPLOADS_DIR / self.id
        self.folder.mkdir(parents=True)
        self.sources: list[Source] = []
        self.unpacked = 0  # bytes saved, counted against max_unpacked_bytes
        self._held = 0  # bytes taken from the budget
        self._files = 0
        self._now_ns = time.time_ns()

    def __enter__(self) -> Upload:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.budget.give(self._held)
        self._held = 0

    # -- saving -----------------------------------------------------------
    def add(self, name: str, stream: BinaryIO) -> None:
        """Save one uploaded file: a dump as it is, an archive member by member."""
        base = PurePosixPath(name.replace("\\", "/")).name or "upload"
        if len(base) > _MAX_NAME or any(ord(c) < 32 for c in base):
            raise UploadRefused(f"the file name {base[:80]!r} is not usable (control characters, or over {_MAX_NAME} characters)")
        prefix = f"upload:{self.id}/{base}"
        head = stream.read(512)
        rest = _Prefixed(head, stream)
        if _is_archive(base, head):
            self._unpack(base, prefix, rest)
        else:
            path, size = self._save(rest, f"{base}: the file", self.limits.max_member_bytes)
            # an uploaded file carries no time of its own: the time it arrived is not when it was written
            self.sources.append(Source(prefix, size, self._now_ns, path=str(path), mtime_is_written=False))

    def _save(self, stream: BinaryIO, what: str, cap: int) -> tuple[Path, int]:
        """Copy a stream to a new file in the folder, in blocks, counting real bytes."""
        self._files += 1
        path = self.folder / f"{self._files:06d}"
        size = 0
        with open(path, "wb") as out:
            while block := stream.read(self.limits.block_bytes):
                size += len(block)
                if size > cap:
                    raise UploadRefused(f"{what} is over the limit of {cap:,} bytes")
                self._count(len(block))
                out.write(block)
        return path, size

    def _count(self, n: int) -> None:
        self.unpacked += n
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise UploadRefused(f"the upload unpacks to more than {self.limits.max_unpacked_bytes:,} bytes, over the limit")
        if not self.budget.take(n):
            raise UploadOverBudget(
                f"the server is unpacking other uploads and holds {self.budget.used:,} of its "
                f"{self.budget.limit:,}-byte budget; send this upload again when they are done")
        self._held += n

    def _unpack(self, name: str, prefix: str, stream: BinaryIO) -> None:
        limits = self.limits
        count = 0
        try:
            # stream mode ("r|*"): one pass, forward only, whatever the compression
            with tarfile.open(fileobj=stream, mode="r|*", tarinfo=_TarInfo) as tar:
                while (member := tar.next()) is not None:
                    tar.members.clear()  # stream mode keeps every header otherwise
                    count += 1
                    if count > limits.max_members:
                        raise UploadRefused(f"{name}: more than {limits.max_members:,} members")
                    if not _safe_member_name(member.name):
                        raise UploadRefused(f"{name}: member {member.name[:200]!r} would escape the upload folder")
                    if member.isdir():
                        continue
                    if not member.isfile():
                        kind = "link" if member.issym() or member.islnk() else "device or special file"
                        raise UploadRefused(f"{name}: member {member.name!r} is a {kind}")
                    if member.size > limits.max_member_bytes:  # early; the bytes are counted as they come too
                        raise UploadRefused(f"{name}: member {member.name!r} is {member.size:,} bytes, over the limit")
                    if PurePosixPath(member.name).name.startswith("."):
                        continue
                    f = tar.extractfile(member)
                    path, size = self._save(f if f is not None else io.BytesIO(),
                                            f"{name}: member {member.name!r}", limits.max_member_bytes)
                    if size != member.size:
                        raise UploadRefused(f"{name}: member {member.name!r} does not match its declared size")
                    # a tar member keeps the mtime its file had when it was packed
                    written = member_mtime_ok(member.mtime)
                    self.sources.append(Source(f"{prefix}{ARCHIVE_SEP}{member.name}", size,
                                               int(member.mtime * 1e9) if written else self._now_ns,
                                               path=str(path), mtime_is_written=written))
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise UploadRefused(f"{name}: not a readable tar archive ({exc})") from None

    def ready_sources(self) -> list[Source]:
        """What the upload holds, to ingest (the session does that)."""
        if not self.sources:
            raise UploadRefused("the upload holds no files")
        return self.sources


class _Prefixed(io.RawIOBase):
    """A stream with bytes already read from it put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[: len(data)] = data
        return len(data)


def remove_stale_uploads(lake_root: Path, older_than_s: float = 24 * 3600) -> int:
    """Remove upload folders a killed server left behind (older than a day by default)."""
    root = Path(lake_root) / UPLOADS_DIR
    removed = 0
    cutoff = time.time() - older_than_s
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    return removed
