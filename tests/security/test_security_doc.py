"""docs/security.md states the bounds the code has: each documented value of the
exporter, the clients and the small documents is read here from the constant that sets
it (a bound changed in one place and not the other fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.collect import k8s_api
from gputriage.commands import explain, k8s, npd
from gputriage.io import inputs, netbounds, safejson
from gputriage.parsers import expect
from gputriage.watch import httpd, server
from gputriage.watch import npd as plugin
from gputriage.weights import files

DOC = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")


def _row(first: str) -> list[str]:
    """The cells after the first of the table row whose first cell is ``first``."""
    rows = [line.strip("| ").split(" | ") for line in DOC.splitlines()
            if line.startswith(f"| {first} |")]
    assert len(rows) == 1, f"no single row {first!r} in docs/security.md"
    return rows[0][1:]


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,}"


def _s(seconds: float) -> str:
    return f"{seconds:g} s"


LIMITS = server.LIMITS


@pytest.mark.parametrize(("first", "says"), [
    ("open connections", [f"{LIMITS.max_connections}"]),
    ("accept queue", [f"{LIMITS.backlog:,} "]),
    ("request line", [_size(LIMITS.max_line_bytes), "414"]),
    ("request head", [f"{_size(LIMITS.max_head_bytes)}, {LIMITS.max_headers} header lines",
                      "431"]),
    ("a whole request head", [f"{_s(LIMITS.request_timeout_s)} from the connection", "408"]),
    ("idle keep-alive", [_s(LIMITS.idle_timeout_s)]),
    ("taking an answer", [_s(LIMITS.write_timeout_s)]),
    ("after a closing answer (an error, `Connection: close`, HTTP/1.0)",
     [f"{_s(LIMITS.linger_s)} or {_size(httpd._LINGER_BYTES)} read"]),
])
def test_the_exporter_table_is_the_servers_limits(first: str, says: list[str]) -> None:
    text = " | ".join(_row(first))
    assert all(part in text for part in says), (first, text, says)


def test_the_metrics_text_is_made_at_most_once_a_second_for_one_state() -> None:
    assert server.METRICS_REUSE_S == 1.0
    assert "else at most once a second" in _row("`/metrics` text")[0]


def test_the_client_tables_are_the_clients_bounds() -> None:
    npd_row = " | ".join(_row("`npd --from URL`"))
    assert f"{_s(npd.FETCH_TIMEOUT_S)} in all" in npd_row
    assert f"{_size(plugin.RESULT_MAX_BYTES)} of body" in npd_row
    assert f"{_size(plugin.RESULT_DECODE_BUDGET)} decoded" in npd_row
    k8s_row = " | ".join(_row("`k8s status`"))
    timeout = next(p for p in k8s.status.params if p.name == "timeout")
    assert timeout.default == k8s_api.DEFAULT_TIMEOUT_S
    assert f"`--timeout` ({_s(k8s_api.DEFAULT_TIMEOUT_S)})" in k8s_row
    assert f"{_size(k8s_api.PAGE_MAX_BYTES)} per page" in k8s_row
    assert f"{_size(k8s_api.PAGE_DECODE_BUDGET)} decoded per page" in k8s_row
    assert "a quarter of the `limit`" in k8s_row and k8s_api._SMALLER_PAGE == 4
    errors = " | ".join(_row("`k8s status` errors"))
    assert f"{_size(k8s_api.ERROR_MAX_BYTES)} of an error answer" in errors
    assert f"cut to {k8s_api.MESSAGE_MAX_CHARS} characters" in errors
    assert (f"({netbounds._PER_VALUE} bytes per `[ {{ , :` and {netbounds._PER_BYTE} "
            "per byte") in " ".join(DOC.split())


def test_the_reading_budgets_are_the_input_policys() -> None:
    assert _row("stream bytes (`STREAM_MAX_BYTES`)")[0] == _size(inputs.STREAM_MAX_BYTES)
    assert _row("idle stream (`IDLE_TIMEOUT_S`)")[0] == _s(inputs.IDLE_TIMEOUT_S)
    assert _row("stream time (`STREAM_MAX_S`)")[0] == f"{inputs.STREAM_MAX_S / 3600:g} h"
    assert _row("sniff (`SNIFF_BYTES`)")[0] == _size(inputs.SNIFF_BYTES)
    assert _row("JSON nesting (`safejson.MAX_DEPTH`)")[0] == f"{safejson.MAX_DEPTH} levels"
    prose = " ".join(DOC.split())
    for said in (f"`check`/`analyze`/`collect --expect` ({_size(expect.MAX_BYTES)})",
                 f"`k8s lint` files and `-` ({_size(k8s.MAX_MANIFEST_BYTES)} in all)",
                 f"index ({files.MAX_JSON_BYTES // 10**6} MB)",
                 f"`explain -` (its first {_size(explain.STDIN_LIMIT)})",
                 f"a file over {_size(k8s.MAX_KUBECONFIG_BYTES)}, is exit 66",
                 f"nested past {expect.MAX_DEPTH} levels is refused"):
        assert said in prose, said


def test_the_compiled_database_cache_is_as_documented() -> None:
    from gputriage.text import hscache

    prose = " ".join(DOC.split())
    for said in (f"is at most {_size(hscache._MAX_FILE)}",
                 f"The {hscache.KEEP} most recently written are kept",
                 f"`${hscache.CACHE_DIR_ENV}`", f"`{hscache.ROOT_CACHE_DIR}` as root"):
        assert said in prose, said
