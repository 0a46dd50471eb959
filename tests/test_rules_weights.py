"""Where a model's weights lie: the host report's parser and detector, mountinfo, and the
weights rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostkit import ids, run

from gputriage.errors import ParseError
from gputriage.ingest.detect import detect
from gputriage.parsers.weights_host import (
    classify_mount,
    parse_mountinfo,
    parse_mountinfo_line,
    parse_weights_host,
)
from gputriage.weights.host import host_report, mount_of

FIXTURES = Path(__file__).parent / "fixtures" / "weights"
NFS = (FIXTURES / "host-nfs-models.txt").read_text(encoding="utf-8")
MOUNTINFO = (FIXTURES / "mountinfo-gpu-node.txt").read_text(encoding="utf-8")
OVERLAY = """== gputriage weights: host check ==
model_dir: /opt/model
model_bytes: 16060522496
mount: 512 511 0:70 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/c/12/fs
free_bytes: 200000000000
MemAvailable:   503316480 kB
"""
LOCAL = """== gputriage weights: host check ==
model_dir: /raid/models/llama
model_bytes: 141107412992
mount: 98 29 259:1 / /raid rw,relatime shared:58 - xfs /dev/md0 rw,attr2,inode64
free_bytes: 1000000000
local_mount: 98 29 259:1 / /raid rw,relatime shared:58 - xfs /dev/md0 rw,attr2,inode64
local_free_bytes: 1000000000
MemAvailable:   503316480 kB
"""

SOURCE_SAMPLES = {"weights_host": ("fixture:weights/host-nfs-models.txt",)}
RULE_CASES = {
    "weights.storage": [({"weights_host": NFS}, "weights.network-read"),
                        ({"weights_host": OVERLAY}, "weights.overlay-image"),
                        ({"weights_host": LOCAL}, "weights.local-read")],
    "weights.local-space": [({"weights_host": NFS}, "weights.local-nvme-short")],
    "weights.page-cache": [({"weights_host": NFS}, "weights.ram-short")],
}


def test_parse_weights_host_keeps_the_kernel_lines() -> None:
    host = parse_weights_host(NFS)
    assert host.model_dir == "/models/llama-3-70b-instruct"
    assert host.model_bytes == 141_107_412_992 and host.tier == "nfs"
    assert host.mount is not None and host.mount.source == "fs01.storage:/export/models"
    assert host.local_free_bytes == 96_636_764_160 and host.mem_available_kb == 98_304_000
    assert host.lines["mount"].startswith("mount: 412 29 0:58 / /models ")


@pytest.mark.parametrize("text", ["", "model_dir: /x\n", "== gputriage weights: host check ==\n",
                                  "== gputriage weights: host check ==\nmodel_dir: /m\n"
                                  "mount: 1 2 0:3 / /m rw\n"])
def test_bad_reports_raise_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_weights_host(text)


@pytest.mark.parametrize("bad", ["lots", "²", "١٢", "--1", "1e400", "9" * 5000, ""])
def test_a_field_that_is_not_a_number_is_unknown_and_said(bad: str) -> None:
    """One bad number leaves that field unknown, names it, and the rest is read."""
    host = parse_weights_host(NFS.replace("free_bytes: 4837212160000", f"free_bytes: {bad}"))
    assert host.free_bytes is None and host.model_bytes == 141_107_412_992
    assert host.tier == "nfs" and host.unreadable_fields() == \
        [f"free_bytes: not a number: {bad[:40]!r}"]


def test_detector_claims_the_report_in_a_paste() -> None:
    paste = "$ gputriage weights --model-dir /models --host-report\n" + NFS + "\n$ uptime\n"
    found = dict(detect(paste))
    assert parse_weights_host(found["weights_host"]).tier == "nfs"


def test_mountinfo_classes() -> None:
    kinds = {m.mount_point: classify_mount(m) for m in parse_mountinfo(MOUNTINFO)}
    assert kinds == {"/sys": "other", "/proc": "other", "/": "local_nvme",
                     "/raid": "local_nvme", "/models": "nfs", "/lustre": "lustre",
                     "/mnt/s3 models": "object_store", "/mnt/gcs": "object_store",
                     "/var/lib/containerd/rootfs": "overlay"}
    with pytest.raises(ParseError):
        parse_mountinfo("not a mount table\n")
    with pytest.raises(ParseError):
        parse_mountinfo_line("12 1 0:1 / /x rw")


def test_mount_of_takes_the_deepest_mount() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert mount_of("/models/llama/config.json", mounts).fs_type == "nfs4"
    assert mount_of("/modelsx", mounts).mount_point == "/"
    assert mount_of("/raid", mounts).source == "/dev/md0"


def test_rules_on_the_nfs_host_say_what_and_quote_the_lines() -> None:
    result = run(weights_host=NFS)
    found = {f.id: f for f in result.findings}
    assert {"weights.network-read", "weights.local-nvme-short", "weights.ram-short"} <= set(found)
    short = found["weights.local-nvme-short"]
    assert short.title == "local NVMe has 96.6 GB free for a 141.1 GB model"
    assert any("local_free_bytes: 96636764160" in ln for e in short.evidence for ln in e.lines)
    assert "nfs4" in found["weights.network-read"].title


def test_weights_on_local_nvme_with_room_are_ok() -> None:
    result = run(weights_host=LOCAL)
    assert {i for i in ids(result) if i.startswith("weights.")} == {"weights.local-read"}
    [ok] = [f for f in result.findings if f.id == "weights.local-read"]
    assert ok.severity.value == "ok"
    assert ok.title == "weights read from local NVMe (xfs /dev/md0 at /raid)"


def test_host_report_of_a_directory(tmp_path: Path) -> None:
    real = tmp_path.resolve()
    mountinfo = MOUNTINFO + f"600 29 0:80 / {real} rw,relatime - nfs4 nas:/export rw\n"
    text = host_report(str(tmp_path), 10**12, mountinfo=mountinfo,
                       meminfo="MemTotal: 100 kB\nMemAvailable:    64 kB\n")
    host = parse_weights_host(text)
    assert host.model_dir == str(real) and host.tier == "nfs"
    assert host.free_bytes is not None and host.mem_available_kb == 64
    assert {"weights.network-read", "weights.ram-short"} <= ids(run(weights_host=text))
