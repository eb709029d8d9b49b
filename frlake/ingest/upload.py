"""Ingest dumps that arrive as bytes (web uploads): single dumps or tar archives.

An upload is checked whole before anything is written: an archive member
that would escape its folder (absolute path, ``..``), a link, a device or
other special file, too many members or too many unpacked bytes (a
decompression bomb) refuse the whole upload, and then nothing reaches the lake.
"""

from __future__ import annotations

import io
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath

from frlake.config import Settings
from frlake.errors import FrlakeError
from frlake.ingest.pipeline import IngestOptions, IngestSummary, ingest
from frlake.ingest.sources import ARCHIVE_SEP, Source



class UploadRefused(FrlakeError):
    """The upload as a whole is unsafe or too large; nothing was written."""


@dataclass(frozen=True)
class UploadLimits:
    max_members: int = 100_000
    max_unpacked_bytes: int = 8 << 30
    max_member_bytes: int = 2 << 30


def _is_archive(name: str, data: bytes) -> bool:
    lower = name.lower()
    if lower.endswith((".tar", ".tar.gz", ".tgz")):
        return True
    if data[:2] == b"\x1f\x8b":
        return True
    return len(data) > 262 and data[257:262] == b"ustar"


def _safe_member_name(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts and "\\" not in name


def archive_sources(name: str, data: bytes, prefix: str, limits: UploadLimits) -> list[Source]:
    """Every member of an uploaded archive, after checking the archive whole."""
    sources: list[Source] = []
    unpacked = 0
    now_ns = time.time_ns()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for count, member in enumerate(tar, 1):
                if count > limits.max_members:
                    raise UploadRefused(f"{name}: more than {limits.max_members:,} members")
                if not _safe_member_name(member.name):
                    raise UploadRefused(f"{name}: member {member.name!r} would escape the upload folder")
                if member.isdir():
                    continue
                if not member.isfile():
                    kind = "link" if member.issym() or member.islnk() else "device or special file"
                    raise UploadRefused(f"{name}: member {member.name!r} is a {kind}")
                if member.size > limits.max_member_bytes:
                    raise UploadRefused(f"{name}: member {member.name!r} is {member.size:,} bytes, over the limit")
                unpacked += member.size
                if unpacked > limits.max_unpacked_bytes:
                    raise UploadRefused(f"{name}: unpacks to more than {limits.max_unpacked_bytes:,} bytes")
                if PurePosixPath(member.name).name.startswith("."):
                    continue
                f = tar.extractfile(member)
                content = f.read(member.size + 1) if f is not None else b""
                if len(content) != member.size:
                    raise UploadRefused(f"{name}: member {member.name!r} does not match its declared size")
                sources.append(Source(f"{prefix}{ARCHIVE_SEP}{member.name}", len(content), now_ns, data=content))
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise UploadRefused(f"{name}: not a readable tar archive ({exc})") from None
    return sources


def ingest_upload(
    settings: Settings,
    files: list[tuple[str, bytes]],
    options: IngestOptions = IngestOptions(),
    limits: UploadLimits = UploadLimits(),
) -> IngestSummary:
    """Check and ingest uploaded files. Paths in the catalog read
    ``upload:<id>/<file name>`` (and ``::member`` for archive members), so the
    layout template matches archive member paths as it would on disk."""
    upload_id = uuid.uuid4().hex[:12]
    now_ns = time.time_ns()
    sources: list[Source] = []
    for name, data in files:
        base = PurePosixPath(name.replace("\\", "/")).name or "upload"
        prefix = f"upload:{upload_id}/{base}"
        if _is_archive(base, data):
            sources.extend(archive_sources(base, data, prefix, limits))
        else:
            sources.append(Source(prefix, len(data), now_ns, data=data))
    if not sources:
        raise UploadRefused("the upload holds no files")
    return ingest([], settings, options, sources=sources, keep_file_list=True)
