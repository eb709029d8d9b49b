"""What changed under watched folders since the last look, found without listing every folder.

A folder's modification time moves when an entry is created, removed or renamed in it (on NFS too: the
server sets it, and a client sees it once its attribute cache expires). So a look (:meth:`Changes.look`)
stats every known folder and lists only those whose time moved, plus the *warm* ones: a folder holding a
file modified within WARM_S of its last listing is listed again at each look until its files are quiet,
as a file written in place moves its own time, not its folder's. A file modified within QUIET_S is not
handed over yet (it may be half written) and keeps its folder warm.

What this does not see: an old file rewritten in place in a folder that is not warm (its folder's time
does not move). Local writes are seen through inotify (:meth:`Changes.touch`, fed by the watcher's
``watchfiles`` thread); everything else through the full scan the watcher keeps on a slow schedule.

Symbolic links are not followed here: a link is handed over as a file, and the ingest's own walk judges it
(frlake.ingest.sources.walk); a linked folder is read by the full scans. Hidden names are skipped, as the
ingest skips them. Memory: one entry per file and folder (about 200 bytes each: 20 MB at 100,000 files).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

WARM_S = 120.0  # a folder whose files moved this recently is listed at every look
QUIET_S = 1.0  # a file modified more recently than this is held back (it may be half written)


@dataclass
class _Folder:
    mtime_ns: int
    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (size, mtime_ns)
    folders: set[str] = field(default_factory=set)  # names of its subfolders
    warm_until: float = 0.0  # listed at every look until then (wall clock, seconds)
    held: bool = False  # a file was held back: listed again at the next look


@dataclass
class Look:
    """One look's findings: the files new or changed since the last, and what it cost."""

    files: list[str]
    folders_statted: int
    folders_listed: int
    seconds: float
    cpu_seconds: float
    held: int = 0  # files held back as too young: look again in QUIET_S


class Changes:
    """The folders under ``roots`` (``exclude``: a folder never entered, the lake itself) and their files,
    as last seen. :meth:`look` returns what changed since; the first look returns every file."""

    def __init__(self, roots: list[str], exclude: str | None = None):
        self.roots = [os.path.abspath(r) for r in roots]
        self.exclude = os.path.realpath(exclude) if exclude is not None else None
        self._folders: dict[str, _Folder] = {}
        self._touched: set[str] = set()

    def touch(self, path: str) -> None:
        """Something changed at ``path`` (an inotify event): its folder is listed at the next look."""
        self._touched.add(os.path.dirname(os.path.abspath(path)))

    def forget(self) -> None:
        """Drop what was seen: the next look lists everything again (the slow full scan's counterpart)."""
        self._folders.clear()

    def look(self) -> Look:
        started, cpu = time.perf_counter(), time.process_time()
        now = time.time()
        out: list[str] = []
        statted = listed = 0
        touched, self._touched = self._touched, set()
        pending = list(self.roots)
        while pending:
            path = pending.pop()
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                self._drop(path)
                continue
            statted += 1
            if not stat.S_ISDIR(st.st_mode):
                if path in self.roots:  # a watched file, not a folder
                    out.extend(self._file_root(path, st, now))
                continue
            known = self._folders.get(path)
            if (known is not None and known.mtime_ns == st.st_mtime_ns and not known.held
                    and known.warm_until < now and path not in touched):
                pending.extend(os.path.join(path, n) for n in known.folders)
                continue
            listed += 1
            folder = self._list(path, st, known, now, out)
            pending.extend(os.path.join(path, n) for n in folder.folders)
        held = sum(1 for f in self._folders.values() if f.held)
        return Look(out, statted, listed, round(time.perf_counter() - started, 4),
                    round(time.process_time() - cpu, 4), held)

    def _list(self, path: str, st: os.stat_result, known: _Folder | None, now: float, out: list[str]) -> _Folder:
        """List one folder: its changed files go to ``out``; returns what it now holds."""
        folder = _Folder(st.st_mtime_ns)
        before = known.files if known is not None else {}
        try:
            with os.scandir(path) as it:
                entries = [e for e in it if not e.name.startswith(".")]
        except OSError:
            entries = []
        newest = 0
        for entry in entries:
            try:
                est = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(est.st_mode):
                child = entry.path
                if self.exclude is None or os.path.realpath(child) != self.exclude:
                    folder.folders.add(entry.name)
                continue
            seen = (est.st_size, est.st_mtime_ns)
            if now - est.st_mtime_ns / 1e9 < QUIET_S:
                folder.held = True  # not handed over yet, nor remembered: the next look sees it new
                if entry.name in before:
                    folder.files[entry.name] = before[entry.name]
                continue
            newest = max(newest, est.st_mtime_ns)
            folder.files[entry.name] = seen
            if before.get(entry.name) != seen:
                out.append(entry.path)
        for gone in (known.folders if known is not None else set()) - folder.folders:
            self._drop(os.path.join(path, gone))
        folder.warm_until = newest / 1e9 + WARM_S if newest else 0.0
        self._folders[path] = folder
        return folder

    def _file_root(self, path: str, st: os.stat_result, now: float) -> list[str]:
        seen = (st.st_size, st.st_mtime_ns)
        known = self._folders.get(path)
        if now - st.st_mtime_ns / 1e9 < QUIET_S or (known is not None and known.files.get("") == seen):
            return []
        self._folders[path] = _Folder(0, {"": seen})
        return [path]

    def _drop(self, path: str) -> None:
        """A folder that is gone, and everything seen under it."""
        folder = self._folders.pop(path, None)
        if folder is not None:
            for name in folder.folders:
                self._drop(os.path.join(path, name))

    @property
    def folders(self) -> int:
        return len(self._folders)

    @property
    def files(self) -> int:
        return sum(len(f.files) for f in self._folders.values())
