"""The compiled-database cache never reads or writes through what another user could
have planted (docs/security.md, "Compiled search databases"): a link at a database's
path is not followed, a FIFO there does not block, a file another user owns or one with
another hard link is not loaded, and nothing is written into a folder others can write
to or that another user owns. Each case compiles instead, and gives the same matches."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from gputriage.text import hscache
from gputriage.text.hslines import hyperscan_module

HS = hyperscan_module()
pytestmark = pytest.mark.skipif(HS is None, reason="hyperscan is not installed here")

EXPRS = [b"NVRM: Xid", b"NCCL"]
TEXT = b"kernel: NVRM: Xid (PCI:0000:3b:00): 79\nNCCL INFO\n"
FOUND = [(0, TEXT.index(b"Xid") + 3), (1, TEXT.index(b"NCCL") + 4)]
SOURCE_ARGS = (EXPRS, range(2), [0, 0])


def compiled() -> Any:
    return hscache.compiled(HS, *SOURCE_ARGS)


def matches(db: Any) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    db.scan(TEXT, match_event_handler=lambda i, _f, to, _fl, _c: found.append((i, to)))
    return sorted(found)


def db_path(root: Path) -> Path:
    source = hscache._source(HS, *SOURCE_ARGS, HS.HS_MODE_BLOCK)
    return root / "hyperscan" / hscache._name(source)


class Counted:
    """``hyperscan.Database``, counting the databases compiled."""

    made = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        Counted.made += 1
        return REAL_DATABASE(*args, **kwargs)


REAL_DATABASE = HS.Database if HS is not None else None


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(hscache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def counted(monkeypatch) -> type[Counted]:
    Counted.made = 0
    monkeypatch.setattr(HS, "Database", Counted)
    return Counted


def test_a_link_at_the_path_is_not_followed_and_is_replaced(root, tmp_path, counted):
    compiled()
    path = db_path(root)
    elsewhere = tmp_path / "elsewhere.hsdb"
    path.rename(elsewhere)
    kept = elsewhere.read_bytes()
    path.symlink_to(elsewhere)  # (a good database, through a link)
    assert matches(compiled()) == FOUND
    assert counted.made == 2  # (compiled again, not read through the link)
    assert not path.is_symlink() and path.read_bytes() == kept
    assert elsewhere.read_bytes() == kept  # (the link's target untouched)


def test_a_fifo_at_the_path_does_not_block(root, counted):
    path = db_path(root)
    path.parent.mkdir(parents=True, mode=0o700)
    os.mkfifo(path)
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(10)  # (a read that waits on the FIFO fails the test, never hangs it)
    try:
        assert matches(compiled()) == FOUND
    finally:
        signal.alarm(0)
    assert counted.made == 1 and path.is_file()


def test_a_file_with_another_hard_link_is_not_loaded(root, tmp_path, counted):
    compiled()
    os.link(db_path(root), tmp_path / "second-name")
    assert matches(compiled()) == FOUND
    assert counted.made == 2


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_file_another_user_owns_is_not_loaded(root, counted):
    compiled()
    os.chown(db_path(root), 12345, 12345)
    assert matches(compiled()) == FOUND
    assert counted.made == 2


@pytest.mark.parametrize("mode", [0o777, 0o720, 0o702])
def test_nothing_is_written_into_a_folder_others_can_write_to(root, counted, mode):
    folder = db_path(root).parent
    folder.mkdir(parents=True)
    folder.chmod(mode)
    assert matches(compiled()) == FOUND
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a folder to another user needs root")
def test_nothing_is_written_into_a_folder_another_user_owns(root, counted):
    folder = db_path(root).parent
    folder.mkdir(parents=True, mode=0o700)
    os.chown(folder, 12345, 12345)
    assert matches(compiled()) == FOUND
    assert list(folder.iterdir()) == []


def test_the_folder_and_files_are_private(root):
    compiled()
    path = db_path(root)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600
