"""``gputriage weights --model-dir DIR --host-report``: where a model's weights lie on
this host (the mount of the directory, as ``/proc/self/mountinfo`` has it), the free
space there and on local NVMe, and the RAM available to cache them.

The report is lines of ``key: value`` under a header line; the mount lines are
``/proc/self/mountinfo``'s own, so evidence quotes what the kernel printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.paste import PasteDoc

__all__ = ["HEADER", "Mount", "WeightsHost", "claim_weights_host", "classify_mount",
           "parse_mountinfo", "parse_mountinfo_line", "parse_weights_host"]

HEADER = "== gputriage weights: host check =="
_KEY = re.compile(r"^(?P<key>model_dir|model_bytes|mount|free_bytes|local_mount|"
                  r"local_free_bytes|MemAvailable):\s*(?P<value>.*?)\s*$")

# file-system types by how weights on them are read
_NETWORK = {"nfs": "nfs", "nfs4": "nfs", "lustre": "lustre", "ceph": "network",
            "cifs": "network", "smb3": "network", "glusterfs": "network", "gpfs": "network",
            "beegfs": "network", "wekafs": "network", "9p": "network", "virtiofs": "network"}
_OBJECT_FUSE = ("s3fs", "goofys", "mountpoint-s3", "gcsfuse", "blobfuse", "blobfuse2",
                "rclone", "juicefs", "geesefs", "alluxio-fuse", "ossfs", "csi-s3")
# fuseblk: a FUSE file system on a local block device (ntfs-3g, exfat-fuse)
_LOCAL = {"ext4", "xfs", "btrfs", "zfs", "ext3", "f2fs", "fuseblk"}


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo``."""

    mount_point: str
    fs_type: str
    source: str
    options: str
    line: str


def _unescape(text: str) -> str:
    """mountinfo's octal escapes (``\\040`` for a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo_line(line: str) -> Mount:
    """One mountinfo line; ParseError when it lacks the ``-`` separator or fields."""
    fields = line.split()
    try:
        sep = fields.index("-", 6)
        fs_type, source = fields[sep + 1], fields[sep + 2]
    except (ValueError, IndexError):
        raise ParseError(f"not a /proc/self/mountinfo line: {line[:80]!r}") from None
    return Mount(_unescape(fields[4]), fs_type, _unescape(source), fields[5], line)


def parse_mountinfo(text: str) -> list[Mount]:
    """Every mount of ``/proc/self/mountinfo`` (lines that are not mounts are skipped);
    ParseError when there is none."""
    mounts = []
    for line in split_lines(text):
        try:
            mounts.append(parse_mountinfo_line(line))
        except ParseError:
            continue
    if not mounts:
        raise ParseError("no /proc/self/mountinfo line")
    return mounts


def classify_mount(mount: Mount) -> str:
    """How weights on this mount are read: ``local_nvme``, ``local_disk``, ``nfs``,
    ``lustre``, ``network``, ``object_store`` (FUSE over S3-like storage), ``overlay``
    (a container's image layers), ``memory`` (tmpfs) or ``other``."""
    fs = mount.fs_type
    if fs in _NETWORK:
        return _NETWORK[fs]
    if fs.startswith("fuse") and fs != "fuseblk":
        sub = fs.partition(".")[2] or mount.source
        return "object_store" if any(name in sub for name in _OBJECT_FUSE) else "network"
    if fs == "overlay":
        return "overlay"
    if fs in ("tmpfs", "ramfs"):
        return "memory"
    if fs in _LOCAL or mount.source.startswith("/dev/"):
        # device-mapper (/dev/mapper/*, /dev/dm-*: LVM, LUKS) hides the disk under it:
        # a local disk, NVMe or not
        return "local_nvme" if re.match(r"/dev/(nvme|md)", mount.source) else "local_disk"
    return "other"


@dataclass
class WeightsHost:
    """Where the weights lie and what the host has room for."""

    model_dir: str
    model_bytes: int | None = None
    mount: Mount | None = None
    free_bytes: int | None = None
    local_mount: Mount | None = None
    local_free_bytes: int | None = None
    mem_available_kb: int | None = None
    lines: dict[str, str] = field(default_factory=dict)  # key -> its line, for evidence
    problems: list[str] = field(default_factory=list)  # fields that are not numbers

    def unreadable_fields(self) -> list[str]:
        return self.problems

    @property
    def tier(self) -> str | None:
        return classify_mount(self.mount) if self.mount else None

    @property
    def local_tier(self) -> str | None:
        """``local_nvme`` or ``local_disk``: what the staging candidate is."""
        return classify_mount(self.local_mount) if self.local_mount else None


def _number(out: WeightsHost, key: str, value: str) -> int | None:
    """A byte or kB count (``4837212160000``, ``98304000 kB``); None, noted in the
    report's unreadable fields, when it is not one."""
    words = value.split()
    number = strict_int(words[0], signed=False) if words else None
    if number is None:
        out.problems.append(f"{key}: not a number: {value[:40]!r}")
        return None
    return number


def parse_weights_host(text: str) -> WeightsHost:
    """The host report; ParseError without its header or its ``model_dir``."""
    lines = split_lines(text)
    if not any(ln.strip() == HEADER for ln in lines):
        raise ParseError(f"not a weights host report: no '{HEADER}' line")
    values: dict[str, str] = {}
    kept: dict[str, str] = {}
    for line in lines:
        if m := _KEY.match(line):
            values[m.group("key")] = m.group("value")
            kept[m.group("key")] = line
    if not values.get("model_dir"):
        raise ParseError("weights host report without model_dir")
    out = WeightsHost(values["model_dir"], lines=kept)
    if "model_bytes" in values:
        out.model_bytes = _number(out, "model_bytes", values["model_bytes"])
    if "free_bytes" in values:
        out.free_bytes = _number(out, "free_bytes", values["free_bytes"])
    if "local_free_bytes" in values:
        out.local_free_bytes = _number(out, "local_free_bytes", values["local_free_bytes"])
    if "MemAvailable" in values:
        out.mem_available_kb = _number(out, "MemAvailable", values["MemAvailable"])
    if values.get("mount"):
        out.mount = parse_mountinfo_line(values["mount"])
    if values.get("local_mount"):
        out.local_mount = parse_mountinfo_line(values["local_mount"])
    return out


_HEADER_GATE = Gate(literals=(HEADER,))  # a report starts at a free header line


@gated_by(_HEADER_GATE)
def claim_weights_host(doc: PasteDoc) -> None:
    """The report's header line and the ``key: value`` lines under it."""
    if not _HEADER_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and ln.strip() == HEADER:
            doc.claim("weights_host", i, doc.extend(i + 1, lambda s: bool(_KEY.match(s))))
