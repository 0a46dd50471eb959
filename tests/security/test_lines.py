"""One line splitter for input text (issue 29): ``\\n``, ``\\r\\n`` and ``\\r`` end a line,
as the tools print them and the kernel-log scanner reads files; the other characters
``str.splitlines()`` takes for line breaks (0x1C-0x1E, 0x85, U+2028...) stay inside the
field that holds them, in a paste as in a file."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.cli import Environment, main
from gputriage.ingest.detect import detect
from gputriage.text.fields import split_lines
from gputriage.text.paste import PasteDoc

FIELD_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(["a", " ", "\n", "\r", *FIELD_BREAKS]), max_size=40))
def test_split_lines_cuts_where_a_file_is_cut(text: str) -> None:
    lines = split_lines(text)
    assert "\n".join(lines) == text.replace("\r\n", "\n").replace("\r", "\n").removesuffix(
        "\n") or (text in ("\n", "\r", "\r\n") and lines == [""])
    assert not any("\n" in ln or "\r" in ln for ln in lines)
    plain = text
    for ch in FIELD_BREAKS:
        plain = plain.replace(ch, "x")
    assert len(lines) == len(plain.splitlines())


@pytest.mark.parametrize("brk", FIELD_BREAKS)
def test_a_break_inside_a_field_does_not_start_a_record(brk: str) -> None:
    """A process name holding a line break is part of its Xid line: no second event."""
    line = (f"[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 13, pid=4411, name=py{brk}thon, "
            "Graphics Exception: ESR 0x404600=0x80000002\n")
    assert PasteDoc(line).lines == [line.rstrip("\n")]
    assert dict(detect(line))["kernel_log"].rstrip("\n") == line.rstrip("\n")


@pytest.mark.parametrize("brk", ["\x1c", "\x85", "\u2028"])
def test_a_paste_and_a_file_of_it_say_the_same(tmp_path, brk: str) -> None:
    text = ("[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
            f"GPU has fallen off the bus.{brk}[ 4254.2] NVRM: Xid (PCI:0000:18:00): 13, "
            "Graphics Exception\n")
    path = tmp_path / "kern.log"
    path.write_text(text, encoding="utf-8")
    said = []
    for argv in (["analyze", "--json", str(path)], ["logs", "--json", str(path)]):
        out = io.StringIO()
        code = main(argv, Environment(stdout=out, stderr=io.StringIO()))
        said.append((code, "0000:18:00.0" in out.getvalue()))
    assert said[0] == said[1]
