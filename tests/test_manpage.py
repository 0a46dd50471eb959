"""The man page stays what the CLI says (regenerated == committed), and shell
completion scripts generate, as docs/cli.md promises."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "manpage.py"
PAGE = ROOT / "docs" / "gputriage.1"


def _tool():
    spec = importlib.util.spec_from_file_location("manpage_tool", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_man_page_is_what_the_cli_generates():
    assert PAGE.read_text(encoding="utf-8") == _tool().render(), (
        "docs/gputriage.1 is out of date: run python tools/manpage.py")


def test_man_page_has_every_command_and_option():
    import click

    from gputriage.cli import cli

    page = _tool().render()
    assert page.startswith(".TH GPUTRIAGE 1 ")
    ctx = click.Context(cli, info_name="gputriage")
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None, name
        assert f'.SS "gputriage {name.replace("-", chr(92) + "-")} ' in page, name
        for param in command.params:
            for opt in getattr(param, "opts", ()):
                if opt.startswith("-"):
                    assert opt.replace("-", "\\-") in page, (name, opt)
    assert '.SS "gputriage scenario build ' in page  # a group's subcommands too


def test_man_page_is_valid_roff():
    text = _tool().render()
    body = [line for line in text.splitlines() if line and not line.startswith(".")]
    assert all(not line.startswith("'") for line in body)
    assert "\n-" not in text and " -" not in " ".join(body).replace("\\-", "")


def test_check_mode_reports_a_stale_page(tmp_path):
    tool = _tool()
    stale = tmp_path / "gputriage.1"
    stale.write_text(".TH OLD\n", encoding="utf-8")
    assert tool.main(["--check", "--out", str(stale)]) == 1
    assert tool.main(["--out", str(stale)]) == 0
    assert tool.main(["--check", "--out", str(stale)]) == 0


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputriage"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60, check=False)


@pytest.mark.parametrize("shell, marker", [
    ("bash", "complete -o nosort -F _gputriage_completion gputriage"),
    ("zsh", "compdef _gputriage_completion gputriage"),
    ("fish", "complete --no-files --command gputriage"),
])
def test_completion_script_generates(shell, marker):
    done = _complete({"_GPUTRIAGE_COMPLETE": f"{shell}_source"})
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout


def test_completion_answers_commands_and_choices():
    done = _complete({"_GPUTRIAGE_COMPLETE": "bash_complete",
                      "COMP_WORDS": "gputriage sch", "COMP_CWORD": "1"})
    assert done.returncode == 0 and done.stdout.split() == ["plain,schema"]
    done = _complete({"_GPUTRIAGE_COMPLETE": "bash_complete",
                      "COMP_WORDS": "gputriage schema ack", "COMP_CWORD": "2"})
    assert done.stdout.split() == ["plain,ack", "plain,ack-list"]


def test_cli_doc_names_the_completion_lines():
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for shell in ("bash", "zsh", "fish"):
        assert f"_GPUTRIAGE_COMPLETE={shell}_source gputriage" in doc
