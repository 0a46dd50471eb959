"""A sosreport (its tarball, ``.tar.xz``/``.gz``/``.bz2``/plain, or its unpacked folder)
read as one host's snapshot: each part gputriage knows becomes the source it is, and
the parts it did not find are named in the snapshot's problems.

Where each part comes from (the files read through :class:`gputriage.snapshot.sos.SosFiles`,
within the load budgets; nothing is extracted):

* a command's output, ``sos_commands/<plugin>/<file>``: sos names the file after the
  command line (each run of characters other than letters, digits, ``_``, ``-``,
  ``.`` and ``/`` becomes ``_``, each ``/`` a ``.``), so the file name is read back
  as a command line and matched like a pasted prompt line or a bug-report command
  section (:func:`gputriage.text.prompts.source_for_command`, or the source's own
  argv): ``nvidia/nvidia-smi_-q`` is ``nvidia_smi_q``, ``kernel/uname_-a`` is
  ``uname``, ``nvidia/journalctl_--no-pager_--unit_nvidia-persistenced`` is
  ``persistenced_journal``. When several files give one source, the one whose command
  is the source's own (``nvidia-smi -q`` before ``nvidia-smi -q -d ECC``), then the
  shortest, is read: two readings of one state are never joined (but the
  ``nvidia-smi -q -d SECTION`` outputs of an older sos, without a whole ``-q``, make
  one document, each GPU once with all its sections). What a failing command printed
  is its output, as in a collected snapshot (nvidia-smi's error message in
  ``nvidia-smi_-q`` is the driver's failure).
* a copied file at its own path (``proc/modules``, ``etc/os-release``,
  ``proc/driver/nvidia/version``...), links inside the report followed;
* a tree source from the copied ``/proc`` and ``/sys`` files its globs match
  (``proc/driver/nvidia/gpus/*/information``, ``sys/module/nvidia*/version``...),
  links kept as links; a folder sos copied where nothing matches gives an empty tree
  (no ``sys/module/nvidia*`` beside the other modules: none is loaded);
* outputs holding several sources (the full ``lspci -nnvv``, ``dmidecode``) read as
  a paste of them would be (the detectors of :mod:`gputriage.ingest.detect`); a full
  ``lspci`` without NVIDIA (Mellanox) functions says there is none;
* the kernel log: ONE of the logs that hold it, the first found of
  :data:`KERNEL_LOGS` that has kernel lines (the same boot read twice, as dmesg and
  as syslog, would count every event twice), read as a paste of it; the other sources
  the detectors find in it fill what no file gave;
* a file sos cut to its size limit (stored as ``sos_strings/<plugin>/<name>.tailed``,
  its own path a link to it) is read through the link, marked truncated and named in
  the problems;
* the host name: the report's ``hostname`` (``sos_commands/host/hostname``), else
  ``/etc/hostname``, ``/proc/sys/kernel/hostname``, else ``uname -a``'s second word.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fnmatch import fnmatchcase

from gputriage import sources
from gputriage.errors import InputError
from gputriage.io import safejson
from gputriage.io.inputs import human
from gputriage.snapshot.budget import Budget, Got
from gputriage.snapshot.bundle import Captured, Snapshot, decode
from gputriage.snapshot.sos import MAX_GLOB, SosFiles
from gputriage.text.prompts import source_for_command

__all__ = ["KERNEL_LOGS", "PARTS", "command_line", "join_smi_sections", "read_sosreport"]

COMMANDS = "sos_commands"
Detect = Callable[[str], tuple[list[tuple[str, str]], dict[str, dict[str, str]]]]

# the logs that hold the kernel's lines, the fullest first: several boots with their
# host and time (syslog), then the journal, then the current boot's ring buffer
KERNEL_LOGS = ("var/log/kern.log", "var/log/messages", "var/log/syslog",
               "sos_commands/logs/journalctl_--no-pager",
               "sos_commands/logs/journalctl_--no-pager_--catalog_--boot",
               "sos_commands/logs/journalctl_--no-pager_--boot",
               "sos_commands/kernel/dmesg", "sos_commands/kernel/dmesg_-T", "var/log/dmesg")
_HOSTNAMES = ("hostname", "sos_commands/host/hostname", "sos_commands/general/hostname",
              "etc/hostname", "proc/sys/kernel/hostname")
# outputs that hold several sources: read as a paste of them (command-line globs)
_AS_PASTE = ("lspci *-*v*", "dmidecode")
# what a report of a GPU host should hold: (sources, where sos puts it); the missing
# ones are named in the snapshot's problems
PARTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("nvidia_smi_q", "nvidia_smi_q_xml"), "nvidia-smi -q (sos's nvidia plugin)"),
    (("nvidia_smi",), "nvidia-smi --list-gpus (nvidia plugin)"),
    (("kernel_log",), "a kernel log (dmesg, the journal, /var/log/messages, syslog or "
                      "kern.log: kernel and logs plugins)"),
    (("lspci_nvidia",), "lspci -nnvv with NVIDIA functions (pci plugin)"),
    (("proc_driver_nvidia_version",), "/proc/driver/nvidia/version (kernel plugin)"),
    (("proc_modules",), "lsmod or /proc/modules (kernel plugin)"),
    (("numactl",), "numactl --hardware or lscpu (numa, processor plugins)"),
    (("uname",), "uname -a (kernel plugin)"),
    (("os_release",), "/etc/os-release (release plugin)"),
    (("proc_cmdline",), "/proc/cmdline (kernel plugin)"),
    (("proc_meminfo",), "/proc/meminfo (memory plugin)"),
)
_IB_PART = (("ibstat",), "ibstat (infiniband plugin)")
_NIC_VENDORS = ("0x10de", "0x15b3")  # NVIDIA, Mellanox / NVIDIA networking
_SMI_SECTION = re.compile(r"nvidia-smi -q -d [A-Z][A-Z ]*")
_SMI_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$")
_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}")
_LONG_OPTION = re.compile(r"(?<![^_])(--[A-Za-z0-9][A-Za-z0-9-]*)_(?=[^-_])")


def command_line(file_name: str) -> list[str]:
    """The command lines a ``sos_commands`` file name may stand for: its words, then the
    same with ``--option=value`` put back (sos wrote ``=`` as ``_`` too)."""
    plain = " ".join(w for w in file_name.split("_") if w)
    valued = " ".join(w for w in _LONG_OPTION.sub(r"\1=", file_name).split("_") if w)
    return [plain] if valued == plain else [plain, valued]


def _command_source(line: str) -> str | None:
    """The source a command line gives: its own argv, else the aliases' match."""
    words = tuple(line.split())
    for src in sources.SOURCES:
        if src.kind in ("command", "input") and src.argv == words:
            return src.name
    return source_for_command(line)


def _lspci_of(line: str) -> str | None:
    """``lspci -d VENDOR:`` of NVIDIA or Mellanox functions (sos writes ``-d_10de``)."""
    words = line.split()
    if words[:1] != ["lspci"] or "-d" not in words:
        return None
    vendor = words[words.index("-d") + 1] if words[-1] != "-d" else ""
    return {"10de": "lspci_nvidia", "15b3": "lspci_mellanox"}.get(vendor.split(":")[0])


class _Plan:
    """Which file gives each source, and the rank that chose it (lower wins)."""

    def __init__(self) -> None:
        self.chosen: dict[str, tuple[tuple[int, int, str], str, str]] = {}
        self.pastes: list[tuple[str, str]] = []  # (path, command) read as a paste
        self.sections: list[str] = []  # nvidia-smi -q -d SECTION outputs

    def offer(self, name: str, rank: tuple[int, int, str], path: str, target: str) -> None:
        held = self.chosen.get(name)
        if held is None or rank < held[0]:
            self.chosen[name] = (rank, path, target)

    def parts_of_smi_q(self) -> list[str]:
        """The ``nvidia-smi -q -d SECTION`` files to join when no whole ``nvidia-smi -q``
        is there (sos before 4.5 ran only some sections)."""
        held = self.chosen.get("nvidia_smi_q")
        if held is None or held[0][0] == 0 or len(self.sections) < 2:
            return []
        return sorted(self.sections)


def _commands(files: SosFiles, plan: _Plan) -> None:
    """Every ``sos_commands/<plugin>/<file>`` whose command gives a known source."""
    for plugin in files.children(COMMANDS):
        folder = f"{COMMANDS}/{plugin}"
        for name in files.children(folder):
            path = f"{folder}/{name}"
            for line in command_line(name):
                if any(fnmatchcase(line, pat) for pat in _AS_PASTE) and not (
                        {"-t", "-d"} & set(line.split())):
                    plan.pastes.append((path, line))
                    break
                source = _command_source(line) or _lspci_of(line)
                if source is None or source == "kernel_log":
                    continue
                own = sources.get(source).argv == tuple(line.split())
                plan.offer(source, (0 if own else 1, len(line.split()), name), path, line)
                if _SMI_SECTION.fullmatch(line):
                    plan.sections.append(path)
                break


def _copied(files: SosFiles, plan: _Plan) -> None:
    """Files sos copied at their own paths, and the trees their globs make."""
    for src in sources.SOURCES:
        if src.kind == "file" and src.path and src.name != "hostname":
            rel = src.path.lstrip("/")
            if files.is_file(rel):
                plan.offer(src.name, (0, 0, rel), rel, src.path)
        for alias in src.aliases:
            if alias.startswith("/") and src.kind != "tree" and src.name != "kernel_log":
                for rel in files.glob(alias.lstrip("/"))[:1]:
                    if files.is_file(rel):
                        plan.offer(src.name, (1, 0, rel), rel, "/" + rel)


class _Tree:
    """A tree source's files as planned: its links, the files to read, and whether sos
    copied its folder at all."""

    def __init__(self, files: SosFiles, src: sources.Source) -> None:
        self.src = src
        self.base = (src.path or "/").strip("/")
        self.links: dict[str, str] = {}
        self.wanted: list[str] = []
        matched: list[str] = []
        for pattern in src.globs:
            matched += files.glob(f"{self.base}/{pattern}" if self.base else pattern)
        for path in sorted(set(matched))[:MAX_GLOB]:
            folder, _, leaf = path.rpartition("/")
            real, _ = files.resolve(folder)
            kind, target = files.entry(f"{real}/{leaf}" if real else leaf)
            if kind == "link":
                self.links[self.rel(path)] = target
            elif kind == "file":
                self.wanted.append(path)
        real = files.resolve(self.base)[0] if self.base else None
        self.held = bool(matched) or (real is not None and files.entry(real)[0] == "dir")

    def rel(self, path: str) -> str:
        return path[len(self.base) + 1:] if self.base else path

    def doc(self, got: dict[str, Got]) -> str | None:
        """The JSON document collection writes (None: sos copied none of it); a folder
        sos copied where nothing matched is an empty tree (none is there)."""
        if not self.held:
            return None
        docs: dict[str, dict[str, str]] = {"files": {}, "links": dict(self.links),
                                           "errors": {}}
        for path in self.wanted:
            item = got[path]
            if item.data is None:
                docs["errors"][self.rel(path)] = item.reason or "absent"
            else:
                docs["files"][self.rel(path)] = decode(item.data)
        if self.src.select in _SELECTED:
            _keep_gpus_and_nics(docs, paths=self.src.select == "gpu_and_nic_paths")
        return json.dumps(docs, indent=1, sort_keys=True)


# the tree selections collection makes (collect/readers.py), done again on sos's copy
_SELECTED = ("gpu_and_nic_functions", "gpu_and_nic_paths")
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _keep_gpus_and_nics(docs: dict[str, dict[str, str]], *, paths: bool) -> None:
    """The PCI functions collection keeps: NVIDIA, Mellanox and network-class ones, and
    with ``paths`` the bridges on their way up (the addresses in each one's link)."""
    keep: set[str] = set()
    for rel, text in docs["files"].items():
        top, _, leaf = rel.partition("/")
        value = text.strip().lower()
        if (leaf == "vendor" and value in _NIC_VENDORS) or (leaf == "class"
                                                             and value.startswith("0x02")):
            keep.add(top)
    if paths:
        for top in list(keep):
            parts = docs["links"].get(top, "").split("/")[:-1]
            keep.update(part for part in parts if _PCI_ADDRESS.match(part))
    for table in docs.values():
        for rel in [r for r in table if r.partition("/")[0] not in keep]:
            del table[rel]


def _record(path: str, target: str, text: str, truncated: bool) -> dict:
    return {"kind": "sosreport", "origin": path, "target": target, "rc": None,
            "duration_s": None, "bytes": len(text.encode("utf-8", errors="replace")),
            "truncated": truncated, "error": None, "error_detail": None, "file": None}


class _Builder:
    """The captures of one report as they are read."""

    def __init__(self, files: SosFiles, detect: Detect) -> None:
        self.files = files
        self.detect = detect
        self.origin = files.origin
        self.captures: dict[str, Captured] = {}
        self.problems: list[str] = []
        self.tailed: set[str] = set()  # files sos cut to their tail

    def text_of(self, path: str, got: Got) -> str | None:
        if got.data is None:
            if got.reason:
                self.problems.append(f"{self.origin}: {path}: {got.reason}: not read")
            return None
        if got.size > len(got.data):
            self.problems.append(f"{self.origin}: {path}: {human(got.size)}, only the last "
                                 f"{human(len(got.data))} read")
        real = self.files.resolve(path)[0] or ""
        if real.endswith(".tailed") and path not in self.tailed:
            self.tailed.add(path)  # sos_strings/<plugin>/<name>.tailed: sos cut it
            self.problems.append(f"{self.origin}: {path}: sos kept only its tail (its size "
                                 "limit; sos report --all-logs keeps logs whole)")
        return decode(got.data)

    def add(self, name: str, text: str, path: str, target: str, truncated: bool = False,
            framed: dict[str, str] | None = None) -> None:
        self.captures[name] = Captured(name, text, _record(path, target, text, truncated),
                                       f"{self.origin}:{path}", framed=framed or {})

    def add_pasted(self, text: str, path: str, target: str, truncated: bool) -> set[str]:
        """The sources the detectors find in a text, where no file gave them yet."""
        pieces, framed = self.detect(text)
        found = set()
        for name, body in pieces:
            if name in self.captures:
                continue
            self.add(name, body, path, target, truncated, framed.get(name))
            found.add(name)
        return found


def read_sosreport(reader: object, budget: Budget, detect: Detect) -> Snapshot:
    """A sosreport's parts as one host's snapshot (see the module's docstring); the
    reader is the one :meth:`gputriage.snapshot.bundle.Snapshot.load` opened, and
    ``detect`` cuts a text into the sources in it, as a paste is cut."""
    files = SosFiles(reader, budget)
    _not_a_collection(files)
    plan = _Plan()
    _commands(files, plan)
    _copied(files, plan)
    build = _Builder(files, detect)
    chosen = {name: (path, target) for name, (_, path, target) in plan.chosen.items()}
    kernel_logs = [p for p in KERNEL_LOGS if files.is_file(p)]
    extra = [p for p, _ in plan.pastes] + [p for p in (*_HOSTNAMES, "sos_reports/manifest.json")
                                           if files.is_file(p)]
    trees = [_Tree(files, src) for src in sources.SOURCES
             if src.kind == "tree" and (src.select is None or src.select in _SELECTED)]
    # one pass: a compressed tarball is decompressed once for all the files read
    got = files.read(sorted({p for p, _ in chosen.values()} | set(extra)
                            | set(plan.parts_of_smi_q()) | set(kernel_logs[:1])
                            | {p for tree in trees for p in tree.wanted}))
    for name, (path, target) in sorted(chosen.items()):
        text = build.text_of(path, got[path])
        if text is None:
            continue
        truncated = got[path].size > len(got[path].data or b"") or path in build.tailed
        if name == "nvidia_smi_q" and plan.parts_of_smi_q():
            parts = [build.text_of(p, got[p]) or "" for p in plan.parts_of_smi_q()]
            text, path = join_smi_sections(parts), ", ".join(plan.parts_of_smi_q())
        build.add(name, text, path, target, truncated)
    for tree in trees:
        doc = tree.doc(got)
        if doc is not None and tree.src.name not in build.captures:
            build.add(tree.src.name, doc, tree.base or "/", tree.src.path or "/")
    for path, line in plan.pastes:
        text = build.text_of(path, got[path])
        if text is None:
            continue
        build.add_pasted(text, path, line, False)
        if line.startswith("lspci"):  # every function listed: none of a vendor is a fact
            for name in ("lspci_nvidia", "lspci_mellanox"):
                if name not in build.captures:
                    build.add(name, "", path, line)
    _kernel_log(files, build, kernel_logs, got)
    host = _host_name(build, got)
    missing = _missing(files, build)
    if missing:
        build.problems.insert(0, f"{files.origin}: not in this sosreport: "
                              + "; ".join(missing))
    manifest = {"schema": "sosreport", "host": host, "created": _created(got),
                "sources": {n: c.record for n, c in build.captures.items()}}
    return Snapshot(build.captures, manifest, files.origin, build.problems)


def join_smi_sections(texts: list[str]) -> str:
    """Several ``nvidia-smi -q -d SECTION`` outputs as one ``nvidia-smi -q`` document:
    the first one's header, then each GPU once with every output's sections of it."""
    header: list[str] = []
    gpus: dict[str, list[str]] = {}
    for number, text in enumerate(texts):
        gpu = None
        for line in text.splitlines():
            if _SMI_GPU.match(line):
                gpu = line.strip()
                gpus.setdefault(gpu, [])
            elif gpu is not None:
                gpus[gpu].append(line)
            elif number == 0:
                header.append(line)
    out = [*header]
    for gpu, lines in gpus.items():
        body = [ln for ln in lines if ln.strip()]
        out += [gpu, *body, ""]
    return "\n".join(out) + "\n"


def _not_a_collection(files: SosFiles) -> None:
    """InputError for what ``sos collect`` writes: several hosts' sosreports in one
    archive, each a tarball of its own, and no ``sos_commands/`` of its own."""
    if files.entry(COMMANDS)[0] is not None:
        return
    nested = [n for n in files.children("") if fnmatchcase(n, "sosreport-*.tar*")]
    if nested:
        raise InputError(f"{files.origin}: a sos collect archive of {len(nested)} hosts' "
                         "sosreports: unpack it and give them to gputriage fleet (one host "
                         "each to analyze)")


def _kernel_log(files: SosFiles, build: _Builder, found: list[str],
                got: dict[str, Got]) -> None:
    """The first log of :data:`KERNEL_LOGS` with kernel lines, read as a paste (the
    first one present was read with the other files; the next ones only when needed)."""
    for path in found:
        item = got[path] if path in got else files.read([path])[path]
        text = build.text_of(path, item)
        if not text:
            continue
        truncated = item.size > len(item.data or b"") or path in build.tailed
        if "kernel_log" in build.add_pasted(text, path, "/" + path, truncated):
            return


def _host_name(build: _Builder, got: dict[str, Got]) -> str | None:
    """The host's name (see the module's docstring); kept as the hostname source."""
    for path in _HOSTNAMES:
        item = got.get(path)
        text = decode(item.data).strip() if item is not None and item.data else ""
        if text:
            name = text.splitlines()[0].strip()
            build.add("hostname", name + "\n", path, "hostname")
            return name
    uname = build.captures.get("uname")
    words = (uname.text or "").split() if uname is not None else []
    return words[1] if len(words) > 1 else None


def _created(got: dict[str, Got]) -> str | None:
    """When sos started (``sos_reports/manifest.json``'s ``start_time``, the host's
    clock), as ISO 8601; None when the report does not say."""
    item = got.get("sos_reports/manifest.json")
    if item is None or item.data is None:
        return None
    try:
        doc = safejson.loads(decode(item.data))
    except ValueError:
        return None
    start = doc.get("start_time") if isinstance(doc, dict) else None
    if not isinstance(start, str) or not _STAMP.match(start):
        return None
    return start[:19].replace(" ", "T")


def _missing(files: SosFiles, build: _Builder) -> list[str]:
    """What a GPU host's report should hold and this one does not."""
    parts = list(PARTS)
    if files.entry(f"{COMMANDS}/infiniband")[0] is not None:
        parts.append(_IB_PART)
    return [what for names, what in parts if not any(n in build.captures for n in names)]
