"""Host configuration files: the kernel command line, the transparent hugepage
mode, ``kernel.numa_balancing``, the cgroup v2 controllers and
``/proc/self/cgroup``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.text.fields import split_lines

__all__ = [
    "CgroupLine",
    "HugepageRequest",
    "KernelCmdline",
    "parse_cgroup_controllers",
    "parse_cmdline",
    "parse_numa_balancing",
    "parse_self_cgroup",
    "parse_size_kb",
    "parse_thp",
]

_PROMPT = re.compile(r"^\S{0,80}[#$]\s+(?:sudo\s+)?cat\s+\S*cmdline\s*$")
_SIZE = re.compile(r"^\s*(?P<n>[0-9]{1,15})\s*(?P<u>[kKmMgGtT]?)[bB]?\s*$")
_UNIT = {"": 1 / 1024, "k": 1, "m": 1024, "g": 1024 ** 2, "t": 1024 ** 3}
_NODE_COUNT = re.compile(r"^[0-9]{1,5}:[0-9]{1,12}(?:,[0-9]{1,5}:[0-9]{1,12})*$")
_THP_WORD = re.compile(r"^\[?[a-z+_-]{1,24}\]?$")
_CONTROLLER = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_CGROUP_LINE = re.compile(r"^(?P<id>[0-9]{1,6}):(?P<ctl>[^:]*):(?P<path>.*)$")


def parse_size_kb(text: str | None) -> int | None:
    """A kernel memparse size (``1G``, ``2M``, ``2048k``, ``1GB``) -> kB; None when bad."""
    m = _SIZE.match(text or "")
    if not m:
        return None
    kb = int(m.group("n")) * _UNIT[m.group("u").lower()]
    return int(kb) if kb >= 1 else None


@dataclass(frozen=True)
class HugepageRequest:
    """One ``hugepages=`` boot parameter, with the page size it applies to.

    ``size_kb`` is None when no ``hugepagesz=`` precedes it and no
    ``default_hugepagesz=`` is given: the architecture's default size.
    ``per_node`` holds the ``hugepages=0:N,1:M`` form (node -> pages).
    """

    size_kb: int | None
    count: int
    text: str  # e.g. "hugepagesz=1G hugepages=16"
    per_node: dict[int, int] = field(default_factory=dict)


@dataclass
class KernelCmdline:
    """The kernel command line: ``key[=value]`` parameters, in order, repeats kept."""

    text: str = ""
    params: list[tuple[str, str | None]] = field(default_factory=list)

    def has(self, key: str) -> bool:
        """Whether the parameter appears at all."""
        return any(k == key for k, _ in self.params)

    def values(self, key: str) -> list[str | None]:
        """Every value of a parameter, in order (None for a bare flag)."""
        return [v for k, v in self.params if k == key]

    def get(self, key: str) -> str | None:
        """The last value of a parameter (the kernel honours the last one)."""
        vals = self.values(key)
        return vals[-1] if vals else None

    def token(self, key: str) -> str | None:
        """The parameter as written (``intel_iommu=on``), last occurrence."""
        for k, v in reversed(self.params):
            if k == key:
                return k if v is None else f"{k}={v}"
        return None

    def hugepage_requests(self) -> list[HugepageRequest]:
        """The ``hugepages=`` requests, each tied to the preceding ``hugepagesz=``."""
        default = parse_size_kb(self.get("default_hugepagesz"))
        size: int | None = None
        size_text = ""
        out: list[HugepageRequest] = []
        for k, v in self.params:
            if k == "hugepagesz":
                size, size_text = parse_size_kb(v), f"hugepagesz={v} "
                continue
            if k != "hugepages" or v is None:
                continue
            per_node: dict[int, int] = {}
            if _NODE_COUNT.match(v):
                for pair in v.split(","):
                    node, count = pair.split(":")
                    per_node[int(node)] = per_node.get(int(node), 0) + int(count)
                total = sum(per_node.values())
            elif v.isascii() and v.isdigit() and len(v) <= 12:
                total = int(v)
            else:
                continue
            applies = size if size is not None else default
            text = f"{size_text}hugepages={v}" if size is not None else f"hugepages={v}"
            out.append(HugepageRequest(applies, total, text, per_node))
            size, size_text = None, ""
        return out


def _tokens(line: str) -> list[str]:
    """Split like the kernel does: on blanks, except inside double quotes."""
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in line:
        if ch == '"':
            quoted = not quoted
            continue
        if ch.isspace() and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def parse_cmdline(text: str) -> KernelCmdline:
    """Parse ``/proc/cmdline`` into ordered ``(key, value)`` pairs.

    A bare flag (``quiet``) has value None; ``key=`` gives ``""``; quoted values
    keep their spaces; everything after ``--`` (init's arguments) is ignored. A
    ``$ cat /proc/cmdline`` prompt line is skipped. Empty text gives an empty
    result; text of several lines is not a command line and raises ParseError.
    """
    lines = [ln.strip() for ln in split_lines(text.replace("\x00", " ")) if ln.strip()]
    lines = [ln for ln in lines if not _PROMPT.match(ln)]
    if not lines:
        return KernelCmdline()
    if len(lines) > 1:
        raise ParseError(f"a kernel command line is one line; got {len(lines)} lines")
    cmd = KernelCmdline(text=lines[0])
    for tok in _tokens(lines[0]):
        if tok == "--":
            break
        key, sep, value = tok.partition("=")
        if not key:
            continue
        cmd.params.append((key, value if sep else None))
    return cmd


def parse_thp(text: str) -> str | None:
    """The selected mode of a transparent hugepage file: ``"always [madvise] never"``
    -> ``"madvise"`` (also for the ``defrag`` file). Empty text gives None; text
    without exactly one bracketed choice raises ParseError."""
    words = text.split()
    if not words:
        return None
    if len(words) > 12 or not all(_THP_WORD.match(w) for w in words):
        raise ParseError("not a transparent_hugepage mode list (e.g. 'always [madvise] never')")
    chosen = [w[1:-1] for w in words if w.startswith("[") and w.endswith("]") and len(w) > 2]
    if len(chosen) != 1:
        raise ParseError("transparent_hugepage mode list without one [selected] mode")
    return chosen[0]


def parse_numa_balancing(text: str) -> int | None:
    """``kernel.numa_balancing`` (0 off, 1 normal, 2 memory tiering, 3 both).
    Empty text gives None; anything but one small integer raises ParseError."""
    v = text.strip()
    if not v:
        return None
    if not (v.isascii() and v.isdigit() and len(v) <= 3):
        raise ParseError(f"kernel.numa_balancing is a number, got {v[:40]!r}")
    return int(v)


def parse_cgroup_controllers(text: str) -> list[str]:
    """The cgroup v2 controllers (``cpuset cpu io memory hugetlb pids rdma misc``).
    Empty text (no controller enabled, as in many containers) gives []; words
    that are not controller names raise ParseError."""
    words = text.split()
    bad = [w for w in words if not _CONTROLLER.match(w)]
    if bad:
        raise ParseError(f"not a cgroup.controllers list: {bad[0][:40]!r}")
    return words


@dataclass(frozen=True)
class CgroupLine:
    """One ``/proc/self/cgroup`` line: ``hierarchy-id:controllers:path``."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str
    line: str

    @property
    def is_v1(self) -> bool:
        """A cgroup v1 hierarchy (v2's unified one is ``0::/path``)."""
        return self.hierarchy != 0 or bool(self.controllers)


def parse_self_cgroup(text: str) -> list[CgroupLine]:
    """Parse ``/proc/self/cgroup``; lines not in ``id:controllers:path`` form are
    skipped. Empty text gives []; text without one such line raises ParseError."""
    out: list[CgroupLine] = []
    for raw in split_lines(text):
        m = _CGROUP_LINE.match(raw.strip())
        if not m:
            continue
        ctl = tuple(c for c in m.group("ctl").split(",") if c)
        out.append(CgroupLine(int(m.group("id")), ctl, m.group("path"), raw.strip()))
    if text.strip() and not out:
        raise ParseError("not /proc/self/cgroup: no 'id:controllers:path' line")
    return out
