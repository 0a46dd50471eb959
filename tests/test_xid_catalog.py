"""The Xid / SXid catalogs (package data), Xid 154 recovery actions and the `xid` view."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.knowledge import xid as catalog
from gputriage.knowledge.xid import (
    ORIGINS,
    SXID_CATEGORIES,
    all_sxids,
    all_xids,
    recovery_action,
    sxid_info,
    xid_info,
)
from gputriage.model import Action, Blame, Severity
from gputriage.views.xidview import render_xids, xids_json

REPO = Path(__file__).resolve().parent.parent
CATALOG_SEVERITIES = {Severity.CRITICAL, Severity.WARNING, Severity.INFO}


def find_reference() -> Path | None:
    """../shared/reference beside the checkout (or $GPUTRIAGE_REFERENCE)."""
    env = os.environ.get("GPUTRIAGE_REFERENCE")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "reference", REPO / "shared" / "reference"]
    for c in candidates:
        if (c / "xid.csv").is_file() and (c / "sxid.csv").is_file():
            return c
    return None


@pytest.fixture(scope="module")
def reference() -> Path:
    root = find_reference()
    if root is None:
        pytest.skip("reference tables not found: expected ../shared/reference/xid.csv and "
                    "sxid.csv beside the checkout (or set GPUTRIAGE_REFERENCE)")
    return root


def _ref_rows(path: Path) -> dict[int, dict[str, str]]:
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
             if ln and not ln.startswith("#")]
    return {int(r["code"]): r for r in csv.DictReader(lines)}


def _console(width: int = 100):
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, width=width, color_system=None, force_terminal=False), buf


# --- every entry is complete and uses the closed vocabularies -------------------------------

def test_every_xid_has_valid_judgement() -> None:
    xids = all_xids()
    assert len(xids) == 172
    assert [x.code for x in xids] == sorted({x.code for x in xids})
    for x in xids:
        assert isinstance(x.action, Action)
        assert x.severity in CATALOG_SEVERITIES
        assert isinstance(x.blame, Blame)
        assert x.meaning.strip() and x.explanation.strip(), x.code
        assert set(x.origins) <= ORIGINS
        assert isinstance(x.legacy, bool)


def test_every_sxid_has_valid_judgement() -> None:
    sxids = all_sxids()
    assert len(sxids) > 300
    for s in sxids:
        assert isinstance(s.action, Action)
        assert s.severity in CATALOG_SEVERITIES
        assert isinstance(s.blame, Blame)
        assert s.meaning.strip() and s.explanation.strip(), s.code
        assert s.category is None or s.category in SXID_CATEGORIES
        assert set(s.origins) <= ORIGINS
        if s.fatal:
            assert s.severity is Severity.CRITICAL and s.action is not Action.NONE, s.code
        else:
            assert s.severity is not Severity.CRITICAL and s.action is Action.NONE, s.code


def test_csv_files_name_their_sources() -> None:
    from importlib import resources

    for name in ("xid.csv", "sxid.csv"):
        first = resources.files("gputriage.knowledge").joinpath(name).read_text(
            encoding="utf-8").splitlines()[0]
        assert first.startswith("#") and "NVIDIA" in first and "reference" in first


def test_catalog_is_loaded_once() -> None:
    assert xid_info(79) is xid_info(79)
    assert catalog._xids.cache_info().currsize == 1


# --- coverage against the reference tables ------------------------------------------------

def test_xid_catalog_covers_reference(reference: Path) -> None:
    ref = _ref_rows(reference / "xid.csv")
    extra = _ref_rows(reference / "xid_catalog_extra.csv")
    ours = {x.code: x for x in all_xids()}
    assert set(ours) == set(ref)
    for code, row in ref.items():
        assert ours[code].nvidia_bucket == (row["nvidia_resolution"] or None), code
        assert ours[code].mnemonic == (extra[code]["mnemonic"] or None), code
        assert ours[code].legacy == (extra[code]["unused_on_ampere_plus"] == "yes"), code


def test_sxid_catalog_covers_reference(reference: Path) -> None:
    ref = _ref_rows(reference / "sxid.csv")
    ours = {s.code: s for s in all_sxids()}
    assert set(ours) == set(ref)
    category = {"potentially-fatal": "fatal", "": None}
    for code, row in ref.items():
        s = ours[code]
        assert s.bucket == row["nvsentinel_action"], code
        assert s.fatal == (row["nvsentinel_fatality"] == "FATAL"), code
        assert s.mnemonic == (row["mnemonic"] or None), code
        want = category.get(row["fm_guide_category"], row["fm_guide_category"])
        assert s.category == want, code


# --- spot checks: an SRE's judgement ----------------------------------------------------

@pytest.mark.parametrize(("code", "action", "severity", "blame"), [
    (79, Action.DRAIN_AND_REPAIR, Severity.CRITICAL, Blame.NODE),
    (31, Action.RESTART_JOB, Severity.WARNING, Blame.JOB),
    (13, Action.RESTART_JOB, Severity.WARNING, Blame.JOB),
    (43, Action.RESTART_JOB, Severity.WARNING, Blame.JOB),
    (45, Action.RESTART_JOB, Severity.INFO, Blame.JOB),
    (48, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (63, Action.PLAN_REPAIR, Severity.WARNING, Blame.NODE),  # reset when idle: no drain
    (64, Action.DRAIN_AND_REPAIR, Severity.CRITICAL, Blame.NODE),
    (74, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (92, Action.NONE, Severity.WARNING, Blame.NODE),
    (94, Action.RESTART_JOB, Severity.WARNING, Blame.NODE),
    (95, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (109, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),  # catalog: RESET_GPU
    (119, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (120, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (140, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
    (149, Action.RESET_GPU, Severity.CRITICAL, Blame.NODE),
])
def test_xid_spot_checks(code: int, action: Action, severity: Severity, blame: Blame) -> None:
    info = xid_info(code)
    assert info is not None
    assert (info.action, info.severity, info.blame) == (action, severity, blame)


def test_xid_facts() -> None:
    x79 = xid_info(79)
    assert x79 is not None
    assert x79.mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert x79.nvidia_bucket == "RESTART_BM"
    assert "bus" in x79.meaning and not x79.legacy
    assert xid_info(48).nvidia_bucket == "WORKFLOW_XID_48"
    assert xid_info(31).origins[0] == "application"
    assert "firmware" in xid_info(119).origins
    assert xid_info(1).legacy and xid_info(1).blame is Blame.UNKNOWN
    assert xid_info(162).nvidia_bucket is None


def test_xid_154_points_at_the_event() -> None:
    info = xid_info(154)
    assert info is not None
    assert info.severity is Severity.WARNING
    assert info.nvidia_bucket == "XID_154"
    assert "see the event" in info.explanation.lower()


def test_sxid_spot_checks() -> None:
    fatal = sxid_info(20034)  # LTSSM fault up: the classic fatal link SXid
    assert fatal is not None and fatal.fatal
    assert fatal.mnemonic == "NVSWITCH_ERR_HW_DLPL_LTSSM_FAULT_UP"
    assert (fatal.severity, fatal.blame, fatal.action) == (
        Severity.CRITICAL, Blame.NODE, Action.RESET_GPU)
    assert fatal.category == "fatal"
    fabric = sxid_info(23001)  # always-fatal crossbar error: reset the whole fabric
    assert fabric is not None and fabric.category == "always-fatal"
    assert fabric.action is Action.REBOOT_NODE
    quiet = sxid_info(20001)  # TX replay: non-fatal, count it
    assert quiet is not None and not quiet.fatal
    assert quiet.category == "non-fatal"
    assert (quiet.severity, quiet.action, quiet.blame) == (Severity.INFO, Action.NONE, Blame.NODE)
    ecc = sxid_info(11012)  # corrected-ECC threshold: a warning, nothing failed yet
    assert ecc is not None and not ecc.fatal and ecc.severity is Severity.WARNING
    acl = sxid_info(11004)
    assert acl is not None and acl.blame is Blame.CONFIG and acl.action is Action.FIX_CONFIG


def test_unknown_codes() -> None:
    assert xid_info(0) is None
    assert xid_info(9999) is None
    assert xid_info(-1) is None
    assert sxid_info(79) is None
    assert sxid_info(99999) is None


# --- Xid 154 recovery action ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "want"), [
    ("GPU Reset Required", Action.RESET_GPU),
    ("Node Reboot Required", Action.REBOOT_NODE),
    ("Drain and Reset", Action.RESET_GPU),
    ("Drain P2P", Action.RESTART_JOB),
    ("None", Action.NONE),
    ("0x1 (GPU Reset Required)", Action.RESET_GPU),
    ("0x4 (Drain and Reset)", Action.RESET_GPU),
    ("0x2", Action.REBOOT_NODE),
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", Action.RESET_GPU),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", Action.NONE),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
     Action.REBOOT_NODE),
    ("  node reboot required ", Action.REBOOT_NODE),
    ("GPU_RECOVERY_ACTION_DRAIN_AND_RESET", Action.RESET_GPU),
    ("Reset", Action.RESET_GPU),
    ("Reboot", Action.REBOOT_NODE),
])
def test_recovery_action(text: str, want: Action) -> None:
    assert recovery_action(text) is want


@pytest.mark.parametrize("text", ["", "   ", "something else", "0x99", "to"])
def test_recovery_action_unknown(text: str) -> None:
    assert recovery_action(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_recovery_action_never_raises(text: str) -> None:
    assert recovery_action(text) is None or isinstance(recovery_action(text), Action)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_recovery_action_on_arbitrary_bytes(raw: bytes) -> None:
    result = recovery_action(raw.decode("utf-8", errors="replace"))
    assert result is None or isinstance(result, Action)


# --- the `xid` view -----------------------------------------------------------------------

def test_render_known_xids() -> None:
    console, buf = _console()
    unknown = render_xids([79, 31], console)
    out = buf.getvalue()
    assert unknown == 0
    assert "Xid 79" in out and "CRITICAL" in out
    assert xid_info(79).meaning in out
    assert "node" in out and "job" in out
    assert "RESTART_BM" in out and "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in out
    assert "drain-and-repair" in out and "restart-job" in out


def test_render_unknown_and_legacy() -> None:
    console, buf = _console()
    assert render_xids([9999, 1, 424242], console) == 2
    out = buf.getvalue()
    assert "Xid 9999: not in the catalog" in out
    assert "legacy" in out


def test_render_sxid() -> None:
    console, buf = _console(120)
    assert render_xids([20034, 79], console, sxid=True) == 1
    out = buf.getvalue()
    assert "SXid 20034" in out and "fatal" in out and "node" in out
    assert "SXid 79: not in the catalog" in out


def test_xids_json() -> None:
    data = xids_json([79, 12345])
    assert json.loads(json.dumps(data)) == data
    known, unknown = data
    assert known["known"] is True and known["code"] == 79
    assert known["action"] == "drain-and-repair" and known["severity"] == "critical"
    assert known["blame"] == "node" and known["nvidia_bucket"] == "RESTART_BM"
    assert isinstance(known["origins"], list)
    assert unknown == {"code": 12345, "kind": "xid", "known": False}
    sx = xids_json([20034], sxid=True)[0]
    assert sx["fatal"] is True and sx["kind"] == "sxid" and sx["category"] == "fatal"


def test_recovery_action_reads_numbers_with_leading_zeros():
    from gputriage.knowledge.xid import recovery_action

    assert recovery_action("01") == recovery_action("1") is not None
    assert recovery_action("0x1") == recovery_action("1")
