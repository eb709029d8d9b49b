"""Find and read the files to ingest: plain files, folders (recursively) and
tar archives (.tar, .tar.gz, .tgz).

One bad file never stops the rest: whatever cannot be read (a name that is
not UTF-8, a FIFO, a device, a dangling or looping link, an unreadable
folder, a missing path) becomes a :class:`Source` with a ``problem``, which
the run records as a rejection with that reason (docs/security.md, "Files and
archives"). Only regular files are ever opened, and their size is checked on
the open descriptor before a byte is read. Archive members are streamed in
bounded blocks to spill files under the lake's staging folder, never held in
memory; links, devices and other non-regular members are refused, and member
and total sizes are capped on the bytes actually unpacked."""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from frlake.errors import DumpRejected, FrlakeError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ARCHIVE_SEP = "::"
YEAR_2100 = 4_102_444_800  # seconds since the epoch


def member_mtime_ok(mtime) -> bool:
    """An archive member's mtime is untrusted input: a time between the epoch and 2100, or none."""
    return isinstance(mtime, (int, float)) and 0 < mtime < YEAR_2100


NOT_STATTED = -1  # mtime_ns of a path that could not be stat'ed: never "unchanged", reported on every run
SPILL_BLOCK = 1 << 20  # bytes copied at a time from an archive member to its spill file


@dataclass(frozen=True)
class Source:
    """One candidate dump. ``key`` is its name in the catalog: the absolute
    path, or ``archive::member`` for a member of an archive. A name that is
    not valid UTF-8 gets a printable key (its bytes escaped as ``\\xff``) and
    ``path`` keeps the real one."""

    key: str
    size: int
    mtime_ns: int
    data: bytes | None = None  # bytes already in memory (uploads)
    problem: tuple[str, str] | None = None  # (reason, message) found while looking for it
    path: str | None = None  # the file to read, when it is not ``key`` (an upload or archive member on disk)
    # whether mtime_ns is when the dump was written (false for a plain upload: it is when the upload arrived)
    mtime_is_written: bool = True

    @property
    def fs_path(self) -> str:
        return self.path if self.path is not None else self.key


@dataclass(frozen=True)
class ArchiveLimits:
    max_member_bytes: int
    max_total_bytes: int


def is_archive(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(ARCHIVE_SUFFIXES)


def printable_name(name: str) -> str | None:
    """The catalog key for a file name: ``None`` when it is valid UTF-8 (the
    name is its own key), else the name with its undecodable bytes escaped."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")
    return None


def _source(path: str, size: int, mtime_ns: int, problem: tuple[str, str] | None = None) -> Source:
    escaped = printable_name(path)
    if escaped is None:
        return Source(path, size, mtime_ns, problem=problem)
    problem = problem or ("undecodable_name", "the file name is not valid UTF-8; rename it to ingest it")
    return Source(escaped, size, mtime_ns, problem=problem, path=path)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISLNK, "symbolic link")):
        if test(mode):
            return name
    return "special file"


def _file(path: str, st: os.stat_result) -> Source:
    if not stat.S_ISREG(st.st_mode):
        return _source(path, 0, st.st_mtime_ns, ("not_regular_file", f"it is a {_kind(st.st_mode)}, not a regular file"))
    return _source(path, st.st_size, st.st_mtime_ns)


def _stat_problem(exc: OSError) -> tuple[str, str]:
    if exc.errno == errno.ENOENT:
        return "not_found", "no such file or folder"
    if exc.errno == errno.ELOOP:
        return "symlink_loop", "too many levels of symbolic links (a link loop)"
    return "unreadable", f"cannot read it: {exc.strerror}"


def walk(paths: list[Path], exclude: Path | None = None) -> Iterator[Source]:
    """Every file under the given paths, in sorted order, as a Source.

    Hidden names (and so temporary ``.rank_3.tmp`` files) inside folders are
    skipped. Symbolic links are followed to regular files and folders; a link
    to a folder already read in this run (a loop, or a second way into the
    same folder, by ``(st_dev, st_ino)``), a dangling link and a link to
    anything else come back as Sources with a problem, as do unreadable
    folders and paths that do not exist. ``exclude`` (the lake itself, when it
    lives inside the tree) is skipped."""
    skip = os.path.realpath(exclude) if exclude is not None else None
    seen: set[tuple[int, int]] = set()
    for root in paths:
        path = str(root)
        try:
            st = os.stat(path)
        except OSError as exc:
            yield _source(path, 0, NOT_STATTED, _stat_problem(exc))
            continue
        if stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) not in seen:  # a root inside another root is read once
                yield from _walk_dir(path, st, skip, seen, frozenset())
        else:
            yield _file(path, st)


def _walk_dir(folder: str, folder_st: os.stat_result, skip: str | None, seen: set[tuple[int, int]],
              above: frozenset[tuple[int, int]]) -> Iterator[Source]:
    ident = (folder_st.st_dev, folder_st.st_ino)
    seen.add(ident)
    above = above | {ident}
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield _source(folder, 0, folder_st.st_mtime_ns, ("unreadable_folder", f"cannot list the folder: {exc.strerror}"))
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue  # hidden and temporary files (".rank_3.tmp") are never dumps yet
        path = entry.path
        try:
            link = entry.is_symlink()
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            yield _source(path, 0, NOT_STATTED, _stat_problem(exc))
            continue
        if link:
            try:
                st = os.stat(path)
            except OSError as exc:
                reason, message = _stat_problem(exc)
                if reason == "not_found":
                    reason, message = "dangling_link", f"the link points to {_target(path)}, which does not exist"
                yield _source(path, 0, st.st_mtime_ns, (reason, message))
                continue
        if stat.S_ISDIR(st.st_mode):
            if skip is not None and os.path.realpath(path) == skip:
                continue
            target = (st.st_dev, st.st_ino)
            if target in above:
                yield _source(path, 0, st.st_mtime_ns,
                              ("symlink_loop", f"the link points to {_target(path)}, a folder above it"))
            elif target in seen:
                yield _source(path, 0, st.st_mtime_ns,
                              ("duplicate_folder", f"the link points to {_target(path)}, a folder already read in this run"))
            else:
                yield from _walk_dir(path, st, skip, seen, above)
        else:
            yield _file(path, st)


def _target(link: str) -> str:
    try:
        target = os.readlink(link)
    except OSError:
        return "?"
    return printable_name(target) or target


# -- reading ------------------------------------------------------------------
def read_regular_file(path: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; otherwise
    :class:`DumpRejected`. The file is opened without blocking (a FIFO
    does not hang), checked on the open descriptor (a link swapped meanwhile
    to a device is caught), its size refused before reading, and at most
    ``max_bytes + 1`` bytes are read (a file that grows while read is too
    large, never a memory hog)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        reason, message = _stat_problem(exc)
        raise DumpRejected(reason, message) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DumpRejected("not_regular_file", f"it is a {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise DumpRejected("too_large", f"the file is {st.st_size:,} bytes, over the {max_bytes:,}-byte limit")
        parts: list[bytes] = []
        got = 0
        want = st.st_size + 1  # one read of the whole file when it does not change; one more byte shows growth
        while got <= max_bytes:
            part = os.read(fd, min(want, max_bytes + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            want = SPILL_BLOCK
        if got > max_bytes:
            raise DumpRejected("too_large", f"the file grew past the {max_bytes:,}-byte limit while it was read")
    except OSError as exc:
        raise DumpRejected("unreadable", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


# -- archives -----------------------------------------------------------------
def spill(stream: BinaryIO, folder: Path, max_bytes: int) -> tuple[Path, int]:
    """Copy at most ``max_bytes + 1`` bytes of ``stream`` to a new file in
    ``folder``, in blocks of SPILL_BLOCK; return the file and the bytes
    copied. More than ``max_bytes`` means the stream is over the limit (the
    caller removes the file)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="member-", suffix=".tmp", dir=folder)
    copied = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while copied <= max_bytes:
                block = stream.read(min(SPILL_BLOCK, max_bytes + 1 - copied))
                if not block:
                    break
                out.write(block)
                copied += len(block)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name), copied


def archive_members(path: str, key: str, limits: ArchiveLimits, spill_dir: Path) -> Iterator[Source]:
    """Stream the members of the tar archive at ``path`` (named ``key`` in the
    catalog) as Sources whose ``path`` is a spill file under ``spill_dir``;
    the consumer deletes the spill files. Raises FrlakeError when the archive
    is unreadable or unpacks to more than the total limit."""
    total = 0

    def over_total(extra: int) -> None:
        if total + extra > limits.max_total_bytes:
            raise FrlakeError(f"{key}: the archive unpacks to more than {limits.max_total_bytes:,} bytes")

    try:
        with tarfile.open(path, mode="r|*") as tar:
            for member in tar:
                written = member_mtime_ok(member.mtime)
                mtime_ns = int(member.mtime * 1e9) if written else 0
                if member.isdir():
                    continue
                base = member.name.rsplit("/", 1)[-1]
                if base.startswith("."):
                    continue
                name = printable_name(member.name)
                member_key = f"{key}{ARCHIVE_SEP}{name or member.name}"
                if name is not None:
                    problem = ("undecodable_name", "the member's name is not valid UTF-8")
                elif not member.isfile():
                    kind = "link" if member.issym() or member.islnk() else "special file"
                    problem = ("unsafe_archive_member", f"the archive member is a {kind}")
                elif member.size > limits.max_member_bytes:
                    problem = ("too_large", f"the member is {member.size:,} bytes, over the "
                                            f"{limits.max_member_bytes:,}-byte limit")
                else:
                    problem = None
                if problem is not None:
                    over_total(member.size)  # tarfile unpacks what it skips
                    total += member.size
                    yield Source(member_key, member.size if member.isfile() else 0, mtime_ns, problem=problem)
                    continue
                cap = min(limits.max_member_bytes, limits.max_total_bytes - total)
                spilled, copied = spill(tar.extractfile(member) or io.BytesIO(), spill_dir, cap)
                if copied > cap:
                    spilled.unlink()
                    over_total(copied)
                    yield Source(member_key, member.size, mtime_ns, problem=(
                        "too_large", f"the member unpacks to more than {limits.max_member_bytes:,} bytes"))
                    continue
                total += copied
                yield Source(member_key, copied, mtime_ns, path=str(spilled))
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise FrlakeError(f"{key}: cannot read the archive ({exc})") from None
