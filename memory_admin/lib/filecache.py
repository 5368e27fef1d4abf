"""The embedded default's cache: Django's file cache, culled in an order that keeps what is in use.

Django's `FileBasedCache` culls at random: once `MAX_ENTRIES` files exist (300 by default), every write
first deletes a random third of them. A throttle window's count is one of those files, so a client could
reset its own limit by making the cache fill up, and a count written a moment ago could vanish between two
requests. Here a cull deletes what has expired first, then the least recently written entries (a count
is rewritten on every request, so a live window is among the newest), and only as many as the stock cull
would. Reads do not move an entry's age: the file cache keeps no access time, and writing one would cost a
write per read.

Production runs Redis (`CACHE_URL=redis://…`), which evicts by its own policy; this is for `make run` and
the SQLite test suite.
"""

from __future__ import annotations

import os

from django.core.cache.backends.filebased import FileBasedCache


class FileCache(FileBasedCache):
    # The stubs leave out the stock backend's private helpers used here (`_list_cache_files`, `_is_expired`,
    # `_delete`); they are the ones its own cull uses.
    def _cull(self) -> None:
        paths = self._list_cache_files()  # type: ignore[attr-defined]
        count = len(paths)
        if count < self._max_entries:
            return
        if self._cull_frequency == 0:
            self.clear()
            return
        to_remove = count // self._cull_frequency
        live: list[tuple[int, str]] = []
        for path in paths:
            try:
                with open(path, "rb") as handle:
                    if self._is_expired(handle):  # type: ignore[attr-defined]  # deletes it when expired
                        to_remove -= 1
                        continue
                    live.append((os.fstat(handle.fileno()).st_mtime_ns, path))
            except FileNotFoundError:  # another process culled or deleted it meanwhile
                to_remove -= 1
        if to_remove <= 0:
            return
        live.sort()
        for _, path in live[:to_remove]:
            self._delete(path)  # type: ignore[attr-defined]
