"""Several inputs of one host merge source by source (issue 32): JSON documents are
never concatenated, the newer reading of a state wins, logs add up without repeats; two
hosts are refused with one line (exit 64) that points at ``fleet``."""

from __future__ import annotations

import io
import json

from gputriage.cli import Environment, main
from gputriage.snapshot.bundle import Captured, Snapshot


def _snap(created: str | None, host: str | None = "gpu-a", **texts: str) -> Snapshot:
    manifest = None if created is None else {"created": created, "host": host}
    return Snapshot({n: Captured(n, t, origin=f"{created}:{n}") for n, t in texts.items()},
                    manifest, origin=str(created))


def test_json_documents_are_not_concatenated_the_newer_wins():
    old = _snap("2026-01-01T10:00:00+00:00", nvml='{"gpus": [1, 2]}')
    new = _snap("2026-01-01T11:00:00+00:00", nvml='{"gpus": [1]}')
    old.merge(new)
    assert json.loads(old.text("nvml") or "") == {"gpus": [1]}
    assert old.captures["nvml"].json() == {"gpus": [1]}


def test_an_older_input_given_later_does_not_replace_the_newer_state():
    new = _snap("2026-01-01T11:00:00+00:00", nvidia_smi="new table")
    old = _snap("2026-01-01T10:00:00+00:00", nvidia_smi="old table")
    new.merge(old)
    assert new.text("nvidia_smi") == "new table"
    assert new.manifest is not None and new.manifest["created"].startswith("2026-01-01T11")


def test_kernel_logs_add_up_without_repeating_the_overlap():
    first = "a: boot\nb: Xid 79\n"
    second = "a: boot\nb: Xid 79\nc: Xid 154\n"
    snap = _snap("2026-01-01T10:00:00+00:00", kernel_log=first)
    snap.merge(_snap("2026-01-01T11:00:00+00:00", kernel_log=second))
    assert (snap.text("kernel_log") or "").splitlines() == ["a: boot", "b: Xid 79",
                                                           "c: Xid 154"]


def test_host_name_from_the_manifest_or_the_hostname_source():
    assert _snap("2026-01-01T10:00:00+00:00", host="gpu-b12").host_name() == "gpu-b12"
    assert _snap(None, hostname="gpu-c3\n").host_name() == "gpu-c3"
    assert _snap(None, nvidia_smi="x").host_name() is None


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(argv, Environment(stdout=out, stderr=err)), out.getvalue(), err.getvalue()


def _write(tmp_path, name: str, host: str, created: str, **sources: str):
    root = tmp_path / name
    (root / "sources").mkdir(parents=True)
    records = {}
    for source, text in sources.items():
        suffix = ".json" if source == "nvml" else ".txt"
        (root / "sources" / f"{source}{suffix}").write_text(text)
        records[source] = {"file": f"sources/{source}{suffix}", "kind": "command",
                           "error": None, "rc": 0, "truncated": False}
    (root / "manifest.json").write_text(json.dumps({
        "schema": "gputriage/snapshot/v1", "host": host, "created": created,
        "complete": True, "sources": records}))
    return str(root)


_XID79 = ("2026-01-01T09:59:00+0000 gpu-a kernel: NVRM: Xid (PCI:0000:9a:00): 79, "
          "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n")


def test_two_snapshots_of_one_host_analyse_as_one_and_keep_the_xid(tmp_path):
    nvml = json.dumps({"available": False, "error": "no NVML"})
    a = _write(tmp_path, "a", "gpu-a", "2026-01-01T10:00:00+00:00", kernel_log=_XID79,
               nvml=nvml)
    b = _write(tmp_path, "b", "gpu-a", "2026-01-01T11:00:00+00:00", kernel_log=_XID79,
               nvml=nvml.replace("no NVML", "still no NVML"))
    code, out, err = _run(["analyze", "--json", a, b])
    doc = json.loads(out)
    assert not any("not valid JSON" in u for u in doc["unreadable"]), doc["unreadable"]
    xid = [f for f in doc["findings"] if f["id"] == "xid.79"]
    assert xid and xid[0]["status"] == "current" and xid[0]["occurrences"]["count"] == 1
    assert code == 2


def test_two_hosts_are_refused_with_one_line_pointing_at_fleet(tmp_path):
    a = _write(tmp_path, "a", "gpu-a", "2026-01-01T10:00:00+00:00", kernel_log=_XID79)
    b = _write(tmp_path, "b", "gpu-b", "2026-01-01T10:00:00+00:00", kernel_log=_XID79)
    for command in ("analyze", "triage"):
        code, out, err = _run([command, a, b])
        assert code == 64
        assert err.count("\n") == 1 and "gpu-a" in err and "gpu-b" in err
        assert "gputriage fleet" in err
