"""Compiled Hyperscan databases kept between runs (``gputriage.text.hscache``): the
second compile of the same patterns loads what the first kept and finds the same
matches; a file for other patterns, cut short or from another library is compiled again
(and replaced); a folder that cannot be written only costs the compile; the folder
follows the environment; it keeps at most ``KEEP`` databases. The files the cache
refuses to read or write (links, FIFOs, other users') are tested in
tests/security/test_hscache_files.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gputriage.text import hscache
from gputriage.text.hslines import hyperscan_module

HS = hyperscan_module()
pytestmark = pytest.mark.skipif(HS is None, reason="hyperscan is not installed here")

EXPRS = [rb"NVRM: Xid", rb"mlx5_core [0-9a-f:.]+: link (up|down)", b"NCCL"]
TEXT = (b"kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus\n"
        b"kernel: mlx5_core 0000:5e:00.0: link down\nx NCCL INFO\n")
# (pattern, where its match ends) of each match of EXPRS in TEXT
FOUND = [(0, TEXT.index(b"NVRM: Xid") + 9), (1, TEXT.index(b"link down") + 9),
         (2, TEXT.index(b"NCCL") + 4)]


def matches(db: Any, text: bytes = TEXT) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    db.scan(text, match_event_handler=lambda i, _f, to, _fl, _c: found.append((i, to)))
    return sorted(found)


class NoCompile:
    """Stands for ``hyperscan.Database`` where a test says nothing may be compiled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("compiled, not loaded")


def files(folder: Path) -> list[Path]:
    return sorted((folder / "hyperscan").glob("*.hsdb"))


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(hscache.CACHE_DIR_ENV, str(tmp_path))
    return tmp_path


def compiled(exprs: list[bytes] = EXPRS) -> Any:
    return hscache.compiled(HS, exprs, range(len(exprs)), [0] * len(exprs))


def test_the_second_compile_loads_what_the_first_kept(folder, monkeypatch):
    first = matches(compiled())
    assert first == FOUND
    assert len(files(folder)) == 1
    monkeypatch.setattr(HS, "Database", NoCompile)
    assert matches(compiled()) == first
    # (a loaded database has its scratch space: it scans without one given)
    assert compiled().scratch is not None


def test_other_patterns_flags_or_ids_are_compiled_not_loaded(folder):
    compiled()
    other = [b"NVRM: Xid", b"link up"]
    assert matches(compiled(other)) == FOUND[:1]
    caseless = hscache.compiled(HS, [b"nccl"], [7], [HS.HS_FLAG_CASELESS])
    assert matches(caseless) == [(7, FOUND[2][1])]
    assert len(files(folder)) == 3


def test_a_file_kept_for_other_patterns_is_not_loaded(folder):
    compiled([b"NCCL"])
    (kept,) = files(folder)
    name = hscache._name(hscache._source(HS, EXPRS, range(3), [0] * 3, HS.HS_MODE_BLOCK))
    kept.rename(kept.with_name(name))  # (as if two sources had the same file name)
    assert matches(compiled()) == FOUND


@pytest.mark.parametrize("damage", ["cut", "flipped", "empty", "header only"])
def test_a_damaged_file_is_compiled_again_and_replaced(folder, monkeypatch, damage):
    compiled()
    (kept,) = files(folder)
    data = kept.read_bytes()
    head = hscache._head(hscache._source(HS, EXPRS, range(3), [0] * 3, HS.HS_MODE_BLOCK))
    kept.write_bytes({"cut": data[:len(data) // 2],
                      "flipped": data[:-100] + bytes(b ^ 0xFF for b in data[-100:]),
                      "empty": b"",
                      "header only": head}[damage])
    assert matches(compiled()) == FOUND
    assert kept.read_bytes() == data  # (written again, whole)
    monkeypatch.setattr(HS, "Database", NoCompile)
    assert matches(compiled()) == FOUND


def test_a_database_hyperscan_refuses_is_compiled_again(folder, monkeypatch):
    compiled()

    def refuse(*args: Any) -> Any:
        raise HS.DatabaseVersionError("another library version")

    monkeypatch.setattr(HS, "loadb", refuse)
    assert matches(compiled()) == FOUND


def test_a_folder_that_cannot_be_written_only_costs_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(hscache.CACHE_DIR_ENV, str(blocker))
    assert matches(compiled()) == FOUND
    monkeypatch.setenv(hscache.CACHE_DIR_ENV, "")  # (no cache at all)
    assert matches(compiled()) == FOUND
    assert list(tmp_path.iterdir()) == [blocker]


def test_the_folder_keeps_the_latest_databases(folder, monkeypatch):
    monkeypatch.setattr(hscache, "KEEP", 3)
    for k in range(5):
        exprs = [b"literal %d" % k]
        compiled(exprs)
        source = hscache._source(HS, exprs, range(1), [0], HS.HS_MODE_BLOCK)
        written = folder / "hyperscan" / hscache._name(source)
        os.utime(written, ns=(0, (k + 1) * 10**9))  # (written k seconds apart)
    assert len(files(folder)) == 3
    monkeypatch.setattr(HS, "Database", NoCompile)
    compiled([b"literal 4"])  # (the latest kept)


def test_a_compile_error_is_raised_and_nothing_kept(folder):
    with pytest.raises(HS.error):
        compiled([b"(unclosed"])
    assert files(folder) == []


@pytest.mark.parametrize(("env", "euid", "want"), [
    ({"GPUTRIAGE_CACHE_DIR": "/srv/cache"}, 1000, "/srv/cache"),
    ({"GPUTRIAGE_CACHE_DIR": "/srv/cache"}, 0, "/srv/cache"),
    ({"GPUTRIAGE_CACHE_DIR": ""}, 1000, None),
    ({}, 0, "/var/cache/gputriage"),
    ({"XDG_CACHE_HOME": "/home/u/.xdg"}, 1000, "/home/u/.xdg/gputriage"),
    ({"XDG_CACHE_HOME": "relative"}, 1000, "HOME/.cache/gputriage"),
    ({}, 1000, "HOME/.cache/gputriage"),
])
def test_the_folder_follows_the_environment(monkeypatch, env, euid, want):
    monkeypatch.setattr(hscache.os, "geteuid", lambda: euid)
    got = hscache.cache_dir(env)
    assert (str(got).replace(str(Path.home()), "HOME") if got else None) == want
