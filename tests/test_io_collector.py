"""The garbage collector's settings in gputriage's processes (gputriage.io.collector):
collected less often in the CLI and in forked workers, which also leave what they
inherited out of every collection."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest

from gputriage.io import collector
from gputriage.io.forkpool import ForkWorkers


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def _worker_settings(_index: int) -> tuple[int, int, int]:
    young, middle, old = gc.get_threshold()
    return young, gc.get_freeze_count(), middle * 100 + old


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers: Linux")
def test_a_worker_collects_less_and_never_what_it_inherited(thresholds, monkeypatch):
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    gc.set_threshold(700, 10, 10)
    got = list(ForkWorkers(2).run(_worker_settings, 3))
    assert [young for young, _, _ in got] == [collector.YOUNG_OBJECTS] * 3
    assert all(frozen > 1000 for _, frozen, _ in got)  # the modules it was forked with
    assert {rest for _, _, rest in got} == {1010}  # the older generations as they were
    assert gc.get_threshold() == (700, 10, 10)  # the caller's own are left alone


def test_collect_less_never_collects_more_often_nor_turns_collection_on(thresholds):
    gc.set_threshold(700, 5, 7)
    collector.collect_less()
    assert gc.get_threshold() == (collector.YOUNG_OBJECTS, 5, 7)
    gc.set_threshold(10 * collector.YOUNG_OBJECTS, 5, 7)
    collector.collect_less()
    assert gc.get_threshold() == (10 * collector.YOUNG_OBJECTS, 5, 7)
    gc.set_threshold(0)  # collection turned off (set_threshold(0) is how)
    collector.collect_less()
    assert gc.get_threshold()[0] == 0


def test_the_cli_collects_less():
    probe = ("import gc, sys; from gputriage import cli; sys.argv = ['gputriage', '--help'];\n"
             "try:\n    cli.run()\nexcept SystemExit:\n    pass\n"
             "sys.__stderr__.write(str(gc.get_threshold()[0]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stderr.strip().endswith(str(collector.YOUNG_OBJECTS))
