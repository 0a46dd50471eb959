"""What a user names on the command line is opened under one policy (gputriage.io.inputs):
devices are refused, pipes, FIFOs and stdin are read once under byte and time budgets,
binary data stops the read at its first block, and nothing waits without a bound."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pty
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

import gputriage
from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.errors import InputError
from gputriage.io import inputs

XID79 = (b"[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
         b"GPU has fallen off the bus.\n")
FILLER = b"[ 4255.000000] usb 1-1: new high-speed USB device number 3 using xhci_hcd\n" * 512
EXIT_STATUSES = {0, 1, 2, 3}
COMMANDS = ("analyze", "logs", "nccl", "diff")
SRC = str(Path(gputriage.__file__).resolve().parents[1])


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def run(command: str, *paths: str) -> tuple[int, str, str, float]:
    """``gputriage COMMAND [--json] PATH...`` in-process, with its wall time."""
    json_opt = () if command == "diff" else ("--json",)
    start = time.monotonic()
    code, out, err = cli(command, *json_opt, *paths)
    return code, out, err, time.monotonic() - start


def problems(command: str, out: str) -> list[str]:
    """The reading problems a command's JSON output lists."""
    doc = json.loads(out)
    return doc["scan"]["problems"] if command == "logs" else doc["unreadable"]


@pytest.fixture
def budgets(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    def small(**kw: float) -> None:
        monkeypatch.setattr(inputs, "BUDGETS", inputs.Budgets(**kw))
    return small


Writer = Callable[[io.BufferedWriter, threading.Event], None]


@contextmanager
def fifo(tmp_path: Path, name: str, payload: bytes | Writer | None) -> Iterator[str]:
    """A named FIFO and a thread writing ``payload`` to it (None: no writer at all)."""
    path = tmp_path / name
    os.mkfifo(path)
    done = threading.Event()

    def write() -> None:
        try:
            with open(path, "wb") as fh:  # blocks until a reader opens the FIFO
                if isinstance(payload, bytes):
                    fh.write(payload)
                else:
                    payload(fh, done)
        except OSError:
            pass  # the reader went away (EPIPE): what a stopped read does
    thread = threading.Thread(target=write, daemon=True)
    if payload is not None:
        thread.start()
    try:
        yield str(path)
    finally:
        done.set()
        if thread.is_alive():  # a writer still waiting for a reader: let it go
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            thread.join(5)
        assert not thread.is_alive()


def endless(fh: io.BufferedWriter, done: threading.Event) -> None:
    fh.write(XID79)
    while not done.is_set():
        fh.write(FILLER)


def random_bytes(fh: io.BufferedWriter, done: threading.Event) -> None:
    while not done.is_set():
        fh.write(os.urandom(1 << 16))


def stalls(fh: io.BufferedWriter, done: threading.Event) -> None:
    fh.write(XID79 + FILLER)
    fh.flush()
    done.wait(10)


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def gputriage_proc(argv: list[str], stdin: int | IO[bytes] | None, budgets: str = "",
                   **kw: Any) -> subprocess.Popen[bytes]:
    """``gputriage ARGV`` in a child process (optionally under smaller budgets)."""
    code = ("import sys\nimport gputriage.io.inputs as i\n"
            f"i.BUDGETS = i.Budgets({budgets})\n"
            "from gputriage.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    return subprocess.Popen([sys.executable, "-c", code, *argv], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(), **kw)


# --- devices -----------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_refused_at_once(command, device):
    paths = (device, device) if command == "diff" else (device,)
    code, out, err, took = run(command, *paths)
    assert code == EXIT_INPUT and out == "" and took < 3
    assert err == f"gputriage: input error: {device}: a character device, not a file\n"


def test_a_character_device_on_stdin_is_refused():
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run([sys.executable, "-m", "gputriage", "analyze", "-"], stdin=zero,
                              capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == EXIT_INPUT
    assert proc.stderr == b"gputriage: input error: <stdin>: a character device, not a file\n"


def test_a_socket_is_refused_and_a_directory_is_not_a_log(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(InputError, match="s: a socket, not a file$"):
            inputs.open_input(str(tmp_path / "s"))
    finally:
        sock.close()
    code, _, err, _ = run("logs", str(tmp_path))
    assert code == EXIT_INPUT and err.endswith(": a directory, not a log file\n")


def test_a_terminal_on_stdin_may_be_read():
    main_fd, term = pty.openpty()
    try:
        proc = gputriage_proc(["logs", "-"], stdin=term)
        os.write(main_fd, XID79 + b"\x04")  # a line, then end-of-file (^D)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(term)
        os.close(main_fd)
    assert proc.returncode == 2, err
    assert b"Xid 79" in out


# --- endless and binary streams ----------------------------------------------------------

@pytest.mark.slow  # 2 MiB through a pipe, per command
@pytest.mark.parametrize("command", ["analyze", "logs", "nccl"])
def test_an_endless_pipe_stops_at_the_stream_budget(tmp_path, budgets, command):
    budgets(stream_bytes=2 << 20)
    with fifo(tmp_path, "endless", endless) as path:
        code, out, err, _ = run(command, path)
    assert code in EXIT_STATUSES, err
    said = [p for p in problems(command, out) if "stream budget" in p]
    assert said and said[0].startswith(f"{path}: stopped reading at 2.0 MiB"), said


@pytest.mark.slow  # 1 MiB through a child's stdin
def test_endless_stdin_stops_at_the_stream_budget():
    yes = subprocess.Popen(["yes", XID79.decode().strip()], stdout=subprocess.PIPE)
    try:
        proc = gputriage_proc(["analyze", "--json", "-"], stdin=yes.stdout,
                              budgets="stream_bytes=1 << 20")
        yes.stdout.close()
        out, err = proc.communicate(timeout=120)
    finally:
        yes.kill()
        yes.wait()
    assert proc.returncode == 2, err
    assert any(p.startswith("<stdin>: stopped reading at 1.0 MiB (the stream budget)")
               for p in json.loads(out)["unreadable"])


@pytest.mark.slow  # 1 MiB inflated, per command
def test_a_decompression_bomb_stops_at_the_stream_budget(tmp_path, budgets):
    budgets(stream_bytes=1 << 20)
    path = tmp_path / "kern.log.gz"
    path.write_bytes(gzip.compress(XID79 + FILLER * 200))
    for command in ("analyze", "logs", "nccl"):
        code, out, err, _ = run(command, str(path))
        assert code in EXIT_STATUSES, err
        assert f"{path}: stopped decompressing at 1.0 MiB (the stream budget); the rest " \
               "was not read" in problems(command, out), command


@pytest.mark.parametrize("command", COMMANDS)
def test_a_pipe_of_random_bytes_is_binary_data_at_once(tmp_path, command):
    with fifo(tmp_path, "a", random_bytes) as a, fifo(tmp_path, "b", random_bytes) as b:
        code, out, err, took = run(command, *((a, b) if command == "diff" else (a,)))
    assert code == EXIT_INPUT and out == "" and err.count("\n") == 1
    assert f"{a}: binary data" in err and took < 5


def test_random_bytes_on_stdin_are_binary_data_at_once():
    cat = subprocess.Popen(["cat", "/dev/urandom"], stdout=subprocess.PIPE)
    try:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "gputriage", "analyze", "-"],
                              stdin=cat.stdout, capture_output=True, timeout=60,
                              env=subprocess_env())
        took = time.monotonic() - start
    finally:
        cat.kill()
        cat.wait()
        cat.stdout.close()
    assert proc.returncode == EXIT_INPUT and took < 10
    assert proc.stderr == b"gputriage: input error: <stdin>: binary data, not a text output\n"


def test_nuls_through_a_pipe_are_binary_data(tmp_path):
    with fifo(tmp_path, "zeros", b"\0" * (1 << 20)) as path:
        code, _, err, _ = run("logs", path)
    assert code == EXIT_INPUT and err.endswith(f"{path}: binary data, not a text log\n")


# --- pipes and FIFOs are read once, and never wait without a bound -----------------------

def test_logs_reads_a_fifo_once_from_its_first_byte(tmp_path):
    with fifo(tmp_path, "kern", XID79) as path:
        code, out, err, _ = run("logs", path)
    assert code == 2, err
    doc = json.loads(out)
    assert [f["id"] for f in doc["findings"] if f["severity"] == "critical"] == ["xid.79"]
    assert doc["scan"]["lines"] == 1


def test_logs_reads_dev_stdin_from_its_first_byte():
    proc = gputriage_proc(["logs", "/dev/stdin"], stdin=subprocess.PIPE)
    out, err = proc.communicate(XID79, timeout=60)
    assert proc.returncode == 2, err
    assert b"CRITICAL" in out and b"Xid 79" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_without_a_writer_is_a_bounded_wait(tmp_path, budgets, command):
    budgets(idle_s=0.3)
    with fifo(tmp_path, "nobody", None) as path:
        code, out, err, took = run(command, *((path, path) if command == "diff" else (path,)))
    assert code == EXIT_INPUT and out == "" and took < 5
    assert err == (f"gputriage: input error: {path}: no data for 0.3 s (the idle budget; "
                   "a FIFO no writer opened?); nothing read\n")


@pytest.mark.parametrize("command", ["analyze", "logs", "nccl"])
def test_a_pipe_that_stalls_is_stopped_and_what_came_is_read(tmp_path, budgets, command):
    budgets(idle_s=0.3)
    with fifo(tmp_path, "stalls", stalls) as path:
        code, out, err, took = run(command, path)
    assert code == 2 and took < 5, err
    assert any(p.startswith(f"{path}: no data for 0.3 s (the idle budget); stopped reading")
               for p in problems(command, out))


def _result_json(tmp_path: Path, text: bytes) -> bytes:
    path = tmp_path / "side.log"
    path.write_bytes(text)
    code, out, _ = cli("analyze", "--json", str(path))
    assert code == 2
    return out.encode()


def test_diff_reads_fifos_of_result_json_and_of_pasted_text(tmp_path):
    doc = _result_json(tmp_path, XID79)
    with fifo(tmp_path, "a", doc) as a, fifo(tmp_path, "b", XID79 + FILLER) as b:
        code, out, err = cli("diff", "--json", a, b)
    assert code == 0, err
    diff = json.loads(out)
    assert [f["id"] for f in diff["findings"]["still"]] == ["xid.79"]
    xid31 = (b"[ 5100.000001] NVRM: Xid (PCI:0000:18:00): 31, pid=4411, name=python, Ch "
             b"00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3\n")
    with fifo(tmp_path, "c", xid31) as c, fifo(tmp_path, "d", doc) as d:
        code, out, err = cli("diff", "--json", c, d)
    assert code == 1, err
    diff = json.loads(out)
    assert [f["id"] for f in diff["findings"]["new"]] == ["xid.79"]


def test_diff_reads_a_result_json_from_stdin(tmp_path):
    doc = _result_json(tmp_path, XID79)
    (tmp_path / "b.json").write_bytes(doc)
    proc = gputriage_proc(["diff", "-", str(tmp_path / "b.json")], stdin=subprocess.PIPE)
    out, err = proc.communicate(b"  \n" + doc, timeout=60)
    assert proc.returncode == 0, err
    assert out.startswith(b"A: <stdin>\n")


def test_open_input_kinds(tmp_path):
    (tmp_path / "f").write_text("x\n")
    with inputs.open_input(str(tmp_path / "f")) as inp:
        assert inp.kind == inputs.FILE and inp.fh.read() == b"x\n"
    assert inputs.open_input(str(tmp_path)).kind == inputs.DIR
    os.mkfifo(tmp_path / "p")
    start = time.monotonic()
    with inputs.open_input(str(tmp_path / "p")) as inp:  # no writer: opening never waits
        assert inp.kind == inputs.STREAM and time.monotonic() - start < 1


def test_a_pipe_that_drips_for_ever_stops_at_the_time_budget(tmp_path, budgets):
    def drips(fh: io.BufferedWriter, done: threading.Event) -> None:
        fh.write(XID79)
        while not done.wait(0.02):
            fh.write(FILLER[:80])
            fh.flush()

    budgets(stream_s=0.5)
    with fifo(tmp_path, "drips", drips) as path:
        code, out, err, took = run("logs", path)
    assert code == 2 and took < 5, err
    assert any(p.startswith(f"{path}: still open after 0.5 s (the time budget); stopped "
                            "reading after ") for p in problems("logs", out))


# --- small documents the user names: one policy too (issue 29) ---------------------------

MANIFEST = (b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
            b"  - name: c\n    image: i\n    resources: {limits: {nvidia.com/gpu: 1}}\n")
EXPECT = b"[gpu]\ncount = 8\n"


@pytest.fixture(scope="module")
def crit(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("named") / "crit"
    assert cli("scenario", "build", "gpu-fallen-off-bus", "-o", str(out))[0] == 0
    return str(out)


def _document_readers(path: str, crit: str) -> dict[str, list[str]]:
    """Each command that reads a whole small document the user names at ``path``."""
    return {
        "check --expect": ["check", "--snapshot", crit, "--no-history", "-q", "--expect", path],
        "analyze --expect": ["analyze", "-q", "--expect", path, crit],
        "k8s lint": ["k8s", "lint", "-q", path],
        "weights --config": ["weights", "--params", "7B", "--config", path],
        "weights MODEL": ["weights", path],  # a FIFO named config.json
    }


def bounded_cli(fifo_path: str, *argv: str, seconds: float = 5.0) -> tuple[int, str, str]:
    """``cli(*argv)`` in a thread that must end within ``seconds``; a reader still
    blocked on the FIFO then is let go (a writer opens and closes it) and the test fails."""
    box: dict[str, tuple[int, str, str]] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", cli(*argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo_path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"{' '.join(argv)}: still waiting after {seconds} s")
    return box["r"]


READERS = ("check --expect", "analyze --expect", "k8s lint", "weights --config",
           "weights MODEL")


@pytest.mark.parametrize("reader", READERS)
def test_a_named_document_fifo_without_a_writer_is_a_bounded_wait(tmp_path, budgets, crit,
                                                                   reader):
    budgets(idle_s=0.3)
    with fifo(tmp_path, "config.json", None) as path:
        code, out, err = bounded_cli(path, *_document_readers(path, crit)[reader])
    assert (code, out) == (EXIT_INPUT, "")
    assert err == (f"gputriage: input error: {path}: no data for 0.3 s (the idle budget; "
                   "a FIFO no writer opened?); nothing read\n")


@pytest.mark.parametrize("reader", READERS)
def test_a_named_document_device_is_refused_at_once(crit, reader):
    code, out, err = cli(*_document_readers("/dev/zero", crit)[reader])
    assert (code, out) == (EXIT_INPUT, "")
    assert err == "gputriage: input error: /dev/zero: a character device, not a file\n"


@pytest.mark.parametrize(("reader", "payload"), [("check --expect", EXPECT),
                                                 ("k8s lint", MANIFEST)])
def test_a_named_document_fifo_with_a_writer_is_read(tmp_path, crit, reader, payload):
    with fifo(tmp_path, "doc.yaml", payload) as path:
        code, out, err = cli(*_document_readers(path, crit)[reader])
    assert code in (0, 1, 2) and out, err  # judged


def test_a_document_cut_short_by_the_idle_budget_is_not_read(tmp_path, budgets, crit):
    def half(fh: io.BufferedWriter, done: threading.Event) -> None:
        fh.write(b"[gpu]\ncou")
        fh.flush()
        done.wait(10)

    budgets(idle_s=0.3)
    with fifo(tmp_path, "expect.toml", half) as path:
        code, out, err = bounded_cli(path, *_document_readers(path, crit)["check --expect"])
    assert (code, out) == (EXIT_INPUT, "")
    assert err.startswith(f"gputriage: input error: {path}: no data for 0.3 s (the idle "
                          "budget); stopped reading after 9 bytes") and err.count("\n") == 1
    assert err.endswith("not read as an expectations file\n")


@pytest.mark.slow  # a child waiting out the idle budget, per command
@pytest.mark.parametrize("argv", [["explain", "-"], ["k8s", "lint", "-"],
                                  ["analyze", "--expect", "-", "x"]])
def test_an_idle_stdin_is_given_up_after_the_idle_budget(argv):
    read_end, write_end = os.pipe()  # a writer that never writes nor closes
    try:
        start = time.monotonic()
        proc = gputriage_proc(argv, stdin=read_end, budgets="idle_s=0.3")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert proc.returncode == EXIT_INPUT and out == b"", err
    assert err == (b"gputriage: input error: <stdin>: no data for 0.3 s (the idle budget; "
                   b"a FIFO no writer opened?); nothing read\n")
    assert time.monotonic() - start < 30  # the interpreter's start, then 0.3 s


def test_a_kubeconfig_that_is_not_a_regular_file_is_refused_before_the_client_opens_it(
        tmp_path, monkeypatch):
    with fifo(tmp_path, "kubeconfig", None) as path:
        code, out, err = bounded_cli(path, "k8s", "status", "--kubeconfig", path)
    assert (code, out) == (EXIT_INPUT, "")
    assert err == f"gputriage: input error: {path}: a FIFO, not a kubeconfig file\n"
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}{os.pathsep}/dev/zero")
    code, out, err = cli("k8s", "status")
    assert err == "gputriage: input error: /dev/zero: a character device, not a kubeconfig file\n"
