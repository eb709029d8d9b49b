"""Find the files to ingest: plain files, folders (recursively) and tar
archives (.tar, .tar.gz, .tgz). Archive members are read as a stream and never
extracted to disk; links, devices and other non-regular members are refused,
and member and total sizes are capped, so a decompression bomb stops early."""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from frlake.errors import FrlakeError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ARCHIVE_SEP = "::"


@dataclass(frozen=True)
class Source:
    """One candidate dump. ``key`` is its name in the catalog: the absolute
    path, or ``archive::member`` for a member of an archive."""

    key: str
    size: int
    mtime_ns: int
    data: bytes | None = None  # archive members carry their bytes
    problem: tuple[str, str] | None = None  # (reason, message) found while reading
    path: str | None = None  # the file to read, when it is not ``key`` (an upload or archive member on disk)

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


def walk(paths: list[Path], exclude: Path | None = None) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular file under the given paths, sorted, with its stat;
    ``exclude`` (the lake itself, when it lives inside the tree) is skipped."""
    skip = str(exclude.resolve()) if exclude is not None else None
    for root in paths:
        try:
            st = root.stat()
        except OSError as exc:
            raise FrlakeError(f"cannot read {root}: {exc.strerror}") from None
        if root.is_dir():
            yield from _walk_dir(root, skip)
        else:
            yield root, st


def _walk_dir(folder: Path, skip: str | None) -> Iterator[tuple[Path, os.stat_result]]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue  # hidden and temporary files (".rank_3.tmp") are never dumps yet
        try:
            if entry.is_dir(follow_symlinks=False):
                if skip is None or os.path.realpath(entry.path) != skip:
                    yield from _walk_dir(Path(entry.path), skip)
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path), entry.stat(follow_symlinks=False)
        except OSError:
            continue


def archive_members(path: Path, limits: ArchiveLimits) -> Iterator[Source]:
    """Stream the members of a tar archive as Sources holding their bytes."""
    total = 0
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for member in tar:
                key = f"{path}{ARCHIVE_SEP}{member.name}"
                mtime_ns = int(member.mtime * 1e9)
                if member.isdir():
                    continue
                base = member.name.rsplit("/", 1)[-1]
                if base.startswith("."):
                    continue
                if not member.isfile():
                    kind = "link" if member.issym() or member.islnk() else "special file"
                    yield Source(key, 0, mtime_ns, problem=("unsafe_archive_member", f"the archive member is a {kind}"))
                    continue
                if member.size > limits.max_member_bytes:
                    yield Source(key, member.size, mtime_ns,
                                 problem=("too_large", f"the member is {member.size:,} bytes, over the limit"))
                    continue
                total += member.size
                if total > limits.max_total_bytes:
                    raise FrlakeError(f"{path}: the archive unpacks to more than {limits.max_total_bytes:,} bytes")
                f = tar.extractfile(member)
                data = f.read() if f is not None else b""
                yield Source(key, len(data), mtime_ns, data=data)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise FrlakeError(f"{path}: cannot read the archive ({exc})") from None
