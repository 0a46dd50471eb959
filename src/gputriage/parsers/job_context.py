"""Where a job's output was printed: inside a container or on the host, and what the
container was given (``--gpus``, ``--runtime=nvidia``, a CDI device,
``NVIDIA_VISIBLE_DEVICES``, ``NVIDIA_DRIVER_CAPABILITIES``), as far as the output itself
tells.

How the context reaches the ``job_log`` fact: a paste's prompt lines are barriers
(:mod:`gputriage.text.paste`) that split it into segments before any detector runs,
and the lines nobody claims are dropped. The job log's detector ends with
:func:`claim_context`, which takes for ``job_log`` the lines that say where the output
was printed: a container's prompt (``root@098b49afe624:/#``: a 12-hex host name, ``(container)
$``), the host's (``(host) #``), a ``docker``/``podman``/``kubectl`` command that starts
or enters a container, and the ``NVIDIA_*`` variables beside a job's output. A prompt
taken this way has already split the paste; taking it only keeps its text for
:func:`read_context`, and the output under it stays with whichever source claims it (an
nvidia-smi error under a container prompt is the nvidia-smi table's; the rules read
both). Bare ``env`` lines with nothing of a job around them are left to the
``container_env`` source.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate
from gputriage.text.paste import BARRIER, PasteDoc

__all__ = ["JobContext", "claim_context", "is_context_line", "read_context"]

# a container's prompt: "(container) $ cmd", "root@098b49afe624:/# cmd", "[root@<12 hex> /]#"
_CONTAINER_PROMPT = re.compile(
    r"^\s*(?:\((?:container|in container|pod)\)\s*[$#]"
    r"|[\w.-]+@[0-9a-f]{12}:[^\s$#]*\s*[$#]"
    r"|\[[\w.-]+@[0-9a-f]{12}(?:\s[^\]]*)?\]\s*[$#])\s?(?P<cmd>.*)$")
# the host's prompt, labelled as such: "(host) # cmd", "(on host) $ cmd", "(node) # cmd"
_HOST_PROMPT = re.compile(r"^\s*\((?:host|on host|node)\)\s*[$#]\s?(?P<cmd>.*)$")
# a command that starts a container or runs something in one
_LAUNCH = re.compile(
    r"(?:^|[\s`$#(])(?:sudo\s+)?(?P<engine>docker|podman|nerdctl|ctr|kubectl)"
    r"(?:\s+container)?\s+(?P<verb>run|exec|create)\b(?P<rest>.*)$")
_GPUS = re.compile(r"--gpus(?:=|\s+)(?P<v>\"[^\"]*\"|'[^']*'|\S+)")
_RUNTIME = re.compile(r"--runtime(?:=|\s+)(?P<v>\S+)")
_CDI_DEVICE = re.compile(r"--device(?:=|\s+)(?P<v>[\w.-]+/gpu=\S+)")
_ENV = re.compile(r"\b(?P<key>NVIDIA_VISIBLE_DEVICES|NVIDIA_DRIVER_CAPABILITIES)"
                  r"(?:=|\s+(?=[\w,-]+\s*$))(?P<value>[^\s'\"`]*)")
_PODMAN_SHIM = re.compile(r"Emulate Docker CLI using podman")
_ENGINES = ("docker", "podman", "nerdctl")  # engines whose run takes --gpus / a CDI device
_NVIDIA_DEVICE = re.compile(r"--device(?:=|\s+)\S*nvidia")  # /dev/nvidia0 passed by hand
# a graphics adapter that is not NVIDIA's ("Graphics Mesa Intel Xe Graphics")
_OTHER_GPU = re.compile(r"\b(?:graphics|vga|gpu)\b.*\b(?:intel|amd|radeon|mesa|matrox|aspeed)\b"
                        r"|\b(?:intel|amd|radeon|mesa)\b.*\b(?:graphics|vga)\b", re.IGNORECASE)


@dataclass
class JobContext:
    """What a job's output says of where it ran (``None``: it does not say)."""

    in_container: bool | None = None
    engine: str | None = None  # docker | podman | nerdctl | ctr | kubectl: what ran it
    podman_as_docker: bool = False  # "docker" was podman's shim (podman-docker)
    gpus: str | None = None  # what the launch asked for: "all", "0", "nvidia.com/gpu=all"
    runtime: str | None = None  # --runtime=...
    visible_devices: str | None = None  # NVIDIA_VISIBLE_DEVICES
    driver_capabilities: str | None = None  # NVIDIA_DRIVER_CAPABILITIES
    container_commands: list[str] = field(default_factory=list)  # run at a container's prompt
    host_commands: list[str] = field(default_factory=list)  # run at the host's prompt
    other_gpus: list[str] = field(default_factory=list)  # lines naming a non-NVIDIA adapter
    lines: list[str] = field(default_factory=list)  # the lines that show it
    # the docker/podman/nerdctl run (or create) commands that asked for no GPU at all
    gpuless_runs: list[str] = field(default_factory=list)

    @property
    def lacks_compute(self) -> bool:
        """Whether the container was given driver capabilities without ``compute``
        (CUDA needs it; ``all`` includes it)."""
        caps = self.driver_capabilities
        if caps is None:
            return False
        words = {w.strip().lower() for w in caps.split(",")}
        return not words & {"compute", "all"}

    def ran_in_container(self, program: str) -> bool:
        """Whether ``program`` was run at a container's prompt (or exec'd into one)."""
        return any(_runs(cmd, program) for cmd in self.container_commands)

    def ran_on_host(self, program: str) -> bool:
        return any(_runs(cmd, program) for cmd in self.host_commands)

    def launch_lines(self) -> list[str]:
        """The lines that started the container or name what it was given."""
        return [ln for ln in self.lines if _LAUNCH.search(ln) or _ENV.search(ln)]


def _runs(command: str, program: str) -> bool:
    words = command.replace("sudo ", "").split()
    return bool(words) and words[0].rsplit("/", 1)[-1] == program


def _exec_command(rest: str) -> str | None:
    """The command an ``exec`` runs: after ``--``, else after the container name."""
    if " -- " in f" {rest} ":
        return f" {rest} ".split(" -- ", 1)[1].strip() or None
    words = [w for w in rest.split() if not w.startswith("-")]
    return " ".join(words[1:]) or None


def is_context_line(line: str) -> bool:
    """A line that says where the output was printed or what the container was given."""
    return bool(_CONTAINER_PROMPT.match(line) or _HOST_PROMPT.match(line)
                or _LAUNCH.search(line) or _PODMAN_SHIM.search(line))


# a launch typed as a command: at the line's start, after a prompt's $ or #, or sudo
_TYPED_LAUNCH = re.compile(r"^\s*(?:\S*[$#]\s*)?(?:sudo\s+)?(?:docker|podman|nerdctl|ctr|"
                           r"kubectl)\s")


def _in_prose(line: str) -> bool:
    """A launch named inside a sentence rather than typed (no prompt, not at the start)."""
    return bool(_LAUNCH.search(line)) and not (
        _CONTAINER_PROMPT.match(line) or _HOST_PROMPT.match(line)
        or _TYPED_LAUNCH.match(line) or _PODMAN_SHIM.search(line))


# options of docker/podman/nerdctl run that take a value as the next word
_VALUED = frozenset({"-e", "--env", "-v", "--volume", "--mount", "--name", "--gpus", "--runtime",
                     "--device", "-w", "--workdir", "--entrypoint", "--network", "--net",
                     "--shm-size", "--ipc", "-p", "--publish", "-u", "--user", "-h",
                     "--hostname", "--platform", "--env-file", "-l", "--label", "--pid",
                     "--cpus", "-m", "--memory", "--ulimit", "--cap-add", "--security-opt"})


def _run_command(rest: str) -> str | None:
    """The command a ``run`` starts in the container: the words after its image."""
    words = rest.split()
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 1 if "=" in words[i] or words[i] not in _VALUED else 2
    return " ".join(words[i + 1:]) or None


def _apply(ctx: JobContext, line: str) -> bool:
    """Read one line into ``ctx``; False when it says nothing of the context."""
    found = False
    if m := _CONTAINER_PROMPT.match(line):
        ctx.in_container = True
        if cmd := m.group("cmd").strip():
            ctx.container_commands.append(cmd)
        found = True
    elif m := _HOST_PROMPT.match(line):
        if ctx.in_container is None:
            ctx.in_container = False
        if cmd := m.group("cmd").strip():
            ctx.host_commands.append(cmd)
        found = True
    if m := _LAUNCH.search(line):
        ctx.engine = ctx.engine or m.group("engine")
        rest = m.group("rest")
        asked = False
        for pat, name in ((_GPUS, "gpus"), (_CDI_DEVICE, "gpus"), (_RUNTIME, "runtime")):
            if v := pat.search(rest):
                asked = True
                if getattr(ctx, name) is None:
                    setattr(ctx, name, v.group("v").strip("\"'"))
        if m.group("verb") in ("run", "create") and m.group("engine") in _ENGINES \
                and not (asked or _ENV.search(rest) or _NVIDIA_DEVICE.search(rest)):
            ctx.gpuless_runs.append(line.strip())
        if m.group("verb") == "exec":
            ctx.in_container = True
            if cmd := _exec_command(rest):
                ctx.container_commands.append(cmd)
        elif m.group("verb") == "run" and (cmd := _run_command(rest)):
            ctx.container_commands.append(cmd)
        found = True
    for m in _ENV.finditer(line):
        name = ("visible_devices" if m.group("key") == "NVIDIA_VISIBLE_DEVICES"
                else "driver_capabilities")
        if getattr(ctx, name) is None:
            setattr(ctx, name, m.group("value"))
        found = True
    if _PODMAN_SHIM.search(line):
        ctx.engine, ctx.podman_as_docker, found = "podman", True, True
    if _OTHER_GPU.search(line) and "nvidia" not in line.lower():
        ctx.other_gpus.append(line.strip())
        found = True
    return found


def read_context(lines: Sequence[str]) -> JobContext:
    """The context the lines of a job's output show."""
    ctx = JobContext()
    for line in lines:
        if _apply(ctx, line):
            ctx.lines.append(line.strip())
    return ctx


# is_context_line's: a labelled prompt, "user@<12 hex>" of a container's, a launch
_CONTEXT_GATE = Gate(_HOST_PROMPT, _LAUNCH, _PODMAN_SHIM, literals=("container", "pod"),
                     searches=(re.compile(r"@[0-9a-f]{12}"),), test=is_context_line)


def claim_context(doc: PasteDoc, name: str = "job_log") -> None:
    """Claim for ``name`` the lines of a paste that show where a job's output was
    printed: container and host prompts (barriers: see the module's docstring), the
    commands that start or enter a container, podman's docker shim; and, when the paste
    holds a job's output, the ``NVIDIA_*`` variables and a non-NVIDIA adapter's name."""
    taken = [i for i, ln in enumerate(doc.lines)
             if doc.owner[i] in (None, BARRIER) and is_context_line(ln)
             ] if BARRIER in doc.owner or _CONTEXT_GATE.open(doc) else []
    if name not in doc.owner:  # no job output: only a command as typed says where it ran,
        # not one named in a sentence ("a `docker run` without --gpus" in a document)
        taken = [i for i in taken if not _in_prose(doc.lines[i])]
    for i in taken:
        doc.owner[i] = name
    if not (taken or name in doc.owner):
        return
    for i, ln in enumerate(doc.lines):
        if doc.owner[i] is None and (_ENV.search(ln) or (
                _OTHER_GPU.search(ln) and "nvidia" not in ln.lower())):
            doc.owner[i] = name
