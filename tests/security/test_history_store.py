"""The history store as root from prologs and cron, many at once: private modes, no
writing through a planted link, a corrupt file moved aside (by writes only), reads
that never write, and parallel first checks that all land."""

from __future__ import annotations

import io
import json
import os
import pwd
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.model import HostSummary, Result
from gputriage.state import history
from gputriage.state.history import (
    KEEP_CORRUPT,
    NoHistory,
    db_path,
    last_healthy,
    list_entries,
    record,
    record_check,
)

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)
NOBODY = 65534


def _result(host: str = "gpu-node-01") -> Result:
    return Result(host=HostSummary(hostname=host, kernel="6.8.0-45-generic", boot_id="b00t"))


def _history_cli(state: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["history", "--state-dir", str(state)], Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _recorded(state: Path, n: int = 2) -> Path:
    for i in range(n):
        assert record_check(state, _result(), T0 + timedelta(minutes=i)) == []
    return db_path(state)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --- permissions and planted links ------------------------------------------------------

def test_state_dir_and_database_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        db = _recorded(tmp_path / "var" / "state")
    finally:
        os.umask(old)
    assert _mode(db.parent) == 0o700
    assert _mode(db) == 0o600
    for side in db.parent.glob("history.sqlite-*"):
        assert _mode(side) & 0o077 == 0, side


def test_a_symlink_at_the_database_path_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_bytes(b"root-owned file another user wants overwritten\n")
    db_path(state).symlink_to(victim)
    problems = record_check(state, _result(), T0)
    assert len(problems) == 1 and "symbolic link" in problems[0]
    assert victim.read_bytes() == b"root-owned file another user wants overwritten\n"
    assert sorted(p.name for p in state.iterdir()) == ["history.sqlite"]


def test_a_symlinked_state_dir_is_refused(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    (tmp_path / "state").symlink_to(real)
    problems = record_check(tmp_path / "state", _result(), T0)
    assert len(problems) == 1 and "symbolic link" in problems[0]
    assert list(real.iterdir()) == []


def test_a_symlink_at_the_wal_path_is_refused(tmp_path):
    db = _recorded(tmp_path / "state", 1)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    wal = Path(f"{db}-wal")
    wal.unlink(missing_ok=True)
    wal.symlink_to(victim)
    [problem] = record_check(db.parent, _result(), T0)
    assert "symbolic link" in problem and victim.read_text() == "keep\n"


def test_a_state_dir_that_is_a_file_is_refused(tmp_path):
    state = tmp_path / "state"
    state.write_text("not a directory\n")
    [problem] = record_check(state, _result(), T0)
    assert "not a directory" in problem
    assert state.read_text() == "not a directory\n"


def test_a_fifo_at_the_database_path_is_refused_at_once(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(db_path(state))
    start = time.monotonic()
    [problem] = record_check(state, _result(), T0)
    assert time.monotonic() - start < 2.0
    assert "not a regular file" in problem


def test_a_hard_linked_database_is_refused(tmp_path):
    db = _recorded(tmp_path / "state", 1)
    os.link(db, tmp_path / "planted-link")
    [problem] = record_check(db.parent, _result(), T0)
    assert "hard links" in problem


def test_a_state_dir_others_can_write_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    [problem] = record_check(state, _result(), T0)
    assert "writable by other users" in problem
    assert not db_path(state).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_a_state_dir_owned_by_another_user_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, NOBODY)
    [problem] = record_check(state, _result(), T0)
    assert f"owned by uid {NOBODY}" in problem
    assert not db_path(state).exists()


def test_a_refusal_is_one_stderr_line_and_never_fails_the_check(tmp_path):
    from fakehost import FakeHost

    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    (tmp_path / "state").symlink_to(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["check", "--state-dir", str(tmp_path / "state")],
                Environment(stdout=out, stderr=err, host=host))
    assert code == 0
    [line] = err.getvalue().splitlines()
    assert line.startswith("gputriage: history not recorded: ") and "symbolic link" in line


# --- a corrupt database -----------------------------------------------------------------

def _corrupt(db: Path, fill: bytes = b"this is not a database\n") -> bytes:
    data = fill * 200
    db.write_bytes(data)
    Path(f"{db}-shm").unlink(missing_ok=True)
    return data


def _clock(monkeypatch, start: datetime) -> list[datetime]:
    now = [start]
    monkeypatch.setattr(history, "_utcnow", lambda: now[0])
    return now


def test_a_corrupt_database_is_moved_aside_and_a_fresh_one_started(tmp_path, monkeypatch):
    _clock(monkeypatch, datetime(2026, 12, 2, 4, 5, 6, tzinfo=timezone.utc))
    state = tmp_path / "state"
    db = _recorded(state)
    garbage = _corrupt(db)
    Path(f"{db}-wal").write_bytes(b"stale wal frames")
    notices: list[str] = []
    assert record_check(state, _result(), T0 + timedelta(hours=1), notices=notices) == []
    aside = state / "history.sqlite.corrupt-20261202T040506Z"
    assert notices == [f"{db}: file is not a database (corrupt history): moved it to {aside} "
                       "and started a new history"]
    assert aside.read_bytes().startswith(garbage[:4096])
    # the stale -wal went with it (or into it): never replayed into the new database
    assert b"stale wal frames" not in b"".join(p.read_bytes() for p in state.glob("history.*")
                                               if "corrupt" not in p.name)
    [entry] = list_entries(state)
    assert entry.time == "2026-12-01T04:00:00+00:00"
    assert _mode(db) == 0o600


def test_a_corrupt_copy_is_never_overwritten_and_only_a_few_are_kept(tmp_path, monkeypatch):
    now = _clock(monkeypatch, datetime(2026, 12, 2, 4, 5, 6, tzinfo=timezone.utc))
    state = tmp_path / "state"
    db = _recorded(state, 1)
    taken = state / "history.sqlite.corrupt-20261202T040506Z"
    taken.write_bytes(b"an earlier copy")
    for i in range(KEEP_CORRUPT + 2):
        _corrupt(db, f"garbage {i}\n".encode())
        notices: list[str] = []
        assert record_check(state, _result(), T0, notices=notices) == []
        assert len(notices) == 1
        if i == 0:
            assert taken.read_bytes() == b"an earlier copy"
            assert f"{taken}.1" in notices[0]
        now[0] += timedelta(seconds=1)
    kept = sorted(p.name for p in state.glob("history.sqlite.corrupt-*"))
    assert kept == ["history.sqlite.corrupt-20261202T040508Z",
                    "history.sqlite.corrupt-20261202T040509Z",
                    "history.sqlite.corrupt-20261202T040510Z"]
    assert (state / kept[-1]).read_bytes().startswith(b"garbage 4\n")


def test_a_file_already_replaced_by_another_process_is_not_moved(tmp_path):
    db = _recorded(tmp_path / "state", 1)
    assert history._move_aside(db.parent, (0, 0), 1.0) is None  # not the file found corrupt
    assert list(db.parent.glob("*.corrupt-*")) == []
    assert len(list_entries(db.parent)) == 1


def test_reading_a_corrupt_database_is_one_line_exit_66_and_moves_nothing(tmp_path):
    state = tmp_path / "state"
    db = _recorded(state)
    _corrupt(db)
    before = sorted(p.name for p in state.iterdir())
    code, out, err = _history_cli(state)
    assert code == EXIT_INPUT and not out
    [line] = err.splitlines()
    assert line.startswith("gputriage: input error: ") and "not a database" in line
    assert sorted(p.name for p in state.iterdir()) == before


@pytest.mark.slow  # 4 checks, each a process
def test_parallel_checks_on_a_corrupt_database_move_it_aside_once(tmp_path):
    state = tmp_path / "state"
    _corrupt(_recorded(state, 1))
    results = _parallel_checks(state, 4)
    assert all(r["problems"] == [] for r in results), results
    assert sum(len(r["notices"]) for r in results) == 1
    assert len(list(state.glob("history.sqlite.corrupt-*"))) == 1
    assert len(list_entries(state)) == 4


# --- parallel first checks, and a writer killed mid-write ---------------------------------

_CHILD = textwrap.dedent("""
    import json, sys, time
    from datetime import datetime, timezone
    from gputriage.state.history import record_check
    from gputriage.model import HostSummary, Result
    state, i, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    res = Result(host=HostSummary(hostname=f"node-{i:02d}", kernel="6.8"))
    while time.time() < start + i * 0.0015:  # all at once, a hair apart
        pass
    notices = []
    problems = record_check(state, res, datetime(2026, 12, 1, tzinfo=timezone.utc),
                            notices=notices)
    print(json.dumps({"problems": problems, "notices": notices}))
""")


def _parallel_checks(state: Path, n: int) -> list[dict]:
    start = time.time() + 2.0  # after every child has imported gputriage
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(state), str(i), str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and not err, err
        results.append(json.loads(out))
    return results


@pytest.mark.slow  # 8 checks, each a process
def test_parallel_first_checks_all_land_without_errors(tmp_path):
    state = tmp_path / "empty"
    results = _parallel_checks(state, 8)
    assert all(r == {"problems": [], "notices": []} for r in results), results
    hosts = sorted(e.host for e in list_entries(state))
    assert hosts == [f"node-{i:02d}" for i in range(8)]


def test_a_reader_racing_schema_creation_sees_an_empty_history(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    creator = sqlite3.connect(db_path(state), isolation_level=None)
    try:
        creator.execute("PRAGMA journal_mode = WAL")
        creator.execute("BEGIN IMMEDIATE")
        creator.execute("CREATE TABLE checks (id INTEGER PRIMARY KEY)")  # not yet committed
        assert last_healthy(state, "gpu-node-01") is None
        assert list_entries(state) == []
        code, out, err = _history_cli(state)
        assert code == 0 and "no checks recorded" in out and not err
    finally:
        creator.execute("ROLLBACK")
        creator.close()


def test_a_check_waits_for_another_creating_the_schema(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    creator = sqlite3.connect(db_path(state), isolation_level=None, check_same_thread=False)
    creator.execute("BEGIN IMMEDIATE")
    for statement in history._SCHEMA.split(";"):
        if statement.strip():
            creator.execute(statement)
    creator.execute(f"PRAGMA user_version = {history.SCHEMA_VERSION}")
    timer = threading.Timer(0.3, lambda: creator.execute("COMMIT"))
    timer.start()
    try:
        assert record_check(state, _result(), T0) == []
    finally:
        timer.join()
        creator.close()
    assert len(list_entries(state)) == 1


_WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timedelta, timezone
    from gputriage.state.history import record
    from gputriage.model import HostSummary, Result
    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    for i in range(100000):
        record(sys.argv[1], Result(host=HostSummary(hostname=f"n{i}", kernel="x" * 2000)),
               t0 + timedelta(seconds=i))
""")


def test_a_writer_killed_mid_write_leaves_a_readable_database(tmp_path):
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(state)],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if db_path(state).is_file() and len(list_entries(state)) >= 20:
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    seen = len(list_entries(state))
    assert seen >= 20
    assert record_check(state, _result(), T0) == []
    assert len(list_entries(state)) == seen + 1


# --- reading never writes, and reads a database in a read-only place --------------------

def test_listing_changes_nothing_and_a_missing_database_is_no_history(tmp_path):
    with pytest.raises(NoHistory):
        list_entries(tmp_path / "none")
    assert not (tmp_path / "none").exists()
    db = _recorded(tmp_path / "state")
    content = db.read_bytes()
    assert len(list_entries(db.parent)) == 2
    assert db.read_bytes() == content  # WAL may leave its -wal/-shm, nothing else
    assert {p.name for p in db.parent.iterdir()} <= {
        "history.sqlite", "history.sqlite-wal", "history.sqlite-shm"}


def test_read_only_place_falls_back_to_an_immutable_read(tmp_path, monkeypatch):
    """Simulated: the read-only open fails the way WAL does where no -shm can be made."""
    _recorded(tmp_path / "state", 3)
    real_connect = sqlite3.connect
    opened: list[str] = []

    def connect(database, *args, **kwargs):
        opened.append(str(database))
        if str(database).endswith("?mode=ro"):
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(history.sqlite3, "connect", connect)
    code, out, err = _history_cli(tmp_path / "state")
    assert code == 0 and len(out.splitlines()) == 4
    [note] = err.splitlines()
    assert note.startswith("gputriage: note: ") and "latest checks may be missing" in note
    assert [u.rsplit("?", 1)[1] for u in opened] == ["mode=ro", "immutable=1"]


def _world_readable_copy() -> Path:
    """A recorded history in a directory every user can enter (read-only for them)."""
    top = Path(tempfile.mkdtemp(prefix="gputriage-ro-"))
    top.chmod(0o755)
    state = top / "state"
    state.mkdir(mode=0o755)
    _recorded(state, 3)
    for side in state.glob("history.sqlite-*"):
        side.unlink()  # as after the last writer closed cleanly
    db_path(state).chmod(0o644)
    state.chmod(0o555)
    return state


def _as_nobody(state: Path) -> tuple[int, str, str]:
    """``gputriage history`` in a forked child running as uid 65534 (not root)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with os.fdopen(write_end, "w") as pipe:
                json.dump(_history_cli(state), pipe)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data
    code, out, err = json.loads(data)
    return code, out, err


def test_a_database_in_a_read_only_place_is_read_for_real():
    """Really read-only: as root, read as uid 65534 (root ignores file modes); as
    another user, the read-only directory is enough."""
    if os.geteuid() == 0:
        try:
            pwd.getpwuid(NOBODY)
        except KeyError:
            pytest.skip("no uid 65534 to read as")
    state = _world_readable_copy()
    try:
        code, out, err = _as_nobody(state) if os.geteuid() == 0 else _history_cli(state)
        assert code == 0, err
        assert len(out.splitlines()) == 4 and "gpu-node-01" in out
        [note] = err.splitlines()
        assert "latest checks may be missing" in note
        assert sorted(p.name for p in state.iterdir()) == ["history.sqlite"]
    finally:
        state.chmod(0o755)
        for path in sorted(state.parent.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        state.parent.rmdir()


def test_record_is_public_and_moves_aside_too(tmp_path):
    db = _recorded(tmp_path / "state", 1)
    _corrupt(db)
    notices: list[str] = []
    entry = record(db.parent, _result(), T0, notices=notices)
    assert entry.id == 1 and len(notices) == 1
