"""A kernel module's build or install failing outside the GPU operator: DKMS (``dkms
install``, a distribution's hook, ``make.log``), a module's own ``make`` against
``/lib/modules/<kernel>/build`` (``nv_peer_mem``, ``gdrdrv``, ``nvidia-fs``), and the
NVIDIA ``.run`` installer (``nvidia-installer``) failing to build or to load
``nvidia.ko``.

Each failure line gets a ``kind`` (see :data:`FAILURES`); the module, its version and
the kernel come from DKMS's lines, the build directory or the make command. Lines of
the kernel log (``NVRM:``, dmesg stamps) are left to the kernel log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["FAILURES", "BuildFailure", "ModuleBuild", "claim_module_build", "is_driver_module",
           "parse_module_build"]

_K = r"[\w.+~-]{3,80}"  # a kernel release
# kind -> pattern, the first that matches a line decides (order matters)
FAILURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("headers-missing", re.compile(
        rf"Missing (?P<kernel>{_K}) kernel headers for module (?P<module>[\w.-]{{1,64}})/"
        rf"(?P<version>[\w.-]{{1,40}})|Your kernel headers for kernel (?P<kernel2>{_K}) cannot "
        rf"be found|/lib/modules/(?P<kernel3>{_K})/build(?:/\S{{0,200}})?:? No such file or "
        rf"directory|No rule to make target .{{0,120}}/lib/modules/(?P<kernel4>{_K})/build|"
        r"kernel (?:source|headers?) (?:tree )?(?:not found|is missing|could not be found)",
        re.IGNORECASE)),
    ("symvers", re.compile(r"parse error in symbol dump file", re.IGNORECASE)),
    ("undefined-symbol", re.compile(r"(?:ERROR|WARNING): (?:modpost: )?\"(?P<symbol>\w{1,80})\" "
                                    r"\[[^\]]{1,200}\] undefined!")),
    ("compile-error", re.compile(r"\.(?:c|h):[0-9]{1,6}:[0-9]{1,4}: (?:fatal )?error: ")),
    ("load-failed", re.compile(r"Unable to load the kernel module '(?P<module>[\w.-]{1,64}?)"
                               r"(?:\.ko)?'|Kernel module load error: (?P<reason>.{1,160})",
                               re.IGNORECASE)),
    ("build-failed", re.compile(rf"Error! Bad return status for module build on kernel: "
                                rf"(?P<kernel>{_K})|make(?:\[[0-9]{{1,3}}\])?: \*\*\* .{{0,200}}"
                                r"Error [0-9]{1,4}|ERROR: Unable to build the NVIDIA kernel module|"
                                r"\bexited (?P<status>[0-9]{1,3})\b.{0,40}$|Installation has failed"
                                r"|"
                                r"\(bad exit status: [0-9]{1,3}\)")),
)
_DKMS = re.compile(r"dkms (?:install|build|autoinstall)\b.{0,80}?\b(?P<module>[\w.-]{1,64})/"
                   rf"(?P<version>[\w.-]{{1,40}})(?:.{{0,40}}-k (?P<kernel>{_K}))?")
_DKMS_TREE = re.compile(r"/var/lib/dkms/(?P<module>[\w.-]{1,64})/(?P<version>[\w.-]{1,40})/")
_MAKE = re.compile(rf"make(?:\[[0-9]{{1,3}}\])?:? .{{0,40}}-C /lib/modules/(?P<kernel>{_K})/build\b"
                   r"|Entering directory '/usr/src/linux-headers-(?P<kernel2>[\w.+~-]{3,80})'")
# the NVIDIA driver's own make (DKMS's MAKE line for it): its variables name it
_NVIDIA_MAKE = re.compile(rf"\bNV_(?:EXCLUDE_BUILD_MODULES|VERBOSE)=.{{0,400}}?\bKERNEL_UNAME="
                          rf"(?P<kernel>{_K})|\bKERNEL_UNAME=(?P<kernel2>{_K}).{{0,400}}?"
                          r"\bNV_(?:EXCLUDE_BUILD_MODULES|VERBOSE)=")
_OBJECT = re.compile(r"CC \[M\]\s+\S{0,200}/(?P<module>[\w-]{1,64})\.o\b|"
                     r"\[\S{0,200}/(?P<module2>[\w-]{1,64})\.ko\]|\sM=\S{0,200}/(?P<module3>[\w-]{1"
                     r",64})"
                     r"/?(?:\s|$)")
# a distribution's DKMS package of the driver (Debian nvidia-kernel-dkms, Ubuntu
# nvidia-dkms-550, its -open flavour): apt's "Setting up" names the module being built
_DRIVER_PACKAGE = re.compile(r"\b(?:Setting up|Unpacking|Preparing to unpack \S{0,200}?)\s?"
                             r"nvidia(?:-kernel)?-dkms(?:-[0-9]{3,4}(?:-open)?)?\b")
_DRIVER_SOURCE = re.compile(r"/usr/src/nvidia-(?P<version>[0-9]{3,4}\.[0-9]{1,4}"
                            r"(?:\.[0-9]{1,4})?)/")
_INSTALLER = re.compile(r"nvidia-installer|NVIDIA Software Installer|Unable to (?:load|build) "
                        r"the (?:NVIDIA )?kernel module|Kernel module load error:",
                        re.IGNORECASE)

# where a block of build output is recognised (a line only such output prints)
_MARK = re.compile(r"/var/lib/dkms/|\bdkms (?:install|build|autoinstall)\b|Error! Bad return "
                   r"status for module build|kernel headers for module|Your kernel headers for "
                   r"kernel|-C /lib/modules/\S{3,80}/build\b|^\s*MODPOST\b|Building modules, "
                   r"stage [0-9]|parse error in symbol dump file|/lib/modules/[^/\s]{3,80}/build/"
                   r"\S{0,200}: No such file|Unable to (?:load|build) the (?:NVIDIA )?kernel "
                   r"module|Kernel module load error:|nvidia-installer|create_nv\.symvers")
# literals one of which every _MARK line holds (a cheap test first)
_MARK_WORDS = ("dkms", "kernel headers", "/lib/modules/", "MODPOST", "Building modules",
               "symbol dump", "kernel module", "Kernel module", "nvidia-installer",
               "create_nv", "Bad return status")
_DKMS_MARK = re.compile(r"/var/lib/dkms/|\bdkms |Error! Bad return status for module build|"
                        r"kernel headers for module")
# the GPU operator's driver container builds the driver too: its log (these messages, in
# lower case) is its reader's
_OPERATOR = ("starting installation of nvidia driver", "compiling nvidia driver kernel modules",
             "installing linux kernel headers", "resolving linux kernel version",
             "done, now waiting for signal", "nvidia-driver-ctr")
# a kernel log line (the kernel log's reader takes it)
_KERNEL_LINE = re.compile(r"^\s*(?:<[0-9]>)?\[\s*[0-9]{1,8}\.[0-9]{3,9}\]|\bNVRM:|"
                          r"[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\S{0,16}\s{1,4}\S{1,64}\s{1,4}kernel: ")


@dataclass(frozen=True)
class BuildFailure:
    kind: str  # headers-missing | symvers | undefined-symbol | compile-error | load-failed |
    # build-failed
    line: str
    detail: str | None = None  # the kernel, symbol or load error the line names


@dataclass
class ModuleBuild:
    """One failed (or attempted) module build or install."""

    module: str | None = None  # "nvidia", "nvidia-peer-memory", "nv_peer_mem", "gdrdrv"
    version: str | None = None
    kernels: list[str] = field(default_factory=list)
    driver_version: str | None = None  # the NVIDIA driver whose sources the build used
    installer: bool = False  # nvidia-installer (the .run file) printed it
    failures: list[BuildFailure] = field(default_factory=list)

    def kinds(self) -> list[str]:
        return list(dict.fromkeys(f.kind for f in self.failures))


def is_driver_module(name: str | None) -> bool:
    """The NVIDIA driver's own module (DKMS name ``nvidia``, ``nvidia-open``,
    ``nvidia-current``, ``nvidia-srv``...), not a module built on it (peer memory, GDS,
    gdrdrv)."""
    text = (name or "").lower().removesuffix(".ko")
    return bool(re.fullmatch(r"nvidia(?:[-_](?:open|current|srv|dkms|kernel|[0-9]{3,4}))*", text))


def _kernel(build: ModuleBuild, kernel: str | None) -> None:
    if kernel and kernel not in build.kernels:
        build.kernels.append(kernel)


def _context(build: ModuleBuild, line: str) -> None:
    for pattern in (_DKMS, _DKMS_TREE):
        if (m := pattern.search(line)) is not None:
            build.module = build.module or m.group("module")
            build.version = build.version or m.group("version")
            _kernel(build, m.groupdict().get("kernel"))
    if (m := _MAKE.search(line)) is not None:
        _kernel(build, m.group("kernel") or m.group("kernel2"))
    if (m := _NVIDIA_MAKE.search(line)) is not None:
        build.module = build.module or "nvidia"
        _kernel(build, m.group("kernel") or m.group("kernel2"))
    if build.module is None and _DRIVER_PACKAGE.search(line):
        build.module = "nvidia"
    if (m := _OBJECT.search(line)) is not None and build.module is None:
        build.module = m.group("module") or m.group("module2") or m.group("module3")
    if (m := _DRIVER_SOURCE.search(line)) is not None:
        build.driver_version = build.driver_version or m.group("version")
    build.installer = build.installer or bool(_INSTALLER.search(line))


def _failure(build: ModuleBuild, line: str) -> None:
    for kind, pattern in FAILURES:
        m = pattern.search(line)
        if m is None:
            continue
        found = {k: v for k, v in m.groupdict().items() if v}
        kernel = next((v for k, v in found.items() if k.startswith("kernel")), None)
        _kernel(build, kernel)
        if kind == "headers-missing" and found.get("module"):
            build.module = build.module or found["module"]
            build.version = build.version or found.get("version")
        if kind == "load-failed" and found.get("module"):
            build.module = build.module or found["module"]
        detail = kernel or found.get("symbol") or found.get("reason")
        build.failures.append(BuildFailure(kind, line.strip(), detail))
        return


def parse_module_build(text: str) -> ModuleBuild:
    """A module build's or install's output; ParseError when it shows neither a build
    nor an install of a kernel module."""
    lines = split_lines(text)
    if not any(_MARK.search(line) for line in lines):
        raise ParseError("not a kernel module build: no DKMS, kbuild or nvidia-installer line")
    build = ModuleBuild()
    for raw in lines:
        if raw.strip() and not _KERNEL_LINE.search(raw):
            _context(build, raw)
            _failure(build, raw)
    if build.installer and build.module is None:
        build.module = "nvidia"
    return build


_MARK_GATE = Gate(literals=_MARK_WORDS)  # a claim starts at a free line holding one


@gated_by(_MARK_GATE)
def claim_module_build(doc: PasteDoc) -> None:
    """Each run of non-blank lines holding a build or install marker (and the runs
    beside it, one blank line apart, that hold a failure), kernel log lines left out;
    the GPU operator's driver container keeps its own log, DKMS's excepted."""
    if not _MARK_GATE.open(doc):
        return
    marked = [i for i in doc.lines_with(_MARK_WORDS) if _MARK.search(doc.lines[i])]
    if not marked:
        return
    lowered = doc.text.lower()
    operator = any(phrase in lowered for phrase in _OPERATOR)
    for i in marked:
        if not doc.free(i) or (operator and not _DKMS_MARK.search(doc.lines[i])):
            continue
        first = i
        while doc.free(first - 1) and _ours(doc.lines[first - 1]):
            first -= 1
        end = doc.extend(i, _ours)
        while doc.free(end + 1) and not doc.lines[end].strip() and _failing_run(doc, end + 1):
            end = doc.extend(end + 1, _ours)
        doc.claim("module_build", first, end)


def _ours(line: str) -> bool:
    return bool(line.strip()) and not _KERNEL_LINE.search(line)


def _failing_run(doc: PasteDoc, start: int) -> bool:
    """Whether the run of lines from ``start`` holds a build failure."""
    end = doc.extend(start, _ours)
    return any(pattern.search(doc.lines[j]) for j in range(start, end)
               for _, pattern in FAILURES)
