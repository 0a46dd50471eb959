"""The HTML report rendered in a real browser: Debian's headless ``chromium``, driven
over the DevTools protocol (loopback websocket, websocket-client).

For each scenario (``analyze SNAP --html``, a few through ``check --snapshot``), for
``nccl`` on nccl-socket-fallback's logs and for ``fleet`` on the demo fleet: the page
loads with no console error, no exception and no network request (the report's CSP
forbids every fetch; any attempt would show as a request or a CSP error), it has no
horizontal page scroll on a phone, its phone (390x844) and desktop (1280x900)
screenshots are not blank, and its visible text holds the verdict and every finding's
title. One browser serves the whole module; it listens on 127.0.0.1 only and is
stopped by the fixture's finalizer. Skipped, with the reason, without chromium."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from gputriage.cli import Environment, main
from gputriage.scenarios import build_scenario, list_scenarios

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser"))
                 if p), None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium); "
                             "the HTML report is not rendered in a browser")]
websocket = pytest.importorskip(
    "websocket", reason="websocket-client is not installed (pip install -e .[test])")

STARTUP_S = 40.0  # a cold chromium on a loaded machine
STEP_S = 30.0  # one DevTools answer or page load
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
DESKTOP = {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}
SCENARIOS = [sc.name for sc in list_scenarios()]
THROUGH_CHECK = {"healthy-8xh100", "xid48-reset", "gpus-gone"}  # check --snapshot
VERDICTS = ("ok", "warning", "critical", "unknown")  # by exit status


class Browser:
    """A headless chromium and one DevTools connection to it."""

    def __init__(self, workdir: Path) -> None:
        profile = workdir / "profile"
        profile.mkdir()
        self.log = open(workdir / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        argv = [str(CHROMIUM), "--headless", "--disable-gpu", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={profile}", "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.events: list[dict] = []
        self._id = 0
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + STARTUP_S
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                pytest.fail(f"chromium did not start (see {workdir / 'chromium.log'})")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=STEP_S,
                                              suppress_origin=True)

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """Send one command, keep the events that arrive meanwhile, return its result."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + STEP_S
        while time.monotonic() < deadline:
            answer = json.loads(self.ws.recv())
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)
        raise AssertionError(f"{method}: no answer in {STEP_S} s")

    def wait_for(self, event: str, session: str) -> None:
        deadline = time.monotonic() + STEP_S
        while time.monotonic() < deadline:
            if any(e.get("method") == event and e.get("sessionId") == session
                   for e in self.events):
                return
            self.events.append(json.loads(self.ws.recv()))
        raise AssertionError(f"no {event} in {STEP_S} s")

    def open(self, page: Path, metrics: dict) -> tuple[str, str]:
        """A new tab at ``metrics`` size with ``page`` loaded: (target, session). The
        tab starts blank and its domains are enabled before the page is navigated to,
        so the load event waited for is the page's, never the blank tab's."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        self.call("Emulation.setDeviceMetricsOverride", metrics, session)
        self.events.clear()
        self.call("Page.navigate", {"url": page.resolve().as_uri()}, session)
        self.wait_for("Page.loadEventFired", session)
        return target, session

    def render(self, page: Path) -> dict:
        """Load ``page`` at phone size, read its text and overflow, take the phone and
        desktop screenshots; return them with the console problems and requests seen."""
        uri = page.resolve().as_uri()
        target, session = self.open(page, PHONE)
        try:
            out = {"text": self.evaluate("document.body.innerText", session),
                   "overflow": self.evaluate("document.documentElement.scrollWidth - "
                                             "document.documentElement.clientWidth", session),
                   "phone": self.screenshot(session)}
            self.call("Emulation.setDeviceMetricsOverride", DESKTOP, session)
            out["desktop"] = self.screenshot(session)
            mine = [e for e in self.events if e.get("sessionId") == session]
            out["problems"] = [e for e in mine if _problem(e)]
            out["requests"] = [e["params"]["request"]["url"] for e in mine
                               if e.get("method") == "Network.requestWillBeSent"
                               and e["params"]["request"]["url"] != uri]
            return out
        finally:
            self.call("Target.closeTarget", {"targetId": target})

    def evaluate(self, expression: str, session: str) -> Any:
        got = self.call("Runtime.evaluate", {"expression": expression,
                                             "returnByValue": True}, session)
        return got["result"].get("value")

    def screenshot(self, session: str) -> bytes:
        shot = self.call("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True},
                         session)
        return base64.b64decode(shot["data"])


def _problem(event: dict) -> bool:
    """A console error or warning, an uncaught exception, or a logged error (a CSP
    violation is one)."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        return True
    if method == "Runtime.consoleAPICalled":
        return params.get("type") in ("error", "assert", "warning")
    if method == "Log.entryAdded":
        return params.get("entry", {}).get("level") in ("error", "warning")
    return False


def png_colours(data: bytes) -> int:
    """How many distinct byte values the PNG's decoded scanlines hold (a blank page: a
    handful; a rendered report: many)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    b = Browser(tmp_path_factory.mktemp("chromium"))
    yield b
    b.close()


def run(*argv: str) -> tuple[int, str]:
    env = Environment(stdout=io.StringIO(), stderr=io.StringIO())
    code = main(list(argv), env)
    assert code in (0, 1, 2, 3), env.stderr.getvalue()
    return code, env.stdout.getvalue()


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def check_page(browser: Browser, page: Path, verdict: str, titles: list[str],
               shots: Path | None = None) -> dict:
    got = browser.render(page)
    assert got["problems"] == [], got["problems"]
    assert got["requests"] == [], got["requests"]
    assert got["overflow"] <= 0, f"the page scrolls sideways on a phone by {got['overflow']}px"
    for name in ("phone", "desktop"):
        assert png_colours(got[name]) > 16, f"the {name} screenshot is blank"
        if shots is not None:
            (shots / f"{page.stem}-{name}.png").write_bytes(got[name])
    text = _words(got["text"])
    assert verdict.upper() in text
    for title in titles:
        assert _words(title) in text, title
    return got


def _titles(doc: dict) -> list[str]:
    return [f["title"] for f in doc["findings"]] + [
        c["title"] for f in doc["findings"] for c in f.get("consequences", [])]


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_report_renders(name: str, browser: Browser, tmp_path: Path) -> None:
    snap, page = tmp_path / name, tmp_path / f"{name}.html"
    build_scenario(name, str(snap))
    if name in THROUGH_CHECK:
        code, out = run("check", "--snapshot", str(snap), "--json", "--html", str(page),
                        "--state-dir", str(tmp_path / "state"), "--no-history")
    else:
        code, out = run("analyze", str(snap), "--json", "--html", str(page))
    doc = json.loads(out)
    assert page.stat().st_mode & 0o777 == 0o644
    shots = Path(os.environ["GPUTRIAGE_SHOTS"]) if os.environ.get("GPUTRIAGE_SHOTS") else None
    check_page(browser, page, VERDICTS[code], _titles(doc), shots)


def test_nccl_report_renders(browser: Browser, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    build_scenario("nccl-socket-fallback", str(snap))
    page = tmp_path / "nccl.html"
    logs = [str(snap / "sources" / f) for f in ("nccl_log.txt", "nccl_tests.txt")]
    code, out = run("nccl", *logs, "--json", "--html", str(page))
    doc = json.loads(out)
    got = check_page(browser, page, VERDICTS[code], _titles(doc))
    assert "all_reduce_perf" in got["text"] and "net-socket" in got["text"]


def test_fleet_report_renders(browser: Browser, tmp_path: Path) -> None:
    from gputriage.fleet.scenario import write_demo

    write_demo(str(tmp_path / "fleet"))
    page = tmp_path / "fleet.html"
    code, out = run("fleet", str(tmp_path / "fleet"), "--json", "--html", str(page))
    doc = json.loads(out)
    assert code == 2
    got = check_page(browser, page, "critical", [f["id"] for f in doc["findings"]])
    assert "driver.userspace = 550.90.07" in got["text"]


def test_weights_report_renders(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "weights.html"
    code, _ = run("weights", "--params", "70B", "--dtype", "fp16", "--replicas", "50",
                  "--link", "100Gb/s", "--html", str(page))
    assert code == 1  # a herd of over 5 minutes is a warning
    got = check_page(browser, page, "warning", ["every replica pulls at once", "140.0 GB (fp16)",
                                           "7.00 TB in all"])
    assert "9 min 20 s" in got["text"]


def test_print_expands_evidence_and_dark_mode_darkens(browser: Browser,
                                                     tmp_path: Path) -> None:
    """Printed, the collapsed evidence shows; in dark mode the page is dark."""
    snap, page = tmp_path / "snap", tmp_path / "r.html"
    build_scenario("xid48-row-remap", str(snap))
    run("analyze", str(snap), "--html", str(page))
    target, session = browser.open(page, DESKTOP)
    try:
        evidence = "document.querySelector('details.evidence pre')"
        shown = f"{evidence}.checkVisibility()"
        assert browser.evaluate(shown, session) is False  # collapsed on screen
        browser.call("Emulation.setEmulatedMedia", {"media": "print"}, session)
        assert browser.evaluate(shown, session) is True
        browser.call("Emulation.setEmulatedMedia", {"media": "screen", "features": [
            {"name": "prefers-color-scheme", "value": "dark"}]}, session)
        bg = browser.evaluate("getComputedStyle(document.body).backgroundColor", session)
        assert bg == "rgb(18, 20, 23)", bg
    finally:
        browser.call("Target.closeTarget", {"targetId": target})
