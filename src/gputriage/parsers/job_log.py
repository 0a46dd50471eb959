"""A job's own output read for the GPU stack's failures: the messages of the catalog
(:mod:`gputriage.knowledge.job_messages`: CUDA, NVML, container stack, frameworks)
wherever they sit (tracebacks, framework prefixes, container logs), the versions the
job printed (framework, CUDA runtime, driver, compute capability, compiled
architectures, libcuda copies) and where it ran (:mod:`gputriage.parsers.job_context`).

Everything else in a job log is ignored: a paste needs one recognised line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from gputriage.errors import ParseError
from gputriage.knowledge.job_messages import CATALOG_WORDS, Hit, scan_line, scan_literals
from gputriage.parsers.detect_gate import Gate, held_by_line
from gputriage.parsers.job_context import JobContext, claim_context, read_context
from gputriage.text.fields import split_lines, strict_int
from gputriage.text.literals import required_literal_sets, required_literals
from gputriage.text.paste import PasteDoc

__all__ = ["JobLog", "JobVersions", "claim_job_log", "is_job_line", "parse_job_log"]


@dataclass
class JobVersions:
    """Versions and capabilities as the job printed them (``None``: not printed).

    CUDA versions are ``"major.minor"`` strings (``"12.8"``); a driver's CUDA version
    printed as an integer (``11040``, PyTorch's ``found version``) is converted."""

    torch: str | None = None  # "2.7.0+cu128"
    torch_cuda: str | None = None  # torch.version.cuda (or the wheel's +cuXXX tag)
    cuda_available: bool | None = None  # torch.cuda.is_available()
    tensorflow: str | None = None
    jax: str | None = None
    cudnn: str | None = None
    nvcc: str | None = None  # "Cuda compilation tools, release 12.4"
    runtime_cuda: str | None = None  # the CUDA runtime the program was built with
    image_cuda: str | None = None  # the CUDA of the container image (banner, image tag)
    driver_cuda: str | None = None  # the newest CUDA the driver supports, as the job saw it
    driver_version: str | None = None  # "535.104.05" as the job printed it
    driver_required: str | None = None  # the driver an NGC image says it was built for
    compat_mode: bool | None = None  # an NGC image's forward-compatibility mode
    gpu_name: str | None = None
    capability: str | None = None  # compute capability of the GPU ("8.9"; sm_89)
    archs: tuple[str, ...] = ()  # compiled architectures ("sm_50", "sm_90", "compute_90")
    libcuda: tuple[str, ...] = ()  # libcuda.so paths (ldconfig -p): two = a shadowing copy
    image: str | None = None  # a container image the log names
    cuda_devices: int | None = None  # the CUDA devices the program said it found
    gpu_memory: str | None = None  # the GPU's memory as the program printed it ("4.0 GiB")
    needs_memory: str | None = None  # what the program needs at once (XLA's total allocation)
    lines: dict[str, str] = field(default_factory=dict)  # field name -> the line it came from

    @property
    def app_cuda(self) -> str | None:
        """The CUDA version the program needs: its runtime, else its framework's, its
        image's, or the toolkit (nvcc) it was built with."""
        return self.runtime_cuda or self.torch_cuda or self.image_cuda or self.nvcc

    def any(self) -> bool:
        return bool(self.lines)

    def line(self, *names: str) -> list[str]:
        """The lines the named fields came from, each once, in the order asked."""
        out: list[str] = []
        for n in names:
            if (ln := self.lines.get(n)) and ln not in out:
                out.append(ln)
        return out


@dataclass
class JobLog:
    """What a job's output says of the GPU stack."""

    hits: list[Hit] = field(default_factory=list)
    versions: JobVersions = field(default_factory=JobVersions)
    context: JobContext = field(default_factory=JobContext)
    lines: list[str] = field(default_factory=list)  # the lines read, for evidence

    def of(self, family: str) -> list[Hit]:
        return [h for h in self.hits if h.message.family == family]

    def ids(self) -> set[str]:
        return {h.message.id for h in self.hits}


# --- versions ------------------------------------------------------------------------
_V = r"[0-9]+\.[0-9]+(?:\.[0-9]+)?"
_TORCH_V = _V + r"(?:\.?(?:dev|a|b|rc|post)[0-9]*)*(?:\+[\w.]+)?"
Setter = Callable[[JobVersions, "re.Match[str]"], None]


def _cuda_of(tag: str | None) -> str | None:
    from gputriage.knowledge.cuda_compat import cuda_from_tag

    return cuda_from_tag(tag)


def _set(name: str, group: str = "v", convert: Callable[[str], object] | None = None) -> Setter:
    def apply(v: JobVersions, m: re.Match[str]) -> None:
        raw = m.group(group)
        value = convert(raw) if convert else raw.strip().strip("_*`").rstrip(".")
        if value is not None and getattr(v, name) in (None, ()):
            setattr(v, name, value)
            v.lines[name] = m.string.strip()
    return apply


def _torch(v: JobVersions, m: re.Match[str]) -> None:
    _set("torch")(v, m)
    if tag := re.search(r"\+(cu[0-9]+)", m.group("v")):
        _set("torch_cuda", convert=lambda _: _cuda_of(tag.group(1)))(v, m)


def _bool(raw: str) -> bool:
    return raw.strip().lower() in ("true", "yes")


def _driver_int(raw: str) -> str | None:
    from gputriage.knowledge.cuda_compat import cuda_from_int

    return cuda_from_int(raw)


def _capability(raw: str) -> str | None:
    """``sm_120`` -> ``"12.0"``."""
    digits = raw.strip().lower().removeprefix("sm_")
    number = strict_int(digits, signed=False, hi=9999) if len(digits) >= 2 else None
    return None if number is None else f"{number // 10}.{number % 10}"


def _archs(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(re.findall(r"(?:sm|compute)_[0-9]+[af]?", raw)))


def _tf_device(v: JobVersions, m: re.Match[str]) -> None:
    _set("gpu_name", "name")(v, m)
    if m.group("cc"):
        _set("capability", "cc")(v, m)
    elif m.group("maj"):
        _set("capability", "maj", lambda _: f"{m.group('maj')}.{m.group('min')}")(v, m)


def _ngc(v: JobVersions, m: re.Match[str]) -> None:
    _set("driver_required", "want")(v, m)
    _set("driver_version", "found")(v, m)
    if m.group("mode"):
        _set("compat_mode", "mode", lambda raw: raw.strip().upper() != "UNAVAILABLE")(v, m)


def _libcuda(v: JobVersions, m: re.Match[str]) -> None:
    path = m.group("path")
    if path not in v.libcuda:
        v.libcuda = (*v.libcuda, path)
        v.lines[f"libcuda:{path}"] = m.string.strip()
        v.lines.setdefault("libcuda", m.string.strip())


def _image(v: JobVersions, m: re.Match[str]) -> None:
    _set("image", "img")(v, m)
    repo, _, tag = m.group("img").rpartition(":")
    cuda = None
    if c := re.search(r"(?:^|-)cuda-?([0-9]+\.[0-9]+)|-cu([0-9]{2,3})\b", tag):
        cuda = c.group(1) or _cuda_of(f"cu{c.group(2)}")
    elif repo.endswith("/cuda") and (c := re.match(r"([0-9]+\.[0-9]+)", tag)):
        cuda = c.group(1)  # nvidia/cuda:12.8.0-...: the tag is the CUDA release
    if cuda:
        _set("image_cuda", "img", lambda _: cuda)(v, m)


def _smi_header(v: JobVersions, m: re.Match[str]) -> None:
    _set("driver_version", "drv")(v, m)
    _set("driver_cuda", "cuda")(v, m)


def _ollama(v: JobVersions, m: re.Match[str]) -> None:
    """ollama's "inference compute" line: the GPU it will run on."""
    _set("cuda_devices", "cc", lambda _: 1)(v, m)
    _set("capability", "cc")(v, m)
    _set("driver_cuda", "drv")(v, m)
    _set("gpu_name", "qname" if m.group("qname") else "name")(v, m)
    if m.group("total"):
        _set("gpu_memory", "total")(v, m)


_NEEDS = _set("needs_memory")  # XLA's BufferAssignment stats: not enough alone

# (pattern, setter): every pattern is tried on every line, case-insensitively
_READERS: tuple[tuple[re.Pattern[str], Setter], ...] = tuple(
    (re.compile(p, re.IGNORECASE), f) for p, f in (
        (rf"PyTorch version:\s*(?P<v>{_TORCH_V})", _torch),
        (rf"\btorch(?:\.__version__)?\s*(?:version)?\s*[:=]?\s*'?(?P<v>{_TORCH_V})\b", _torch),
        (rf"\bpip3?\s+install\b.*?\btorch==(?P<v>{_TORCH_V})", _torch),
        (r"CUDA used to build PyTorch:\s*(?P<v>[0-9]+\.[0-9]+)", _set("torch_cuda")),
        (r"torch\.version\.cuda\W*(?:=|:|->|#|returns?)?\W*(?P<v>[0-9]+\.[0-9]+)",
         _set("torch_cuda")),
        (r"Is CUDA available:\s*(?P<v>True|False|Yes|No)\b", _set("cuda_available",
                                                                    convert=_bool)),
        (r"torch\.cuda\.is_available\(\)[\s`:=#>*-]*(?:returns?\s*)?[\s*]*(?P<v>True|False)\b",
         _set("cuda_available", convert=_bool)),
        (r"CUDA runtime version:\s*(?P<v>[0-9]+\.[0-9]+)", _set("nvcc")),
        (r"Cuda compilation tools,\s*release\s*(?P<v>[0-9]+\.[0-9]+)", _set("nvcc")),
        (r"GPU models and configuration:\s*(?:GPU [0-9]+:\s*)?(?P<v>[^\n(]*\w)", _set("gpu_name")),
        (r"get_device_name\(\w*\)\W*'(?P<v>[^']+)'", _set("gpu_name")),
        (r"get_device_capability\(\w*\)\W*\((?P<maj>[0-9]+),\s*(?P<min>[0-9]+)\)",
         lambda v, m: _set("capability", "maj", lambda _: f"{m['maj']}.{m['min']}")(v, m)),
        (r"(?<![A-Za-z])GPU(?:\s+[0-9]+)?\s*:\s*[_*]*"
         r"(?P<v>(?:NVIDIA\s+)?(?:GeForce|Quadro|Tesla|TITAN|RTX|GTX)\b[\w -]*\w)",
         _set("gpu_name")),
        (r"\bcudatoolkit\s*[=: ]\s*(?P<v>[0-9]+\.[0-9]+)", _set("runtime_cuda")),
        (r"Nvidia driver version:\s*(?P<v>[0-9]+\.[0-9]+(?:\.[0-9]+)?)", _set("driver_version")),
        (r"cuDNN version:.*?(?P<v>[0-9]+\.[0-9]+\.[0-9]+)", _set("cudnn")),
        (r"\b(?:tensorflow|tf)(?:\.__version__)?\s*(?:version)?\s*[:=]\s*'?"
         r"(?P<v>[0-9]+\.[0-9]+\.[0-9]+)", _set("tensorflow")),
        (r"^\s*jax(?:\.__version__)?\s*[:=]\s*'?(?P<v>[0-9]+\.[0-9]+\.[0-9]+)", _set("jax")),
        (r"name:\s{0,8}(?P<name>[^,\s][^,\n]{0,199}?)\s{1,8}(?:major:\s{0,8}(?P<maj>[0-9]+)\s{1,8}"
         r"minor:\s{0,8}(?P<min>[0-9]+)|"
         r"computeCapability:\s*(?P<cc>[0-9]+\.[0-9]+))", _tf_device),
        (r"device:\s*[0-9]+,\s*name:\s*(?P<name>[^,]+),.*?compute capability:\s*"
         r"(?P<cc>[0-9]+\.[0-9]+)(?P<maj>)?", _tf_device),
        (r"(?P<v>\b(?:NVIDIA|GeForce|Tesla|Quadro|TITAN|RTX)\b[\w -]*?) with CUDA capability "
         r"sm_[0-9]+", _set("gpu_name")),
        (r"with CUDA capability (?P<v>sm_[0-9]+)", _set("capability", convert=_capability)),
        (r"supports CUDA capabilities\s+(?P<v>(?:(?:sm|compute)_[0-9]+\w*[\s.]*)+)",
         _set("archs", convert=_archs)),
        (r"(?:get_arch_list\(\)|Arch list)\W*(?P<v>\[?\s*'?(?:sm|compute)_[0-9]+.*)",
         _set("archs", convert=_archs)),
        (r"found version (?P<v>[0-9]{4,5})\b", _set("driver_cuda", convert=_driver_int)),
        (r"\bcudaDriverVersion\s*[:=]?\s*(?P<v>[0-9]{4,5})\b",
         _set("driver_cuda", convert=_driver_int)),
        (r"Driver Version:\s*(?P<drv>[0-9]+\.[0-9]+(?:\.[0-9]+)?)\s+CUDA Version:\s*"
         r"(?P<cuda>[0-9]+\.[0-9]+)", _smi_header),
        (r"^\s*CUDA Version\s+(?P<v>[0-9]+\.[0-9]+)(?:\.[0-9]+)?\s*$", _set("image_cuda")),
        (r"built for NVIDIA Driver Release (?P<want>[0-9]+\.[0-9]+(?:\.[0-9]+)?) or later, "
         r"but version (?P<found>[0-9]+\.[0-9]+(?:\.[0-9]+)?) was detected"
         r"(?:.*compatibility mode is (?P<mode>\w+))?", _ngc),
        (r"libcuda\.so(?:\.[0-9]+)*\s+\([^)]*\)\s*=>\s*(?P<path>\S+)", _libcuda),
        # the kernel module's banner (/proc/driver/nvidia/version, cuda_memtest's log)
        (r"NVRM version:\s*NVIDIA UNIX (?:Open )?\S{1,12} Kernel Module(?: for \S{1,12})?\s+"
         r"(?P<v>[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)\b", _set("driver_version")),
        (r"msg=\W?inference compute\W.{0,200}?\blibrary=cuda\b.{0,80}?"
         r"\bcompute=(?P<cc>[0-9]+\.[0-9]+).{0,40}?\bdriver=(?P<drv>[0-9]+\.[0-9]+).{0,20}?\bname=(?:\"(?P<qname>[^\"]{1,80})\"|"
         r"(?P<name>\S{1,80}))(?:.{0,20}?\btotal=\"(?P<total>[^\"]{1,20})\")?", _ollama),
        (r"ggml_cuda_init: found (?P<v>[0-9]{1,3}) CUDA devices?", _set("cuda_devices",
                                                                     convert=int)),
        (r"^\s*total allocation:\s*(?P<v>[0-9]{1,9}(?:\.[0-9]{1,4})?\s?[KMGT]i?B)\s*$", _NEEDS),
        (r"(?P<img>\b(?:nvcr\.io/nvidia/|nvidia/|pytorch/|tensorflow/)[\w.-]+:[\w.-]*[0-9][\w.-]*)",
         _image),
    ))
# searched in the lowered line (a case-sensitive alternation is ten times faster)
_WORD = re.compile(r"torch|cuda|nvcc|tensorflow|\btf\b|jax|cudnn|driver|capabilit|sm_[0-9]|"
                   r"libcuda|nvidia|pytorch|name:|gpu|version|total allocation")

# an interactive session: the expression on one line, its value on the next
_REPL = re.compile(r"^\s*(?:>>>\s*|In \[[0-9]+\]:\s*)?(?:print\()?(?P<expr>torch\.__version__|"
                   r"torch\.version\.cuda|torch\.cuda\.is_available\(\)|"
                   r"torch\.cuda\.get_device_name\(\w*\)|torch\.cuda\.get_arch_list\(\))\)?\s*$")
_REPL_VALUE = re.compile(r"^\s*(?:Out\[[0-9]+\]:\s*)?(?P<v>'[^']*'|True|False|None|\[.*\])\s*$")
# TensorFlow 1.x: "Found device 0 with properties:" then "name: ..." and "major: 6 minor: 1"
_TF_HEAD = re.compile(r"Found device [0-9]+ with properties")
_TF_BODY = re.compile(r"^\s*(?:name:\s*(?P<name>.+?)\s*$|major:\s*(?P<maj>[0-9]+)\s+minor:\s*"
                      r"(?P<min>[0-9]+)|pciBusID|totalMemory|freeMemory)")


# readers that alone do not make a text a job's output (a pod spec names an image)
_WEAK = frozenset({_image, _NEEDS})


def _read_versions(v: JobVersions, line: str) -> bool:
    """Apply one line to ``v``; False when it prints no version this parser reads."""
    return _read(v, line) is not None


_SELECTIVE = 3  # characters of the shortest literal of a reader's further literal set


@functools.cache
def _reader_needs() -> tuple[tuple[frozenset[str], ...] | None, ...]:
    """For each reader, sets of literals (lower-cased) every match holds one of each of
    (None: none): the most selective set, and any other whose literals are all three
    characters or more (a GPU's "gpu", and "tesla", "rtx"... after it: a GPU node's host
    name lets "gpu" into every line of its logs)."""
    out: list[tuple[frozenset[str], ...] | None] = []
    for pat, _ in _READERS:
        best = required_literals(pat)
        out.append(None if best is None else (best, *(
            s for s in required_literal_sets(pat)
            if s != best and min(map(len, s)) >= _SELECTIVE)))
    return tuple(out)


@functools.cache
def _reader_literals() -> tuple[str, ...]:
    """Every literal of :func:`_reader_needs`, each once."""
    return tuple(sorted({t for needs in _reader_needs() for s in needs or () for t in s}))


def _meets(held: frozenset[str], needs: tuple[frozenset[str], ...] | None) -> bool:
    """Whether a line holding the literals ``held`` may match a reader of ``needs``."""
    return needs is None or all(not held.isdisjoint(s) for s in needs)


def _read(v: JobVersions, line: str, held: frozenset[str] | None = None) -> bool | None:
    """Apply one line to ``v``: None when it prints no version, False when only a
    weak one (an image name), True otherwise. ``held``: the readers' literals an ASCII
    line holds, where the caller found them for all its lines at once (None: here)."""
    lower = line.lower()
    if not _WORD.search(lower):
        return None
    found: bool | None = None
    # the readers' literals the line holds, each looked for once (on an ASCII line,
    # ignoring case is comparing in lower case); None: every reader is searched
    if held is None:
        held = frozenset(t for t in _reader_literals() if t in lower) if line.isascii() else None
    for pat, apply in _readers_for(held):
        if m := pat.search(line):
            apply(v, m)
            found = found or apply not in _WEAK
    return found


def _readers_for(held: frozenset[str] | None) -> Iterable[tuple[re.Pattern[str], Setter]]:
    """The readers, in order, that may match a line holding the literals ``held`` (None:
    all of them)."""
    return _READERS if held is None else _readers_of(held)


@functools.lru_cache(maxsize=4096)
def _readers_of(held: frozenset[str]) -> tuple[tuple[re.Pattern[str], Setter], ...]:
    """The readers, in order, that may match a line holding the literals ``held`` (a
    log's lines hold few different sets of them: each is worked out once)."""
    return tuple(r for r, needs in zip(_READERS, _reader_needs(), strict=True)
                 if _meets(held, needs))


def _read_value(v: JobVersions, expr: str, value_line: str) -> bool:
    """The value line of an interactive ``expr`` (``'12.8'``, ``True``)."""
    m = _REPL_VALUE.match(value_line)
    if not m:
        return False
    return _read_versions(v, f"{expr} {m.group('v')}")


def _read_tf(v: JobVersions, line: str) -> bool:
    m = _TF_BODY.match(line)
    if not m:
        return False
    if m.group("name"):
        _set("gpu_name", "name")(v, m)
    elif m.group("maj"):
        _set("capability", "maj", lambda _: f"{m['maj']}.{m['min']}")(v, m)
    return True


_WRAP_MIN = 100  # a line this long may have been hard-wrapped by the paste
_WRAP_LINES = 4  # lines one message may be wrapped onto
_WRAP_NEXT = re.compile(r"^[a-z:\\\"'/.,)\]-]")  # how a wrapped piece goes on
_RECORD_HEAD = 4  # characters that, shared with the line before, start a new record


def _goes_on(line: str, piece: str) -> bool:
    """Whether ``piece`` may be the rest of ``line`` cut by a hard wrap: it goes on as a
    cut-off piece does and does not start as ``line`` did (a log's next record,
    ``time=...`` after ``time=...``)."""
    return bool(_WRAP_NEXT.match(piece)) and piece[:_RECORD_HEAD] != line[:_RECORD_HEAD]


def _unwrapped(lines: Sequence[str], i: int, usable: Callable[[int], bool],
               hits: list[Hit]) -> tuple[int, str, list[Hit]] | None:
    """A long line hard-wrapped mid-word by the paste (``nvidia-container-cli: m`` /
    ``ount error: ...``): the index after its pieces, the joined text and its messages,
    when joining finds a message no piece shows alone; None otherwise. Paste detection
    runs this on every long line: what is cheap to refuse is refused before a scan."""
    line = lines[i]
    if len(line) < _WRAP_MIN or line[-1:].isspace():
        return None
    end = i + 1
    while end < len(lines) and end - i <= _WRAP_LINES and len(lines[end - 1]) >= _WRAP_MIN \
            and usable(end) and _goes_on(line, lines[end]):
        end += 1
    if end == i + 1:
        return None
    text = "".join(lines[i:end])
    found = scan_line(text, i)
    new = {h.message.id for h in found} - {h.message.id for h in hits}
    if not new or new <= {h.message.id for j in range(i + 1, end)
                          for h in scan_line(lines[j], j)}:
        return None
    return end, text, found


def _walk(lines: Sequence[str], v: JobVersions, usable: Callable[[int], bool] = lambda i: True,
          held: tuple[dict[int, frozenset[str]], dict[int, frozenset[str]]] | None = None
          ) -> Iterator[tuple[int, list[Hit], bool]]:
    """``(index, hits, strong)`` of each line the job log takes: one with a message of
    the catalog or a version, the value line of an interactive expression, the lines
    of a TensorFlow device block; ``strong``: enough alone to call the text a job's. A
    message hard-wrapped over several lines is read joined, its lines taken with it.
    ``held``: for every line that holds some, the literals of ``scan_literals`` and of
    the version readers it holds (:func:`_held`): a line with none of the first has no
    message, one without the second no version."""
    pending: str | None = None  # an interactive expression waiting for its value
    tf_block = 0  # lines left in a TensorFlow device block
    skip_to = 0  # the pieces of a wrapped message already read
    for i, line in enumerate(lines):
        if i < skip_to:
            yield i, [], True
            continue
        if not usable(i):
            pending, tf_block = None, 0
            continue
        if pending is not None and _read_value(v, pending, line):
            pending = None
            yield i, [], True
            continue
        pending = None
        if tf_block and _read_tf(v, line):
            tf_block -= 1
            yield i, [], True
            continue
        tf_block = 0
        if held is None:
            hits = scan_line(line, i)
        else:
            words = held[0].get(i)
            hits = [] if words is None else scan_line(line, i, words)
        if (wrapped := _unwrapped(lines, i, usable, hits)) is not None:
            skip_to, joined, hits = wrapped
            _read(v, joined)
            yield i, hits, True
            continue
        if held is None:
            versions = _read(v, line)
        else:
            words = held[1].get(i)
            versions = None if words is None else _read(v, line, words)
        if m := _REPL.match(line):
            pending, versions = m.group("expr"), True
        if _TF_HEAD.search(line):
            tf_block, versions = 6, True
        if hits or versions is not None:
            yield i, hits, bool(hits) or bool(versions)


def is_job_line(line: str) -> bool:
    """A line of the catalog or one that prints a version this parser reads."""
    return bool(scan_line(line)) or _read_versions(JobVersions(), line)


def parse_job_log(text: str) -> JobLog:
    """Parse a job's output into a :class:`JobLog`.

    Empty text gives an empty log; text with no message of the catalog and no version
    line raises :class:`ParseError`."""
    log = JobLog()
    if not text or not text.strip():
        return log
    raw = split_lines(text)
    strong = False
    for i, hits, enough in _walk(raw, log.versions):
        log.hits.extend(hits)
        log.lines.append(raw[i].strip())
        strong = strong or enough
    log.context = read_context(raw)
    if not log.context.lines and not strong:
        raise ParseError("no CUDA, NVML, container-runtime or framework message, no "
                         "version line and no container context")
    return log


def _wraps_on(doc: PasteDoc, i: int) -> bool:
    """Whether free line ``i`` may be the first piece of a hard-wrapped message."""
    line = doc.lines[i]
    return (len(line) >= _WRAP_MIN and not line[-1:].isspace() and doc.free(i + 1)
            and _goes_on(line, doc.lines[i + 1]))


# _walk takes a free line only with a word of the catalog's or the version readers' gate,
# an interactive expression, a TensorFlow device block, or as a piece of a wrapped message
_LINE_GATE = Gate(CATALOG_WORDS, _WORD, _REPL, _TF_HEAD)
# (the newline after a line of _WRAP_MIN characters or more, as _wraps_on wants it, and
# before a piece that goes on: the lookahead first, as most lines fail it; a paste of
# short lines that start in lower case then costs one search, not a test per line)
_WRAP_GATE = Gate(searches=(re.compile(r"\n(?=" + _WRAP_NEXT.pattern.removeprefix("^")
                                       + r")(?<=[^\n]{" + str(_WRAP_MIN) + r"}\n)"),),
                  test_at=_wraps_on)


def _held(doc: PasteDoc) -> tuple[dict[int, frozenset[str]], dict[int, frozenset[str]]] | None:
    """The literals of ``scan_literals`` and of the version readers that each line of
    ``doc`` holds, found for all its lines at once (on a GPU node's log every line holds
    a word of the catalog, its host name's "gpu", and few hold a literal), the second
    kept only where they meet a reader's needs; None where a pattern needs none or the
    paste is not ASCII (then each line is searched alone)."""
    scan = scan_literals()
    if scan is None or any(needs is None for needs in _reader_needs()):
        return None
    messages, versions = held_by_line(doc, scan), held_by_line(doc, _reader_literals())
    if messages is None or versions is None:
        return None
    return messages, {i: held for i, held in versions.items() if _readers_of(held)}


def claim_job_log(doc: PasteDoc) -> None:
    """The lines of a job's output that carry a message of the catalog or a version
    (with the value line of an interactive expression and a TensorFlow device block)."""
    if _LINE_GATE.open(doc) or _WRAP_GATE.open(doc):
        taken = list(_walk(doc.lines, JobVersions(), lambda i: doc.owner[i] is None,
                           _held(doc)))
        if any(strong for _, _, strong in taken):
            for i, _, _ in taken:
                doc.owner[i] = "job_log"
    claim_context(doc)  # where it ran: prompts, docker run, NVIDIA_* (see job_context)
