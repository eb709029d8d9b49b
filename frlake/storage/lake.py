"""The lake folder: original bytes, Parquet tables, staging and the write lock.

Layout (docs/lake.md)::

    LAKE/
      catalog.db                    the SQLite catalog (embedded default)
      raw/ab/abcd...ef.zst          original dump bytes, zstd, by sha256
      tables/<table>/job=<j>/attempt=<n>/part-<run>-<batch>-<uid>.parquet
      tables/stacks/part-<run>-<batch>-<uid>.parquet
      .staging/                     files being written (never under tables/)
      .lock                         held by the one writer that publishes

Parquet files are written under ``.staging``, renamed into ``tables`` under a
hidden name (``.part-....parquet.pending``, which Spark, Hive, Trino and a
``*.parquet`` glob all skip) once the catalog has recorded the intent, and
linked at their final name only after the catalog committed them
(frlake.storage.publish): an outside reader of ``tables/`` never sees a file that is
not committed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import zstandard

from frlake.errors import FrlakeError, LakeLocked

if TYPE_CHECKING:  # imported where files are staged: a command that only reads the catalog needs neither
    import pyarrow as pa

TABLES_DIR = "tables"
RAW_DIR = "raw"
STAGING_DIR = ".staging"
LOCK_FILE = ".lock"
# Dictionary encoding only where values repeat (it slows the rest down); zstd 3
# was both smaller and faster than level 1 on real entry tables.
DICTIONARY_COLUMNS = ["host", "pg_name", "pg_desc", "profiling_name", "backend", "op", "state", "thread_id",
                      "thread_name", "input_dtypes", "output_dtypes", "fr_version", "encoding", "comm_lib_version"]
# Min/max statistics where readers filter (they add to the write time of every column they cover).
STATISTICS_COLUMNS = ["dump_id", "rank", "host", "pg_name", "collective_seq_id", "p2p_seq_id", "record_id", "op",
                      "time_created_ns", "stack_id", "sha256", "pg_id"]
PARQUET_OPTIONS = dict(compression="zstd", compression_level=3)
ROW_GROUP_ROWS = 256 * 1024
# ... and at most this much data held for one: the groups of a 16,384-rank attempt are 80,000 rows, each
# world-group row 16,384 ranks, 1 GB in memory as one row group (compaction held it all).
ROW_GROUP_BYTES = 64 << 20
# pg_config rank lists are runs of consecutive or evenly spaced ranks: delta-packed, the world group's
# 16,384 ranks take about 100 bytes instead of 8 KB (zstd), and are written and read faster.
# DELTA_BINARY_PACKED is a standard Parquet encoding: DuckDB, Spark, Trino and pyarrow read it.
COLUMN_ENCODING = {"ranks.list.element": "DELTA_BINARY_PACKED"}


def _writer_options(table_schema: pa.Schema) -> dict:
    names = set(table_schema.names)
    encoding = {k: v for k, v in COLUMN_ENCODING.items() if k.split(".", 1)[0] in names}
    return dict(use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
                write_statistics=[c for c in STATISTICS_COLUMNS if c in names], **PARQUET_OPTIONS,
                **({"column_encoding": encoding} if encoding else {}))


def _synced_size(path: Path) -> int:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
        return os.fstat(f.fileno()).st_size


def sync(paths: Iterable[Path]) -> None:
    """Make files written without syncing durable. Written first and synced after, many small files cost
    about half what syncing each as it is written costs (the first sync writes most of the others' data
    with it; bench/README.md, "Many small attempts")."""
    for path in paths:
        _synced_size(path)


HIDDEN_SUFFIX = ".pending"
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"  # the folder name that Hive, Spark and DuckDB read as NULL


def partition_value(value: object) -> str:
    """Escape a job name or attempt for a Hive folder name, so that every
    reader (DuckDB, Spark, Hive, Trino) decodes it back to the same value:
    percent-escapes for anything but a few safe characters, and a job named
    like Hive's NULL marker gets its underscores escaped too."""
    text = quote(str(value), safe="-_.~@+")
    return text.replace("_", "%5F") if text == HIVE_NULL else text


def raw_rel_path(sha256: str) -> str:
    """Where the original bytes of a dump are kept, relative to the lake."""
    return f"{RAW_DIR}/{sha256[:2]}/{sha256}.zst"


def hidden_path(rel_path: str) -> str:
    """The name a Parquet file has in its table's folder until it is committed:
    a leading dot and no ``.parquet`` suffix, so that Spark, Hive, Trino and a
    ``*.parquet`` glob skip it."""
    folder, _, name = rel_path.rpartition("/")
    return f"{folder}/.{name}{HIDDEN_SUFFIX}" if folder else f".{name}{HIDDEN_SUFFIX}"


class Lake:
    """The lake folder. ``staging`` is where this process writes files before
    they are published: by default the lake's ``.staging``; an ingest run
    uses a folder of its own inside it (see :meth:`run_staging`)."""

    def __init__(self, root: Path, staging: Path | str | None = None):
        self.root = Path(root)
        self._staging = Path(staging) if staging is not None else None

    @property
    def tables(self) -> Path:
        return self.root / TABLES_DIR

    @property
    def staging(self) -> Path:
        return self._staging if self._staging is not None else self.root / STAGING_DIR

    def for_run(self, run_id: int) -> Lake:
        """The same lake, staging into the folder of one ingest run."""
        return Lake(self.root, self.root / STAGING_DIR / f"run-{run_id}")

    def create(self) -> None:
        for sub in (TABLES_DIR, RAW_DIR, STAGING_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- raw bytes ----------------------------------------------------------
    def raw_path(self, sha256: str) -> Path:
        return self.root / raw_rel_path(sha256)

    def store_raw(self, sha256: str, data: bytes) -> int:
        """Keep the original bytes, compressed, under their sha256. Idempotent."""
        path = self.raw_path(sha256)
        if path.exists():
            return path.stat().st_size
        return self.put_raw(sha256, compress_raw(data))

    def put_raw(self, sha256: str, blob: bytes) -> int:
        """Write compressed bytes under their sha256: to a temporary file, made
        durable (fsync), then renamed into place, so a name always means its
        whole content. (Only I/O: ingest workers run it in a thread while they
        read the next dump.)"""
        path = self.raw_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.staging / f"raw-{uuid.uuid4().hex}.tmp"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return len(blob)

    def raw_bytes(self) -> int:
        """The bytes the raw copies take on disk (their sizes, read from the folder: the catalog records the
        dumps' own sizes)."""
        total = 0
        top = self.root / RAW_DIR
        if not top.is_dir():
            return 0
        with os.scandir(top) as shards:
            for shard in shards:
                if shard.is_dir(follow_symlinks=False):
                    with os.scandir(shard.path) as files:
                        total += sum(f.stat(follow_symlinks=False).st_size for f in files
                                     if f.is_file(follow_symlinks=False))
        return total

    def read_raw(self, sha256: str) -> bytes:
        path = self.raw_path(sha256)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            raise FrlakeError(f"the lake has no original bytes for {sha256}") from None
        return zstandard.ZstdDecompressor().decompress(blob)

    # -- Parquet --------------------------------------------------------------
    def part_path(self, table: str, name: str, job: str | None, attempt: int | None) -> str:
        """The path of a table file relative to the lake root."""
        parts = [TABLES_DIR, table]
        if job is not None:
            parts += [f"job={partition_value(job)}", f"attempt={partition_value(attempt)}"]
        return "/".join(parts + [name])

    def stage_table(self, table: pa.Table, *, synced: bool = True) -> tuple[Path, int]:
        """Write a Parquet file under .staging; returns (staged path, bytes). ``synced`` False: not yet
        on disk for sure; the caller calls :func:`sync` on it before it publishes it."""
        import pyarrow.parquet as pq

        staged = self.staging / f"{uuid.uuid4().hex}.parquet.tmp"
        staged.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, staged, row_group_size=ROW_GROUP_ROWS, **_writer_options(table.schema))
        return staged, (_synced_size(staged) if synced else staged.stat().st_size)

    def stage_batches(self, table_schema: pa.Schema, batches: Iterator[pa.RecordBatch],
                      max_bytes: int = ROW_GROUP_BYTES) -> tuple[Path, int, int]:
        """Write record batches to one staged Parquet file as they come, a
        row group at a time of at most ``ROW_GROUP_ROWS`` rows and about
        ``max_bytes`` (a compaction never holds a partition in memory);
        returns (staged path, rows, bytes)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        staged = self.staging / f"{uuid.uuid4().hex}.parquet.tmp"
        staged.parent.mkdir(parents=True, exist_ok=True)
        rows = 0
        with pq.ParquetWriter(staged, table_schema, **_writer_options(table_schema)) as writer:
            pending: list[pa.RecordBatch] = []
            held = held_bytes = 0
            for batch in batches:
                pending.append(batch)
                held += batch.num_rows
                held_bytes += batch.nbytes
                if held >= ROW_GROUP_ROWS or held_bytes >= max_bytes:
                    writer.write_table(pa.Table.from_batches(pending, table_schema), row_group_size=ROW_GROUP_ROWS)
                    rows, pending, held, held_bytes = rows + held, [], 0, 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, table_schema), row_group_size=ROW_GROUP_ROWS)
                rows += held
        return staged, rows, _synced_size(staged)

    def publish(self, staged: Path, rel_path: str) -> None:
        """Move a staged file into its table's folder under its hidden name."""
        hidden = self.root / hidden_path(rel_path)
        hidden.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, hidden)

    def reveal(self, rel_path: str) -> bool:
        """Give a committed file its final name: a hard link next to its
        hidden name, so a reader that opened views before still finds the
        hidden one (it is retired, and deleted after the grace period).
        Returns whether the hidden name is left to retire. On a file system
        without hard links the file is renamed."""
        hidden, final = self.root / hidden_path(rel_path), self.root / rel_path
        try:
            os.link(hidden, final)
        except FileExistsError:
            return hidden.exists()
        except FileNotFoundError:
            if final.exists():
                return False
            raise FrlakeError(f"the lake lost a committed file: {rel_path} is at neither its hidden nor its "
                              f"final name") from None
        except OSError:  # no hard links here (some network or FUSE file systems)
            os.replace(hidden, final)
            return False
        return True

    def remove(self, rel_path: str) -> None:
        """Delete a file of the lake, and the folders it leaves empty (a
        partition that is gone leaves no folder for Spark or Hive to list)."""
        path = self.root / rel_path
        try:
            path.unlink()
        except FileNotFoundError:
            return
        stop = {self.root, self.tables, self.root / RAW_DIR, self.root / STAGING_DIR}
        folder = path.parent
        while folder not in stop and folder.parent != self.tables and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    # -- runs and locks --------------------------------------------------------
    def _run_lock_path(self, run_id: int) -> Path:
        return self.root / STAGING_DIR / f"run-{run_id}.lock"

    @contextmanager
    def run_staging(self, run_id: int) -> Iterator[Lake]:
        """Hold the run's own lock and staging folder while it runs; remove
        both afterwards. Another run's recovery treats a run whose lock is
        free as dead and removes what it left (:meth:`clear_dead_staging`)."""
        (self.root / STAGING_DIR).mkdir(parents=True, exist_ok=True)
        lock = self._run_lock_path(run_id)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                    break  # the lock file is still the one at the path (a recovery may have unlinked it)
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            run = self.for_run(run_id)
            run.staging.mkdir(exist_ok=True)
            try:
                yield run
            finally:
                shutil.rmtree(run.staging, ignore_errors=True)
                lock.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def run_alive(self, run_id: int) -> bool:
        """Whether an ingest run still holds its lock (on this machine or any
        other that shares the lake's file system and its locks)."""
        try:
            fd = os.open(self._run_lock_path(run_id), os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return True
            raise
        finally:
            os.close(fd)
        return False

    def clear_dead_staging(self) -> None:
        """Remove what dead runs left under .staging (only under the write
        lock). Live runs' folders stay; so does .staging itself, since another
        ingest may be creating the lake's folders before it takes the lock."""
        staging = self.root / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        for child in staging.iterdir():
            name = child.name
            number = name.removeprefix("run-").removesuffix(".lock")
            if name.startswith("run-") and number.isdigit() and self.run_alive(int(number)):
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    @contextmanager
    def write_lock(self, timeout: float | None = None) -> Iterator[None]:
        """One writer at a time per lake (flock on LAKE/.lock). Waits at most
        ``timeout`` seconds (None: as long as it takes), then raises LakeLocked."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        raise LakeLocked(f"the lake {self.root} is busy: another frlake has held its write lock "
                                         f"for more than {timeout:g} s; try again later") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)


def compress_raw(data: bytes) -> bytes:
    """The bytes a raw copy holds: zstd level 1 with the content size."""
    return zstandard.ZstdCompressor(level=1, write_content_size=True).compress(data)


def new_part_name(run_id: int, batch: int) -> str:
    return f"part-{run_id:06d}-{batch:06d}-{uuid.uuid4().hex[:8]}.parquet"
