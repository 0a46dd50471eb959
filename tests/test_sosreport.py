"""A sosreport read as one host (gputriage.ingest.sos, gputriage.snapshot.sos): the
archive is built here in sos's own layout (sos_commands/<plugin>/<command as a file
name>, copied files at their paths, links at the top), with real GPU host outputs from
../shared/corpus; one slow test runs the real `sos report` of this machine."""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from gputriage import schemas, sources
from gputriage.cli import main
from gputriage.engine.analysis import analyze
from gputriage.ingest import load_inputs
from gputriage.ingest.sos import command_line
from gputriage.results.document import to_json
from gputriage.scenarios import get_scenario, list_scenarios
from gputriage.snapshot import bundle
from gputriage.snapshot.bundle import Captured, Snapshot

TOP = "sosreport-gpu07-2026-12-06-abcdefg"
NVSMI = "rtxpro6000-blackwell-q-d-row-remapper-uncorrectable-1-pending-yes"
XID = "gpuop1146-xid48-dbe-xid64-rminitadapter-failed"
LSPCI = "lspci-vvv-gtx1650super-idle-lnksta-2.5gt-downgraded-x16-p5q"


def write_sos(path: Path, files: dict[str, str | bytes], links: dict[str, str] | None = None,
              top: str = TOP, mode: str = "w:xz") -> Path:
    """A sosreport tarball: ``files`` and ``links`` (name -> target) under ``top``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode) as tar:
        folders = {top} | {f"{top}/{p}" for name in files for p in _parents(name)}
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def _parents(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def gpu_host(corpus) -> dict[str, str]:
    """A GPU host's outputs where sos puts them."""
    return {
        "sos_commands/nvidia/nvidia-smi_-q": corpus.sample(NVSMI).text(),
        "var/log/messages": corpus.sample(XID).text(),
        "sos_commands/pci/lspci_-nnvv": corpus.sample(LSPCI).text(),
        "sos_commands/host/hostname": "gpu07\n",
        "sos_commands/kernel/uname_-a": "Linux gpu07 5.14.0-427.el9.x86_64 #1 SMP "
                                        "x86_64 x86_64 x86_64 GNU/Linux\n",
        "usr/lib/os-release": 'NAME="Red Hat Enterprise Linux"\nPRETTY_NAME="Red Hat '
                              'Enterprise Linux 9.4 (Plow)"\n',
    }


HOST_LINKS = {"hostname": "sos_commands/host/hostname", "etc/os-release": "../usr/lib/os-release",
              "uname": "sos_commands/kernel/uname_-a"}


def findings(snapshot) -> list[tuple[str, str, str]]:
    doc = to_json(analyze(snapshot))
    return sorted((f["id"], f["severity"], json.dumps(f.get("scope"), sort_keys=True))
                  for f in doc["findings"])


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# -- (b) a small archive in the real layout --------------------------------------------
def test_every_part_is_read_into_one_host(corpus, tmp_path):
    path = write_sos(tmp_path / f"{TOP}.tar.xz", gpu_host(corpus), HOST_LINKS)
    snap = load_inputs([str(path)])
    assert snap.host_name() == "gpu07"
    for name in ("nvidia_smi_q", "kernel_log", "lspci_nvidia", "uname", "os_release"):
        assert snap.get(name) is not None, name
    assert snap.captures["kernel_log"].origin.endswith(":var/log/messages")
    ids = {f[0] for f in findings(snap)}
    assert {"memory.remap-pending", "xid.48", "xid.64", "driver.gpu-init-failed"} <= ids
    doc = json.loads(json.dumps(to_json(analyze(snap))))
    assert [i["origin"] for i in doc["inputs"]] == [str(path)]  # one host view, one input
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(schemas.bundled("result")).validate(doc)
    missing = next(p for p in snap.problems if "not in this sosreport" in p)
    assert "nvidia-smi --list-gpus" in missing and "nvidia-smi -q" not in missing


@pytest.mark.parametrize("mode,suffix", [("w:gz", ".tar.gz"), ("w:bz2", ".tar.bz2"),
                                         ("w", ".tar")])
def test_any_compression_and_the_unpacked_folder_read_the_same(corpus, tmp_path, mode, suffix):
    files = gpu_host(corpus)
    expected = findings(load_inputs([str(write_sos(tmp_path / "a.tar.xz", files, HOST_LINKS))]))
    other = write_sos(tmp_path / f"b{suffix}", files, HOST_LINKS, mode=mode)
    assert findings(load_inputs([str(other)])) == expected
    folder = tmp_path / "unpacked"
    with tarfile.open(other) as tar:
        tar.extractall(folder, filter="tar")
    assert findings(load_inputs([str(folder / TOP)])) == expected


def test_the_command_a_file_name_stands_for():
    assert command_line("nvidia-smi_nvlink_-s") == ["nvidia-smi nvlink -s"]
    assert command_line("nvidia-smi_--query-gpu_gpu_name_gpu_bus_id_--format_csv")[1] == (
        "nvidia-smi --query-gpu=gpu name gpu bus id --format=csv")
    assert command_line("journalctl_--no-pager_--unit_nvidia-persistenced")[0] == (
        "journalctl --no-pager --unit nvidia-persistenced")


def test_sources_by_file_name_and_the_sources_own_command_first(corpus, tmp_path):
    full = corpus.sample(NVSMI).text()
    files = {
        "sos_commands/nvidia/nvidia-smi_-q": full,
        "sos_commands/nvidia/nvidia-smi_-q_-d_ECC": "==============NVSMI LOG==============\n",
        "sos_commands/nvidia/nvidia-smi_--list-gpus":
            "GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-1b2c)\n",
        "sos_commands/nvidia/nvidia-smi_--query-gpu_gpu_name_gpu_bus_id_--format_csv":
            "name, pci.bus_id\nNVIDIA RTX PRO 6000, 00000000:55:00.0\n",
        "sos_commands/nvidia/journalctl_--no-pager_--unit_nvidia-persistenced":
            "-- No entries --\n",
        "sos_commands/nvidia/systemctl_status_nvidia-persistenced":
            "● nvidia-persistenced.service - NVIDIA Persistence Daemon\n",
        "sos_commands/numa/numactl_--hardware": "available: 1 nodes (0)\n",
        "sos_commands/processor/lscpu": "Architecture: x86_64\n",
        "sos_commands/networking/ip_-o_addr": "1: lo    inet 127.0.0.1/8\n",
    }
    snap = load_inputs([str(write_sos(tmp_path / "s.tar.xz", files))])
    origin = {name: cap.origin.split(":", 1)[1] for name, cap in snap.captures.items()}
    assert origin["nvidia_smi_q"] == "sos_commands/nvidia/nvidia-smi_-q"
    assert origin["nvidia_smi"] == "sos_commands/nvidia/nvidia-smi_--list-gpus"
    assert origin["nvidia_smi_csv"].startswith("sos_commands/nvidia/nvidia-smi_--query-gpu")
    assert origin["persistenced_journal"].endswith("--unit_nvidia-persistenced")
    assert origin["systemctl_persistenced"].endswith("systemctl_status_nvidia-persistenced")
    assert origin["numactl"] == "sos_commands/numa/numactl_--hardware"
    assert snap.text("nvidia_smi_q") == full


def test_a_failed_nvidia_smi_is_the_drivers_failure(corpus, tmp_path):
    """sos keeps what a failing command printed: nvidia-smi's error message in
    nvidia-smi_-q is read as a collected snapshot's failed nvidia-smi is."""
    sample = corpus.sample("mbab101-nvidia-smi-couldnt-communicate")
    message = sample.text().splitlines()[0] + "\n"
    files = {"sos_commands/nvidia/nvidia-smi_-q": message,
             "sos_commands/nvidia/nvidia-smi_nvlink_-s": message}
    snap = load_inputs([str(write_sos(tmp_path / "f.tar.xz", files))])
    assert snap.text("nvidia_smi_q") == message
    assert ("nvidia-smi.cannot-communicate", "critical") in {f[:2] for f in findings(snap)}


def test_the_sections_of_an_older_sos_make_one_query(corpus, tmp_path):
    """sos before 4.5 ran only nvidia-smi -q -d PERFORMANCE, SUPPORTED_CLOCKS and
    PAGE_RETIREMENT: each GPU once, with every section of it."""
    retired = corpus.sample("azurehpc-nvsmi-q-page-retirement-8gpu").text()
    remap = corpus.sample(NVSMI).text()
    files = {"sos_commands/nvidia/nvidia-smi_-q_-d_PAGE_RETIREMENT": retired,
             "sos_commands/nvidia/nvidia-smi_-q_-d_ROW_REMAPPER": remap}
    snap = load_inputs([str(write_sos(tmp_path / "o.tar.xz", files))])
    text = snap.text("nvidia_smi_q") or ""
    assert text.count("GPU 00000001:00:00.0\n") == 1 and "Retired Pages" in text
    assert "Remapped Rows" in text and "Driver Version" in text
    assert "memory.remap-pending" in {f[0] for f in findings(snap)}


def test_the_kernel_log_is_read_once_from_the_fullest_log(corpus, tmp_path):
    syslog = corpus.sample(XID).text()
    dmesg = "".join(line.split(" kernel: ", 1)[-1] + "\n" for line in syslog.splitlines())
    files = {"var/log/messages": syslog, "sos_commands/kernel/dmesg": dmesg}
    snap = load_inputs([str(write_sos(tmp_path / "k.tar.xz", files))])
    assert snap.captures["kernel_log"].origin.endswith(":var/log/messages")
    keys = findings(snap)
    assert [k for k in keys if k[0] == "xid.48"] == [k for k in keys if k[0] == "xid.48"][:1]
    alone = load_inputs([str(write_sos(tmp_path / "d.tar.xz",
                                       {"sos_commands/kernel/dmesg": dmesg}))])
    assert alone.captures["kernel_log"].origin.endswith(":sos_commands/kernel/dmesg")
    assert "xid.48" in {k[0] for k in findings(alone)}


def test_copied_proc_and_sys_trees_follow_links_inside_the_report(tmp_path):
    dev = "sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0"
    files = {
        "sos_commands/host/hostname": "gpu07\n",
        "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX Open Kernel Module for "
                                      "x86_64  570.133.20  Release Build\n",
        "proc/driver/nvidia/gpus/0000:07:00.0/information": "Model: \t\t NVIDIA H100\n",
        "sys/module/nvidia/version": "570.133.20\n",
        f"{dev}/vendor": "0x10de\n", f"{dev}/class": "0x030200\n",
        f"{dev}/current_link_speed": "32.0 GT/s PCIe\n",
        f"{dev}/max_link_speed": "32.0 GT/s PCIe\n",
        "sys/devices/pci0000:00/0000:00:02.0/vendor": "0x8086\n",
        "sys/devices/pci0000:00/0000:00:02.0/class": "0x010802\n",
    }
    links = {"sys/bus/pci/devices/0000:07:00.0": "../../../devices/pci0000:00/0000:00:01.0/"
                                                 "0000:07:00.0",
             "sys/bus/pci/devices/0000:00:02.0": "../../../devices/pci0000:00/0000:00:02.0",
             f"{dev}/driver": "../../../../bus/pci/drivers/nvidia"}
    snap = load_inputs([str(write_sos(tmp_path / "t.tar.xz", files, links))])
    pci = json.loads(snap.text("pci_devices") or "{}")
    assert pci["files"]["0000:07:00.0/vendor"] == "0x10de\n"
    assert pci["links"]["0000:07:00.0/driver"] == "../../../../bus/pci/drivers/nvidia"
    assert not any(rel.startswith("0000:00:02.0") for rel in pci["files"])  # not a GPU/NIC
    gpus = json.loads(snap.text("proc_driver_nvidia_gpus") or "{}")
    assert list(gpus["files"]) == ["0000:07:00.0/information"]
    assert "570.133.20" in (snap.text("proc_driver_nvidia_version") or "")
    assert json.loads(snap.text("sys_module_nvidia") or "{}")["files"] == {
        "nvidia/version": "570.133.20\n"}


def test_fleet_and_diff_take_sosreports(corpus, tmp_path, capsys):
    sick = write_sos(tmp_path / "sick" / f"{TOP}.tar.xz", gpu_host(corpus), HOST_LINKS)
    healthy = dict(gpu_host(corpus))
    del healthy["var/log/messages"]
    healthy["sos_commands/host/hostname"] = "gpu08\n"
    well = write_sos(tmp_path / "sosreport-gpu08-2026-12-06-hijklmn.tar.xz",
                     healthy, HOST_LINKS, top="sosreport-gpu08-2026-12-06-hijklmn")
    with tarfile.open(well) as tar:  # the other one unpacked: fleet walks into neither
        tar.extractall(tmp_path / "well", filter="tar")
    rc, out, err = run(["fleet", str(tmp_path / "sick"), str(tmp_path / "well"), "--json"],
                       capsys)
    assert err == "" and rc == 2, err
    doc = json.loads(out)
    assert doc["nodes"] == 2 and doc["bad_inputs"]["count"] == 0
    by_id = {f["id"]: f["nodes"] for f in doc["findings"]}
    assert by_id["xid.48"] == ["gpu07"] and by_id["memory.remap-pending"] == ["gpu07", "gpu08"]
    rc, out, err = run(["diff", str(well), str(sick), "--json"], capsys)
    assert err == "", err
    assert "xid.48" in out


def test_an_equal_paste_gives_the_same_findings(corpus, tmp_path):
    """analyze of a sosreport finds what analyze of its outputs pasted one by one finds."""
    outputs = {"sos_commands/nvidia/nvidia-smi_-q": corpus.sample(NVSMI).text(),
               "var/log/messages": corpus.sample(XID).text(),
               "sos_commands/pci/lspci_-nnvv": corpus.sample(LSPCI).text()}
    archive = write_sos(tmp_path / "p.tar.xz", outputs)
    pasted = []
    for i, text in enumerate(outputs.values()):
        pasted.append(tmp_path / f"paste{i}.txt")
        pasted[-1].write_text(text)
    from_sos = findings(load_inputs([str(archive)]))
    assert from_sos == findings(load_inputs([str(p) for p in pasted]))
    assert {"memory.remap-pending", "xid.48"} <= {f[0] for f in from_sos}


# -- every scenario's host, written where sos puts each source, finds the same ---------
_PLUGIN = {"nvidia-smi": "nvidia", "lspci": "pci", "numactl": "numa", "uname": "kernel",
           "ibstat": "infiniband", "dmidecode": "hardware", "systemctl": "systemd"}
# what a sosreport never holds: the userspace libraries' names, the collector's environment
_NOT_IN_SOS = ("nvidia_libs", "container_env")


def _sos_name(argv: tuple[str, ...]) -> str:
    """The file name sos gives a command's output (its plugin's _mangle_command)."""
    name = re.sub(r"[^\w\-./]+", "_", " ".join(argv))
    return name.replace("/", ".").strip(" ._-")


def _as_sosreport(payloads: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, str]]:
    files: dict[str, bytes] = {}
    links: dict[str, str] = {}
    for name, data in payloads.items():
        src = sources.get(name)
        if name == "kernel_log":
            files["sos_commands/kernel/dmesg"] = data
        elif src.kind == "command":
            files[f"sos_commands/{_PLUGIN.get(src.argv[0], 'nvidia')}/{_sos_name(src.argv)}"] = data
        elif src.kind == "file":
            files[(src.path or "").lstrip("/")] = data
        else:
            doc = json.loads(data)
            base = (src.path or "").strip("/")
            links.update({f"{base}/{rel}".lstrip("/"): target
                          for rel, target in doc["links"].items()})
            for rel, text in doc["files"].items():  # below a linked entry: at its target
                top, _, leaf = rel.partition("/")
                target = doc["links"].get(top) if leaf else None
                where = (posixpath.normpath(f"{base}/{target}/{leaf}") if target
                         else f"{base}/{rel}")
                files[where.lstrip("/")] = text.encode()
    return files, links


_QUICK = ("gpu-fallen-off-bus", "xid48-row-remap", "ib-port-polling", "pcie-x8-gpu3")


@pytest.mark.parametrize("name", [
    pytest.param(s.name, marks=() if s.name in _QUICK else pytest.mark.slow)
    for s in list_scenarios()])
def test_a_scenarios_host_as_a_sosreport_finds_the_same(name, tmp_path):
    """Each source a scenario renders, written where sos puts it (a command's output
    under the file name sos gives it, copied files and /proc, /sys trees at their
    paths, the kernel log as dmesg), is read back into the same findings."""
    payloads = {n: d for n, d in get_scenario(name).build().items()
                if (sources.get(n).kind in ("command", "file", "tree") or n == "kernel_log")
                and n not in _NOT_IN_SOS}
    files, links = _as_sosreport(payloads)
    snap = load_inputs([str(write_sos(tmp_path / "s.tar.xz", files, links))])
    direct = Snapshot({n: Captured(n, d.decode(), {}, n) for n, d in payloads.items()})
    assert findings(snap) == findings(direct)


# -- (d) bad archives: one line and an exit status ----------------------------------------
def _one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_a_truncated_sosreport_is_one_line(corpus, tmp_path, capsys):
    whole = write_sos(tmp_path / "w.tar.xz", gpu_host(corpus), HOST_LINKS).read_bytes()
    cut = tmp_path / f"{TOP}.tar.xz"
    cut.write_bytes(whole[: len(whole) // 2])
    rc, _, err = run(["analyze", str(cut)], capsys)
    assert rc == 66 and "truncated" in _one_line(err)


def test_a_link_out_of_the_report_is_never_followed(tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off the bus.\n")
    files = {"sos_commands/host/hostname": "gpu07\n"}
    links = {"sos_commands/kernel/dmesg": str(secret),
             "sos_commands/nvidia/nvidia-smi_-q": "../../../../../../../" + str(secret)}
    archive = write_sos(tmp_path / "l.tar.xz", files, links)
    snap = load_inputs([str(archive)])
    assert snap.get("kernel_log") is None and snap.get("nvidia_smi_q") is None
    assert any("nvidia-smi_-q: a link pointing outside the sosreport" in p
               for p in snap.problems)
    folder = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="fully_trusted")
    assert load_inputs([str(folder / TOP)]).get("kernel_log") is None
    rc, out, err = run(["analyze", str(archive)], capsys)
    assert "Traceback" not in err and rc in (0, 3)


def test_a_huge_member_is_not_read_and_a_huge_archive_is_refused(tmp_path, capsys,
                                                                   monkeypatch):
    files = {"sos_commands/host/hostname": "gpu07\n",
             "var/log/messages": "x" * 300_000, "sos_commands/kernel/dmesg": "y\n"}
    archive = write_sos(tmp_path / "h.tar.xz", files)
    small = replace(bundle.BUDGETS, read_cap=64 * 1024, tar_skip=64 * 1024)
    monkeypatch.setattr(bundle, "BUDGETS", small)
    snap = load_inputs([str(archive)])
    assert any("var/log/messages: a member of" in p for p in snap.problems)
    monkeypatch.setattr(bundle, "BUDGETS", replace(small, tar_total=128 * 1024))
    rc, _, err = run(["analyze", str(archive)], capsys)
    assert rc == 66 and "unpack to more than" in _one_line(err)
    monkeypatch.setattr(bundle, "BUDGETS", replace(small, tar_members=4, sos_members=6))
    rc, _, err = run(["analyze", str(archive)], capsys)
    assert rc == 66 and "more than 6 members: not a sosreport" in _one_line(err)


def test_an_archive_of_another_kind_is_one_line(tmp_path, capsys):
    other = write_sos(tmp_path / "photos.tar.xz", {"holiday/readme.txt": "hello\n"}, top="x")
    rc, _, err = run(["analyze", str(other)], capsys)
    assert rc == 66 and "not a gputriage snapshot" in _one_line(err)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "notes.txt").write_text("hello\n")
    rc, _, err = run(["analyze", str(tmp_path / "folder")], capsys)
    assert rc == 66 and "not a gputriage snapshot" in _one_line(err)
    collected = write_sos(tmp_path / "sos-collector-c1.tar.xz",
                          {"sosreport-gpu07-2026-12-06-abc.tar.xz": b"\xfd7zXZ",
                           "sosreport-gpu08-2026-12-06-def.tar.xz": b"\xfd7zXZ",
                           "sos_logs/sos.log": "collect\n"}, top="sos-collector-c1")
    rc, _, err = run(["analyze", str(collected)], capsys)
    assert rc == 66 and "a sos collect archive of 2 hosts' sosreports" in _one_line(err)
    shutil.make_archive(str(tmp_path / "sosreport-gpu07"), "zip", tmp_path / "folder")
    rc, _, err = run(["analyze", str(tmp_path / "sosreport-gpu07.zip")], capsys)
    assert rc == 66 and _one_line(err)


# -- (a) a real sosreport of this machine --------------------------------------------------
@pytest.mark.slow
def test_a_real_sosreport_with_a_gpu_hosts_outputs(corpus, tmp_path):
    """`sos report` of this machine (~10 s: it runs the plugins' commands), then the same
    archive with a GPU host's outputs added in sos's layout."""
    sos = shutil.which("sos")
    if sos is None:
        pytest.skip("sos (Debian's sosreport package) is not installed: .ci/run installs it")
    if os.geteuid() != 0:
        pytest.skip("sos report runs as root only")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([sos, "report", "--batch", "--tmp-dir", str(out), "-o",
                    "kernel,host,release,processor,memory,numa,date"],
                   check=True, capture_output=True, timeout=300)
    real = next(p for p in out.glob("sosreport-*.tar*")
                if p.name.endswith((".tar", ".tar.xz", ".tar.gz", ".tar.bz2")))
    mixed = tmp_path / real.name
    added = {"sos_commands/nvidia/nvidia-smi_-q": corpus.sample(NVSMI).text(),
             "var/log/messages": corpus.sample(XID).text(),
             "sos_commands/pci/lspci_-nnvv": corpus.sample(LSPCI).text()}
    with tarfile.open(real) as src, tarfile.open(mixed, "w:xz") as dst:
        top = src.getmembers()[0].name.split("/")[0]
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        for name, text in added.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(text.encode())
            dst.addfile(info, io.BytesIO(text.encode()))
        hostname = src.extractfile(f"{top}/sos_commands/host/hostname").read().decode().strip()
    own = load_inputs([str(real)])
    assert own.host_name() == hostname
    assert str((own.manifest or {}).get("created")).startswith("20")  # sos's start time
    for name in ("uname", "os_release", "proc_meminfo", "proc_cmdline", "numactl"):
        assert own.get(name) is not None, (name, own.problems)
    assert any("not in this sosreport" in p and "nvidia-smi -q" in p for p in own.problems)
    snap = load_inputs([str(mixed)])
    assert snap.host_name() == hostname
    assert snap.captures["kernel_log"].origin.endswith(":var/log/messages")
    ids = {f[0] for f in findings(snap)}
    assert {"memory.remap-pending", "xid.48", "xid.64"} <= ids


def test_a_folder_with_links_out_loops_and_a_fifo_is_read_safely(tmp_path):
    top = tmp_path / TOP
    (top / "sos_commands" / "nvidia").mkdir(parents=True)
    (top / "sos_commands" / "host").mkdir()
    (top / "sos_commands" / "host" / "hostname").write_text("gpu07\n")
    os.mkfifo(top / "sos_commands" / "nvidia" / "nvidia-smi_-q")
    os.symlink("nvidia-smi_nvlink_-e", top / "sos_commands" / "nvidia" / "nvidia-smi_nvlink_-s")
    os.symlink("nvidia-smi_nvlink_-s", top / "sos_commands" / "nvidia" / "nvidia-smi_nvlink_-e")
    os.symlink("/", top / "sos_commands" / "kernel")
    os.symlink("../../../../../../etc", top / "etc")
    snap = load_inputs([str(top)])
    assert snap.host_name() == "gpu07"
    assert not {"nvidia_smi_q", "nvidia_smi_nvlink_status", "uname", "os_release"} & set(
        snap.captures)
    problems = "\n".join(snap.problems)
    assert "nvidia-smi_-q: not a regular file" in problems
    assert "more than 16 links" in problems


def test_what_sos_cut_to_its_tail_is_read_through_its_link_and_said(corpus, tmp_path):
    """Over its size limit sos stores a file's tail as sos_strings/<plugin>/<name>.tailed
    and links the file's own path to it."""
    files = {"sos_commands/host/hostname": "gpu07\n",
             "sos_strings/logs/var.log.messages.tailed": corpus.sample(XID).text(),
             "sos_strings/nvidia/nvidia-smi_-q.tailed": corpus.sample(NVSMI).text()}
    links = {"var/log/messages": "../../sos_strings/logs/var.log.messages.tailed",
             "sos_commands/nvidia/nvidia-smi_-q": "../../sos_strings/nvidia/nvidia-smi_-q.tailed"}
    snap = load_inputs([str(write_sos(tmp_path / "t.tar.xz", files, links))])
    assert snap.captures["kernel_log"].record["truncated"] is True
    assert snap.get("nvidia_smi_q") is not None
    assert any("var/log/messages: sos kept only its tail" in p for p in snap.problems)
    assert {"xid.48", "memory.remap-pending"} <= {f[0] for f in findings(snap)}
