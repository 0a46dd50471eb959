"""The HTML report without a browser: its structure (one h1, headings in order, table
headers with scope, lang, the CSP, nothing fetched, no script), hostile input kept text
(``<script>``, ``</style>``, quotes, ANSI escapes), huge input bounded, the sections
(findings with collapsed evidence, GPU table, topology with the bad path marked, the
timeline plot), the file written 0644 and the bad paths refused with an exit status,
and the text colours' contrast. Rendered in Chromium by tests/test_html_chromium.py."""

from __future__ import annotations

import io
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gputriage.cli import Environment, main
from gputriage.model import (
    Action,
    Blame,
    Evidence,
    Finding,
    GpuRow,
    HostSummary,
    Result,
    Scope,
    Severity,
)
from gputriage.scenarios import build_scenario
from gputriage.views.html import result_html
from gputriage.views.html.markup import LINE_CAP, LINES_CAP
from gputriage.views.html.style import CONTRAST_PAIRS


class Outline(HTMLParser):
    """The tags, headings, attributes and text of a document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.headings: list[int] = []
        self.text: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if "style" not in self.stack and "title" not in self.stack:
            self.text.append(data)

    def words(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.text))


def outline(text: str) -> Outline:
    o = Outline()
    o.feed(text)
    o.close()
    return o


def run(*argv: str) -> tuple[int, str, str]:
    env = Environment(stdout=io.StringIO(), stderr=io.StringIO())
    code = main(list(argv), env)
    return code, env.stdout.getvalue(), env.stderr.getvalue()


@pytest.fixture(scope="module")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("scenarios")
    for name in ("xid48-row-remap", "nic-far-socket", "healthy-8xh100", "nccl-socket-fallback"):
        build_scenario(name, str(root / name))
    return root


def report(scenario_dir: Path, name: str, tmp_path: Path) -> tuple[int, dict, str]:
    page = tmp_path / f"{name}.html"
    code, out, err = run("analyze", str(scenario_dir / name), "--json", "--html", str(page))
    assert "HTML report written to" in err
    return code, json.loads(out), page.read_text(encoding="utf-8")


def test_structure_and_self_contained(scenario_dir: Path, tmp_path: Path) -> None:
    code, doc, text = report(scenario_dir, "xid48-row-remap", tmp_path)
    o = outline(text)
    assert text.startswith("<!DOCTYPE html>")
    assert ("html", {"lang": "en"}) in o.tags
    assert o.headings[0] == 1 and o.headings.count(1) == 1
    assert all(b - a <= 1 for a, b in zip(o.headings, o.headings[1:], strict=False)), o.headings
    csp = [a["content"] for t, a in o.tags if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script" not in csp[0]
    names = {t for t, _ in o.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed"}
    assert "@import" not in text and "url(" not in text
    for tag, attrs in o.tags:  # only reference links leave the page, and only when clicked
        for key in ("src", "href", "srcset", "action"):
            if key in attrs:
                assert tag == "a" and attrs[key].startswith("https://"), (tag, attrs)
    ths = [a for t, a in o.tags if t == "th"]
    assert ths and all(a.get("scope") in ("col", "row") for a in ths)
    words = o.words()
    assert "CRITICAL" in words and code == 2
    for f in doc["findings"]:
        assert f["title"] in words
    assert "Xid 48" in words and "reset-gpu" in words  # the action, said in words too
    assert text.count("<details") >= len(doc["findings"])  # evidence collapsed
    assert "NVRM: Xid (PCI:0000:ab:00)" in text  # the evidence line, quoted


def test_sections_gpus_topology_timeline(scenario_dir: Path, tmp_path: Path) -> None:
    _, doc, text = report(scenario_dir, "xid48-row-remap", tmp_path)
    words = outline(text).words()
    for g in doc["gpus"]:
        assert g["pci_bus_id"] in words and g["uuid"] in words
    assert re.search(r"<svg class=\"timeline\"[^>]*role=\"img\"", text)
    assert text.count("<circle") >= 1 and 'class="boot"' in text
    assert "GPU 5 0000:ab:00.0" in words  # the lane of the GPU with the Xids
    _, _, far = report(scenario_dir, "nic-far-socket", tmp_path)
    bad = re.findall(r'<td class="bad[ "][^>]*>(.*?)</td>', far)
    assert bad and all(cell.startswith("SYS") for cell in bad)
    assert "(bad path)" in far and "across the CPU socket: bad path" in far
    _, _, healthy = report(scenario_dir, "healthy-8xh100", tmp_path)
    assert not re.search(r'class="bad[ "]', healthy)


def test_output_unchanged_and_file_mode(scenario_dir: Path, tmp_path: Path) -> None:
    snap = str(scenario_dir / "xid48-row-remap")
    plain = run("analyze", snap, "--no-pager")
    page = tmp_path / "r.html"
    page.write_text("old report")
    with_html = run("analyze", snap, "--no-pager", "--html", str(page))
    assert with_html[:2] == plain[:2]  # same exit status and terminal report
    assert page.stat().st_mode & 0o777 == 0o644
    assert "old report" not in page.read_text()  # a report file is replaced
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    quiet = run("analyze", snap, "-q", "--html", str(page))
    assert quiet[2] == "" and quiet[0] == 2


@pytest.mark.parametrize("where, says", [
    ("missing/dir/r.html", "no such directory"),
    (".", "is a directory"),
])
def test_bad_html_path_is_a_clear_error(scenario_dir: Path, tmp_path: Path, where: str,
                                        says: str) -> None:
    code, out, err = run("analyze", str(scenario_dir / "healthy-8xh100"), "--html",
                         str(tmp_path / where))
    assert code == 64 and says in err and "Traceback" not in err and out == ""


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_folder_is_refused(scenario_dir: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = run("analyze", str(scenario_dir / "healthy-8xh100"), "--html",
                       str(locked / "r.html"))
    assert code == 64 and "permission denied" in err


HOSTILE = ('<script>alert("x")</script></style><img src=http://evil.example/x.png>'
           "\x1b[31mred\x1b[0m \"quoted\" 'single' &amp; \u202eevil")


def hostile_result(lines: int = 3, width: int = 40) -> Result:
    f = Finding("test.hostile", Severity.WARNING, HOSTILE, HOSTILE, Action.FIX_CONFIG,
                Blame.CONFIG, Scope("gpu", 0, "GPU-<x>", "0000:01:00.0"),
                (Evidence("kernel_log", tuple(HOSTILE + "x" * width for _ in range(lines)),
                          HOSTILE),), references=("javascript:alert(1)", HOSTILE))
    return Result(findings=[f], host=HostSummary(hostname=HOSTILE, verdict="warning"),
                  gpus=[GpuRow(0, "0000:01:00.0", HOSTILE, HOSTILE)],
                  inputs=[{"origin": HOSTILE, "sources": [HOSTILE]}],
                  unreadable=[HOSTILE], not_read=[HOSTILE])


def test_hostile_text_stays_text() -> None:
    text = result_html(hostile_result())
    o = outline(text)
    assert not {t for t, _ in o.tags} & {"script", "img"}
    assert text.count("</style>") == 1 and text.count("<style>") == 1
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[31mred" in text and "\\u202e" in text
    assert "&lt;script&gt;" in text and "&quot;quoted&quot;" in text
    assert "&amp;amp;" in text  # an entity in the input is shown, not decoded
    assert not any(a.get("href", "").startswith("javascript") for _, a in o.tags)


@pytest.mark.slow  # 20,000 lines of 50,000 characters
def test_huge_input_is_bounded() -> None:
    text = result_html(hostile_result(lines=20_000, width=50_000))
    assert len(text) < 2_000_000
    assert f"{20_000 - LINES_CAP:,} more lines" in text
    assert "more characters" in text
    longest = max(len(line) for line in text.split("\n"))
    assert longest < LINE_CAP * 8  # a clipped line, escaped


def _luminance(colour: str) -> float:
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("fg, bg", CONTRAST_PAIRS)
def test_text_colours_meet_wcag_aa(fg: str, bg: str) -> None:
    hi, lo = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    assert (hi + 0.05) / (lo + 0.05) >= 4.5, (fg, bg)


def test_colours_used_are_the_tested_ones() -> None:
    from gputriage.views.html.style import CSS

    tested = {c for pair in CONTRAST_PAIRS for c in pair}
    for m in re.finditer(r"(?<![\w-])color:(#[0-9a-f]{6})", CSS):
        assert m.group(1) in tested, m.group(0)


def test_triage_nccl_fleet_write_html(scenario_dir: Path, analysed, tmp_path: Path) -> None:
    page = tmp_path / "t.html"
    code, _, _ = run("triage", str(scenario_dir / "xid48-row-remap"), "--baseline",
                     str(scenario_dir / "healthy-8xh100"), "-q", "--html", str(page))
    words = outline(page.read_text()).words()
    assert code == 2 and "What changed" in words and "Next actions" in words
    code, _, _ = run("fleet", str(analysed.fleet_demo()), "--html", str(tmp_path / "f.html"))
    words = outline((tmp_path / "f.html").read_text()).words()
    assert code == 2 and "Blast radius" in words and "xid.79" in words
    logs = [str(scenario_dir / "nccl-socket-fallback" / "sources" / f)
            for f in ("nccl_log.txt", "nccl_tests.txt")]
    code, _, _ = run("nccl", *logs, "--html", str(tmp_path / "n.html"))
    words = outline((tmp_path / "n.html").read_text()).words()
    assert code == 1 and "all_reduce_perf" in words and "net-socket 32" in words
    code, _, err = run("nccl", logs[1] + ".absent", "--html", str(tmp_path / "m.html"))
    assert code == 66 and not (tmp_path / "m.html").exists(), err  # no input: no file


def _xid(up: float, bus: str, code: int) -> str:
    return f"[{up:12.6f}] NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1, name=x, text"


BANNER = "[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02) #101-Ubuntu SMP"
# a plain dmesg across a reboot (uptimes only): GPU 07 has only a current-boot event,
# GPU 18 an earlier-boot one, GPU 3b one that came 25 s before GPU 18's in boot 0
TWO_BOOTS = "\n".join([BANNER, _xid(10.1, "18", 13), BANNER, _xid(5, "3b", 79),
                       _xid(30, "18", 48), _xid(40, "07", 31)]) + "\n"


def _marks(text: str) -> dict[str, float]:
    """Each plotted event (``Xid N``) and the x of its mark."""
    found = re.findall(r'<g><title>[^<]*?: (Xid \d+) [^<]*</title>(?:<line[^>]*>)?'
                       r'<circle cx="([\d.]+)"', text)
    return {what: float(x) for what, x in found}


def _two_boot_page(tmp_path: Path) -> str:
    log = tmp_path / "dmesg.txt"
    log.write_text(TWO_BOOTS)
    page = tmp_path / "t.html"
    run("analyze", str(log), "-q", "--html", str(page))
    return page.read_text()


def test_timeline_orders_all_lanes_by_boot_then_time(tmp_path: Path) -> None:
    text = _two_boot_page(tmp_path)
    x = _marks(text)
    assert x["Xid 13"] < x["Xid 79"] < x["Xid 48"] < x["Xid 31"], x
    ticks = re.findall(r'class="tick">(#\d+)<', text)
    assert ticks == sorted(set(ticks)) and ticks[0] == "#1" and ticks[-1] == "#4"


def test_timeline_marks_the_boot_without_wall_clock_times(tmp_path: Path) -> None:
    text = _two_boot_page(tmp_path)
    boots = re.findall(r'<line x1="([\d.]+)"[^>]*class="boot"/><text[^>]*>([^<]*)</text>',
                       text)
    assert [label for _, label in boots] == ["boot 0 (current)"]
    assert sorted(_marks(text).values())[0] < float(boots[0][0])


def test_timeline_tables_are_capped_like_the_plot(tmp_path: Path) -> None:
    from gputriage.views.html.timeline import LANES_CAP

    more = 5
    log = tmp_path / "dmesg.txt"
    log.write_text("\n".join(_xid(i + 1, f"{i + 1:02x}", 13)
                             for i in range(LANES_CAP + more)) + "\n")
    page = tmp_path / "t.html"
    run("analyze", str(log), "-q", "--html", str(page))
    text = page.read_text()
    assert len(re.findall(r"<caption>GPU [^<]*burst\(s\)</caption>", text)) == LANES_CAP
    assert f"{more} more lane(s) not listed here" in text
    assert f"{more} more lane(s) not plotted" in text


def test_html_path_that_cannot_be_looked_up_is_a_clear_error(
        scenario_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    target = locked / "r.html"
    real = Path.is_dir

    def is_dir(self: Path) -> bool:  # what stat says in a folder without search permission
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    code, out, err = run("analyze", str(scenario_dir / "healthy-8xh100"), "--html",
                         str(target))
    assert code == 64 and out == "" and "Traceback" not in err, err
    assert f"--html {target}: cannot look up the path (permission denied)" in err


def test_banners_share_one_helper(scenario_dir: Path, analysed, tmp_path: Path) -> None:
    from gputriage.views.html.markup import banner_box

    box = banner_box("warning", "a &amp; b", "<p>more</p>")
    assert box.startswith('<section class="banner sev-warning" aria-label="verdict">'
                          '<p class="verdict"><span class="badge sev-warning">WARNING</span>'
                          " a &amp; b</p><p>more</p>")
    _, _, text = report(scenario_dir, "xid48-row-remap", tmp_path)
    assert '<section class="banner sev-critical" aria-label="verdict"><p class="verdict">' \
        '<span class="badge sev-critical">CRITICAL</span>' in text
    run("fleet", str(analysed.fleet_demo()), "--html", str(tmp_path / "f.html"))
    fleet = (tmp_path / "f.html").read_text()
    assert re.search(r'<section class="banner sev-\w+" aria-label="verdict">'
                     r'<p class="verdict"><span class="badge [^>]*>\w+</span> fleet: ', fleet)


TOPO_TWO_SHORT = """\
\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV18\tNV18\t0-7\t0
GPU1\tNV18\t X \tNV16\t0-7\t0
GPU2\tNV18\tNV16\t X \t0-7\t0
"""


def test_uneven_nvlink_gpus_come_from_the_evidence_not_the_title() -> None:
    import dataclasses

    from gputriage.parsers.topo import parse_topo
    from gputriage.rules.topology import nvlink_uneven
    from gputriage.views.html.topology import bad_paths, matrix_table

    matrix = parse_topo(TOPO_TWO_SHORT)
    [f] = list(nvlink_uneven(matrix))
    reworded = dataclasses.replace(f, title="2 GPUs show fewer NVLink links")
    pairs, named = bad_paths(Result(findings=[reworded]), matrix, [])
    assert not pairs and set(named) == {"GPU1", "GPU2"}
    assert named["GPU1"] == "34 NVLink links, fewer than 36"
    assert "GPU1 \u26a0 34 NVLink links" in matrix_table(matrix, pairs, named)
