"""Issue 32 part A: the CLI is one tool. Every report or list takes -q and --json; an
output path never creates folders; a mistyped command gets one "did you mean" line; an
input gputriage does not recognise gets one short line pointing at the formats."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fakehost import FakeHost

from gputriage.cli import EXIT_USAGE, Environment, main
from gputriage.scenarios import build_scenario


def run(*argv: str, host: FakeHost | None = None, stdin: str | None = None
        ) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        import sys

        saved = sys.stdin
        sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(argv), Environment(stdout=out, stderr=err, host=host))
    finally:
        if stdin is not None:
            sys.stdin = saved
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return build_scenario("healthy-8xh100", tmp_path_factory.mktemp("sc") / "healthy")


def _host(tmp_path: Path) -> FakeHost:
    host = FakeHost(tmp_path / "root")
    host.write("/proc/modules", "ext4 1 0 - Live 0x0\n")
    return host


# -- output paths never create folders -------------------------------------------------
OUTPUTS = {
    "collect": lambda p, _: ["collect", "-o", p],
    "collect-dir": lambda p, _: ["collect", "-o", p.removesuffix(".tar.gz")],
    "check-keep": lambda p, _: ["check", "--no-history", "--keep", p],
    "scenario-build": lambda p, _: ["scenario", "build", "healthy-8xh100", "-o", p],
    "fleet-demo": lambda p, _: ["fleet", "--demo", p.removesuffix(".tar.gz")],
    "expect": lambda p, snap: ["expect", "--from", snap, "-o", p.replace(".tar.gz", ".toml")],
    "analyze-html": lambda p, snap: ["analyze", snap, "-q", "--html", p + ".html"],
    "k8s-save": lambda p, _: ["k8s", "status", "--save", p],
}


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_an_output_path_never_creates_its_folder(tmp_path, healthy, name):
    missing = tmp_path / "missing"
    argv = OUTPUTS[name](str(missing / "deeper" / "x.tar.gz"), str(healthy))
    code, _, err = run(*argv, host=_host(tmp_path))
    assert code == EXIT_USAGE, err
    assert err.count("\n") == 1 and "no such directory" in err
    assert not missing.exists()


def test_an_output_in_a_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x\n")
    out = tmp_path / "file" / "x.tar.gz"
    code, _, err = run("scenario", "build", "healthy-8xh100", "-o", str(out))
    assert code == EXIT_USAGE and "not a directory" in err and err.count("\n") == 1
