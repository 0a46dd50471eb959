"""Redaction: each kind of identity replaced, consistently, in its own shape, so a
redacted snapshot analyses the same and holds none of the original values."""

from __future__ import annotations

import io
import ipaddress
import json
import re
import tarfile
import uuid
from pathlib import Path

import pytest
from fakehost import FakeHost

from gputriage import sources
from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError
from gputriage.ingest import load_inputs
from gputriage.model import Result
from gputriage.scenarios import get_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot
from gputriage.snapshot.redact import KINDS, Redactor
from gputriage.snapshot.writer import write_snapshot

UUID_A = "GPU-3f1a2b3c-1234-4abc-8def-0123456789ab"
UUID_B = "GPU-99999999-1234-4abc-8def-0123456789ab"


# -- each kind ---------------------------------------------------------------------------
def test_hostnames_short_fqdn_and_case_with_word_edges():
    r = Redactor(hostnames=["gpu01.example.com"])
    out = r.text("Linux gpu01 5.15\nGPU01.example.com kernel: x\nxgpu01 gpu012 gpu01-ib0\n")
    assert out.splitlines()[:2] == ["Linux host-1 5.15", "host-1.domain.invalid kernel: x"]
    assert out.splitlines()[2] == "xgpu01 gpu012 host-1-ib0"  # other names stay


def test_a_host_name_inside_longer_names_but_a_short_one_only_as_a_word():
    r = Redactor(hostnames=["node7"])
    out = r.text("node7-ib0 bmc_node7 ipmi-node7-mgmt /var/log/node7.log xnode7 node70 N7\n")
    assert out == "host-1-ib0 bmc_host-1 ipmi-host-1-mgmt /var/log/host-1.log xnode7 node70 N7\n"
    short = Redactor(hostnames=["a100"])  # a host named like its GPUs
    assert short.text("NVIDIA A100-SXM4-80GB on a100\n") == "NVIDIA A100-SXM4-80GB on host-1\n"


def test_the_dns_domain_and_every_name_in_it_get_consistent_tokens():
    r = Redactor()
    payloads = {"hostname": b"node7\n", "kernel_log": (
        b"ib0: node7-ib0.corp.example.com up\nssh node8.corp.example.com: ok\n"
        b"mail admin@corp.example.com search corp.example.com\n"
        b"NODE7.Corp.Example.Com. node8 again; node7.tar.gz is a file\n")}
    manifest, out = r.snapshot({"host": "node7", "sources": {}}, payloads)
    assert out["kernel_log"] == (
        b"ib0: host-1-ib0.domain.invalid up\nssh host-2.domain.invalid: ok\n"
        b"mail admin@domain.invalid search domain.invalid\n"
        b"host-1.domain.invalid. host-2 again; host-1.tar.gz is a file\n")
    assert manifest["redacted"]["replaced"]["hostname"] == 3  # node7, node8, the domain


def test_a_domain_is_told_from_file_names_and_the_stack_s_own_domains():
    r = Redactor(hostnames=["gpu01.nvidia.com"])
    text = "nvidia.com/gpu: 8 on gpu01.nvidia.com; gpu01.log.gz gpu01.json\n"
    assert r.text(text) == ("nvidia.com/gpu: 8 on host-1.domain.invalid; host-1.log.gz "
                            "host-1.json\n")
    learned = Redactor()
    learned.learn({"host": "gpu01"}, {"kernel_log": b"gpu01.tar.gz gpu01.service\n"})
    assert learned.text("a.tar.gz x.service") == "a.tar.gz x.service"


def test_mac_addresses_in_every_notation_share_one_token_in_their_own_notation():
    r = Redactor()
    out = r.text("a 3c:fd:fe:12:34:56 b 3C-FD-FE-12-34-56 c 3cfd.fe12.3456 d 3cfd.fe12.3457\n"
                 "bcast FF-FF-FF-FF-FF-FF ver 535.104.05 date 2024-01-02 "
                 "dsn 08-c0-eb-03-00-a4-13-e3\n")
    assert out.splitlines()[0] == ("a 02:00:00:00:00:01 b 02-00-00-00-00-01 c 0200.0000.0001 "
                                   "d 0200.0000.0002")
    assert out.splitlines()[1] == ("bcast FF-FF-FF-FF-FF-FF ver 535.104.05 date 2024-01-02 "
                                   "dsn 08-c0-eb-03-00-a4-13-e3")


def test_generic_names_are_not_redacted():
    r = Redactor(hostnames=["localhost", "ubuntu"], users=["root", "nvidia-persistenced"])
    text = "ID=ubuntu\nUser=nvidia-persistenced\nroot=/dev/md0 localhost\n"
    assert r.text(text) == text


def test_ipv4_addresses_but_not_versions_loopback_or_masks():
    r = Redactor()
    text = ("inet 10.1.2.3/24 peer 192.168.7.40, again 10.1.2.3. vbios 96.00.89.00.01 "
            "nvml 12.550.54.15 lo 127.0.0.1 mask 255.255.255.0 bad 256.1.2.3 ver 1.02.3.4")
    out = r.text(text)
    assert "inet 198.18.0.1/24 peer 198.18.0.2, again 198.18.0.1." in out
    for kept in ("96.00.89.00.01", "12.550.54.15", "127.0.0.1", "255.255.255.0",
                 "256.1.2.3", "1.02.3.4"):
        assert kept in out


def test_ipv6_addresses_keep_their_form_and_leave_pci_ids_times_macs():
    r = Redactor()
    text = ("a 2a01:4f8:1:2::5 b fe80:0000:0000:0000:a288:c203:00a4:13e3 c ::1 "
            "pci 0000:18:00.0 at 09:30:00 mac aa:bb:cc:dd:ee:ff std::vector")
    out = r.text(text)
    assert re.search(r"a 2001:db8::1 b fe80(:0000){6}:000\d c ::1", out), out
    assert "pci 0000:18:00.0 at 09:30:00" in out and "std::vector" in out
    assert "aa:bb:cc:dd:ee:ff" not in out and "mac 02:00:00:00:00:01" in out


def test_mac_addresses_and_guids_keep_their_length():
    r = Redactor()
    ipoib = ":".join(["80", "00", "10", "87", "fe", "80"] + ["00"] * 6 + ["a0", "88", "c2",
                                                                         "03", "00", "a4",
                                                                         "13", "e3"])
    out = r.text(f"ether 3C:FD:FE:12:34:56 ipoib {ipoib} none 00:00:00:00:00:00\n"
                 "Node GUID: 0xa088c20300a413e3\n")
    assert "ether 02:00:00:00:00:01 " in out and "none 00:00:00:00:00:00" in out
    redacted_ipoib = out.split("ipoib ")[1].split()[0]
    assert redacted_ipoib != ipoib and len(redacted_ipoib) == len(ipoib)
    assert "Node GUID: 0x0200000000000001" in out


def test_serial_numbers_in_xml_text_json_lspci_and_dmidecode():
    r = Redactor()
    out = r.text("<serial>1654923048802</serial>\n"
                 "    Serial Number                         : 1654923048802\n"
                 "\t\t\t[SN] Serial number: MT2210X12345\n"
                 "\tCapabilities: [150 v1] Device Serial Number 08-c0-eb-03-00-a4-13-e3\n"
                 "\tSerial Number: Not Specified\n"
                 "Serial bus controller [0c80]: Intel\n"
                 "NVRM: GPU 0000:9a:00.0: GPU serial number is 1654923048802.\n")
    assert "<serial>0000000000001</serial>" in out
    assert "Serial Number                         : 0000000000001" in out  # same serial
    assert "Serial number: REDACTED-SN-0002" in out
    assert "Device Serial Number 00-00-00-00-00-00-00-03" in out
    assert "Serial Number: Not Specified" in out
    assert "Serial bus controller [0c80]: Intel" in out
    assert "GPU serial number is 0000000000001." in out
    doc = json.loads(r.payload(b'{"gpus": [{"serial": "1654923048802", "index": 0}]}', True))
    assert doc == {"gpus": [{"serial": "0000000000001", "index": 0}]}


def test_gpu_and_mig_uuids_stay_uuid_shaped():
    r = Redactor()
    out = r.text(f"{UUID_A} {UUID_B} MIG-{UUID_A[4:]} GPU-{UUID_A[4:].upper()}")
    first, second, mig, upper = out.split()
    assert first != second and upper == first and mig == "MIG-" + first[4:]
    for token in (first, second):
        assert token.startswith("GPU-") and str(uuid.UUID(token[4:])) == token[4:]


def test_user_names_from_paths_and_fields_are_replaced_everywhere():
    r = Redactor()
    payloads = {"proc_cmdline": b"BOOT_IMAGE=/home/alice/vmlinuz ro",
                "kernel_log": b"audit: USER=bob cmd=x\nalice logged in; bob too\nroot ok\n"}
    manifest, out = r.snapshot({"host": "n1", "sources": {}}, payloads)
    assert out["proc_cmdline"] == b"BOOT_IMAGE=/home/user-1/vmlinuz ro"
    assert out["kernel_log"] == b"audit: USER=user-2 cmd=x\nuser-1 logged in; user-2 too\nroot ok\n"
    assert manifest["redacted"]["replaced"]["user"] == 2


# -- consistency and format ----------------------------------------------------------------
def test_one_value_one_token_across_the_whole_snapshot():
    r = Redactor(hostnames=["n7"])
    payloads = {"uname": f"Linux n7 10.0.0.9 {UUID_A}\n".encode(),
                "nvidia_smi_q": f"GPU UUID : {UUID_A}\nGPU UUID : {UUID_B}\n".encode(),
                "cdi_specs": json.dumps({"files": {"etc/cdi/x.json": f"n7\n10.0.0.9 {UUID_A}"}},
                                        indent=1).encode()}
    _, out = r.snapshot({"host": "n7", "sources": {}}, payloads)
    uname = out["uname"].decode().split()
    files = json.loads(out["cdi_specs"])["files"]["etc/cdi/x.json"].split()
    assert uname[1:] == files == ["host-1", "198.18.0.1", uname[3]]
    assert out["nvidia_smi_q"].decode().split("\n")[0].endswith(uname[3])
    assert uname[3] not in out["nvidia_smi_q"].decode().split("\n")[1]


def test_json_sources_stay_json_and_a_name_after_an_escape_is_found():
    r = Redactor(hostnames=["n7"])
    tree = {"files": {"mlx5_0/node_desc": "n7 mlx5_0\n", "x": "a\nn7\tb"}, "links": {}}
    out = json.loads(r.payload(json.dumps(tree).encode(), is_json=True))
    assert out["files"] == {"mlx5_0/node_desc": "host-1 mlx5_0\n", "x": "a\nhost-1\tb"}
    assert r.payload(b"NVML init failed on n7", is_json=True) == b"NVML init failed on host-1"


def test_the_manifest_says_it_was_redacted_and_keeps_no_mapping():
    r = Redactor()
    manifest, _ = r.snapshot({"host": "secret-node", "sources": {}, "boot_id": "b"},
                             {"uname": b"Linux secret-node 10.9.8.7\n"})
    assert manifest["host"] == "host-1" and manifest["boot_id"] == "b"
    assert manifest["redacted"]["by"] == "gputriage"
    assert manifest["redacted"]["kinds"] == list(KINDS)
    text = json.dumps(manifest)
    assert "secret-node" not in text and "10.9.8.7" not in text


# -- a whole snapshot ----------------------------------------------------------------------
def _redacted_copy(src: Path, out: Path) -> Path:
    manifest = json.loads((src / "manifest.json").read_text())
    payloads = {name: (src / sources.get(name).filename).read_bytes()
                for name, rec in manifest["sources"].items() if rec.get("file")}
    return write_snapshot(out, manifest, payloads, redactor=Redactor())


def _verdict(path: Path) -> tuple[list[tuple[str, str]], int]:
    return _summary(analyze(Snapshot.load(path)))


def _summary(result: Result) -> tuple[list[tuple[str, str]], int]:
    return sorted((f.id, str(f.severity)) for f in result.findings), len(result.gpus)


def _all_bytes(path: Path) -> bytes:
    if path.is_dir():
        return b"\n".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
    with tarfile.open(path) as tar:
        return b"\n".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())


_IPV4 = re.compile(rb"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def _originals(name: str, plain: bytes) -> set[bytes]:
    host = get_scenario(name).host()
    found = {host.hostname.encode()}
    for gpu in host.gpus:
        found |= {gpu.uuid.encode(), gpu.uuid[4:].encode(), gpu.serial.encode()}
    for nic in host.nics:
        found.add(f"{nic.node_guid:016x}".encode())
    for ip in _IPV4.findall(plain):
        try:
            addr = ipaddress.ip_address(ip.decode())
        except ValueError:
            continue  # 96.00.74.00: a version, not an address
        if not (addr.is_loopback or addr.is_unspecified or ip.startswith(b"255.")):
            found.add(ip)
    return found


@pytest.mark.parametrize("name", [s.name for s in list_scenarios()])
def test_a_redacted_scenario_analyses_the_same_and_holds_no_original(tmp_path, analysed, name):
    plain = analysed.scenario_dir(name)
    redacted = _redacted_copy(plain, tmp_path / "redacted.tar.gz")
    assert _verdict(redacted) == _summary(analysed.result(name))
    data = _all_bytes(redacted)
    originals = _originals(name, _all_bytes(plain))
    assert len(originals) >= 2 + 16  # host, 8 GPUs with uuid and serial at least
    assert [o for o in originals if o.lower() in data.lower()] == []


def test_collect_redact_through_the_cli(tmp_path):
    host = FakeHost(tmp_path / "root", commands={
        ("uname", "-a"): (0, "Linux secret-17 6.1.0 x86_64\n"),
        ("nvidia-smi",): (255, f"Unable to determine the device handle for {UUID_A}\n")})
    host.write("/proc/sys/kernel/hostname", "secret-17\n")
    host.write("/proc/cmdline", "BOOT_IMAGE=/home/carol/vmlinuz ip=10.20.30.40 ro\n")
    host.write("/etc/cdi/nvidia.json", json.dumps({"devices": [{"name": UUID_A}]}))
    plain, redacted = tmp_path / "plain.tar.gz", tmp_path / "red.tar.gz"
    err = io.StringIO()
    for argv in (["collect", "-o", str(plain)], ["collect", "--redact", "-o", str(redacted)]):
        assert main(argv, Environment(stdout=io.StringIO(), stderr=err, host=host)) == 0
    assert _verdict(redacted) == _verdict(plain)
    data = _all_bytes(redacted)
    for original in (b"secret-17", b"carol", b"10.20.30.40", UUID_A[4:].encode()):
        assert original in _all_bytes(plain) and original not in data
    assert Snapshot.load(redacted).manifest["redacted"]["replaced"]["hostname"] >= 1


@pytest.mark.parametrize("category", ["1", "2", "4"])
def test_real_captures_analyse_the_same_redacted(corpus, tmp_path, category):
    compared = 0
    for sample in corpus.category(category):
        try:
            before = analyze(load_inputs([str(sample.path)]))
        except InputError:
            continue  # not read before redaction either: nothing to compare
        copy = tmp_path / sample.name
        copy.write_bytes(Redactor().payload(sample.path.read_bytes()))
        after = analyze(load_inputs([str(copy)]))
        assert (sorted(f.id for f in after.findings), len(after.gpus)) == \
            (sorted(f.id for f in before.findings), len(before.gpus)), sample.name
        compared += 1
    assert compared >= 5


def test_check_redact_reports_no_identity_and_records_no_history(tmp_path):
    host = FakeHost(tmp_path / "root", commands={("uname", "-a"): (0, "Linux secret-17 6.1\n")})
    host.write("/proc/sys/kernel/hostname", "secret-17\n")
    out = io.StringIO()
    code = main(["check", "--json", "--redact"],
                Environment(stdout=out, stderr=io.StringIO(), host=host))
    assert code in (0, 1, 2, 3) and "secret-17" not in out.getvalue()
    assert json.loads(out.getvalue())["manifest"]["host"] == "host-1"
    assert not (tmp_path / "state").exists()  # a redacted check is not history
