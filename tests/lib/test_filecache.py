"""The embedded default's file cache culls expired entries first, then the least recently written ones,
never at random: a throttle window's count written a moment ago survives a cull (issue: a SQLite CI run
lost one between two requests, and a client could reset its own limit by filling the cache)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from memory_admin.lib.filecache import FileCache


def _cache(directory: Path, max_entries: int = 30) -> FileCache:
    return FileCache(str(directory), {"OPTIONS": {"MAX_ENTRIES": max_entries, "CULL_FREQUENCY": 3}})


# The stock file-based backend's private helpers, which django-stubs leaves out (lib/filecache.py uses them too).
def _file_of(cache: FileCache, key: str) -> str:
    path: str = cache._key_to_file(key)  # type: ignore[attr-defined]
    return path


def _files(cache: FileCache) -> list[str]:
    paths: list[str] = cache._list_cache_files()  # type: ignore[attr-defined]
    return paths


def _age(cache: FileCache, key: str, seconds_ago: float) -> None:
    path = _file_of(cache, key)
    when = time.time() - seconds_ago
    os.utime(path, (when, when))


def test_a_cull_takes_the_least_recently_written_entries(tmp_path):
    cache = _cache(tmp_path)
    for n in range(30):
        cache.set(f"k{n}", n, timeout=600)
        _age(cache, f"k{n}", 1000 - n)  # k0 is the oldest, k29 the newest
    cache.set("fresh", "x", timeout=600)  # 30 files: this write culls a third of them first
    assert [n for n in range(30) if cache.has_key(f"k{n}")] == list(range(10, 30))
    assert cache.get("fresh") == "x"


def test_expired_entries_go_first_and_count_toward_the_cull(tmp_path):
    cache = _cache(tmp_path)
    for n in range(20):
        cache.set(f"live{n}", n, timeout=600)
        _age(cache, f"live{n}", 2000 + n)  # older than every expired entry below
    for n in range(10):
        cache.set(f"gone{n}", n, timeout=0)  # written already expired
    cache.set("fresh", "x", timeout=600)
    assert all(cache.get(f"live{n}") == n for n in range(20))
    assert not any(os.path.exists(_file_of(cache, f"gone{n}")) for n in range(10))
    assert len(_files(cache)) == 21


def test_below_the_limit_nothing_is_culled(tmp_path):
    cache = _cache(tmp_path)
    for n in range(29):
        cache.set(f"k{n}", n, timeout=0)
    cache.set("fresh", "x", timeout=600)
    assert len(_files(cache)) == 30


def test_a_file_cache_url_uses_it():
    from memory_admin.settings import _cache_from_url

    assert _cache_from_url("file:///tmp/somewhere")["BACKEND"] == "memory_admin.lib.filecache.FileCache"
