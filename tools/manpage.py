"""Write the man page docs/gputriage.1 from the click command tree (no other input), so
that it says what ``gputriage --help`` says.

    python tools/manpage.py            # rewrite docs/gputriage.1
    python tools/manpage.py --check    # exit 1 when docs/gputriage.1 is out of date

tests/test_manpage.py fails when the committed page is not what this writes: after
changing a command, its options or its help, run the first line.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "gputriage.1"

SUMMARY = "triage a GPU node: what is wrong, node or job, what to do next"

# Sections no command's help carries: kept here, in the page's voice.
ENVIRONMENT = (
    ("GPUTRIAGE_STATE_DIR", "History and acknowledgements directory (default: "
     "$XDG_STATE_HOME/gputriage, /var/lib/gputriage as root)."),
    ("GPUTRIAGE_CACHE_DIR", "Where compiled search databases are kept between runs "
     "(default: $XDG_CACHE_HOME/gputriage, /var/cache/gputriage as root; empty: none)."),
    ("GPUTRIAGE_EXPECT", "The expectations file check reads without --expect "
     "(default: /etc/gputriage/expect.toml when present)."),
    ("GPUTRIAGE_PAGER, PAGER", "The pager of a long report on a terminal (default: less -FRX)."),
    ("NO_COLOR, TERM=dumb", "No colours and no styles."),
    ("COLUMNS", "The width of the terminal views."),
    ("GPUTRIAGE_DEBUG", "Set to 1: an internal error prints its traceback."),
    ("_GPUTRIAGE_COMPLETE", "Shell completion: bash_source, zsh_source or fish_source "
     "prints the completion script (see docs/cli.md)."),
)
EXIT_STATUS = (
    ("0", "OK"), ("1", "WARNING (diff: facts changed or findings are new)"),
    ("2", "CRITICAL"), ("3", "UNKNOWN: nothing could be judged"),
    ("64", "usage error"), ("66", "an input could not be read"),
)


def escape(text: str) -> str:
    """``text`` as roff text: backslashes and hyphens escaped, no line starting with a
    control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(f"\\&{line}" if line.startswith((".", "'")) else line
                     for line in text.split("\n"))


def paragraphs(help_text: str) -> list[str]:
    """A command's help as roff: plain paragraphs joined into one line each, click's
    ``\\b`` blocks kept line by line (no fill)."""
    out: list[str] = []
    for block in inspect.cleandoc(help_text).split("\n\n"):
        if block.startswith("\b\n") or block == "\b":
            lines = block.split("\n")[1:]
            out.append(".nf\n" + escape("\n".join(lines)) + "\n.fi")
        elif block.strip():
            out.append(escape(" ".join(line.strip() for line in block.split("\n"))))
    return out


def options(command: click.Command, ctx: click.Context) -> list[str]:
    """One ``.TP`` entry per option and argument that has help."""
    out: list[str] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        if not text:  # an argument: the usage line names it
            continue
        out.append(f".TP\n\\fB{escape(names)}\\fR\n{escape(text)}")
    return out


def command_section(command: click.Command, path: list[str], parent: click.Context) -> list[str]:
    """The page's part for ``command`` and, for a group, each of its subcommands."""
    name = path[-1]
    ctx = command.make_context(name, [], parent=parent, resilient_parsing=True)
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [f'.SS "{escape(" ".join(path))} {escape(usage)}"']
    out += [p if p.startswith(".nf") else f"{p}\n.PP" for p in paragraphs(command.help or "")]
    if out[-1].endswith("\n.PP"):
        out[-1] = out[-1].removesuffix("\n.PP")
    out += options(command, ctx)
    if isinstance(command, click.Group):
        for sub in sorted(command.list_commands(ctx)):
            child = command.get_command(ctx, sub)
            if child is not None and not child.hidden:
                out += command_section(child, [*path, sub], ctx)
    return out


def render() -> str:
    """The whole page."""
    from gputriage import __version__
    from gputriage.cli import cli

    root = cli.make_context("gputriage", [], resilient_parsing=True)
    help_paras = paragraphs(cli.help or "")
    lines = [
        f'.TH GPUTRIAGE 1 "" "gputriage {__version__}" "User Commands"',
        ".SH NAME", f"gputriage \\- {escape(SUMMARY)}",
        ".SH SYNOPSIS", ".B gputriage", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION", "\n.PP\n".join(help_paras),
        ".SH OPTIONS", *options(cli, root),
        ".SH COMMANDS",
    ]
    for name in sorted(cli.list_commands(root)):
        command = cli.get_command(root, name)
        if command is not None and not command.hidden:
            lines += command_section(command, ["gputriage", name], root)
    lines.append('.SH "EXIT STATUS"')
    lines += [f".TP\n\\fB{code}\\fR\n{escape(text)}" for code, text in EXIT_STATUS]
    lines.append(".SH ENVIRONMENT")
    lines += [f".TP\n\\fB{escape(name)}\\fR\n{escape(text)}" for name, text in ENVIRONMENT]
    lines += [".SH \"SEE ALSO\"",
              "docs/cli.md, docs/json-schema.md (gputriage schema NAME prints each JSON "
              "Schema), docs/expectations.md, docs/fleet.md".replace("-", "\\-")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the committed page differs from the CLI's")
    parser.add_argument("--out", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == page
        if not same:
            print(f"{args.out} is out of date: run python tools/manpage.py", file=sys.stderr)
        return 0 if same else 1
    args.out.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
