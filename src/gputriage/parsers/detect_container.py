"""The container stack's outputs and configuration in a paste: ``nvidia-container-cli
info`` (with the debug lines ``-d`` adds), the toolkit's config.toml, CDI specs (YAML or
JSON), ``nvidia-ctk --version`` and ``cdi list``, Docker's daemon.json, containerd's
config.toml (whole, a k3s template, or a unified diff of it) and ``env`` lines of
NVIDIA_* / CUDA_* variables."""

from __future__ import annotations

import re

from gputriage.parsers.detect_gate import Gate, gated_blocks, gated_by, gated_lines
from gputriage.text.paste import PasteDoc

__all__ = ["claim_container_cli_info", "claim_container_config", "claim_container_env"]

_NVRM = re.compile(r"^NVRM version:", re.M)
_DEVICE_INDEX = re.compile(r"^Device Index:", re.M)
_START = re.compile(r"^[IWEF][0-9]{4} |^NVRM version:")
_FIELD = re.compile(r"^(?:NVRM|CUDA) version:|^(?:Device (?:Index|Minor)|Model|Brand|GPU UUID|"
                    r"Bus Location|Architecture):|^\s*$|"
                    r"^[IWEF][0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+\s+[0-9]+ ")
_CLI_GATE = Gate(_NVRM)  # no claim without a free "NVRM version:" line


@gated_by(_CLI_GATE)
def claim_container_cli_info(doc: PasteDoc) -> None:
    """``nvidia-container-cli info``: its version and device fields, and its debug lines;
    only when both a version and a device are among the lines left."""
    if not _CLI_GATE.open(doc):
        return
    text = doc.free_text()
    if not (_NVRM.search(text) and _DEVICE_INDEX.search(text)):
        return
    gated_blocks(doc, "nvidia_container_cli_info", _START, lambda s: bool(_FIELD.match(s)))


# --- configuration ----------------------------------------------------------------------
_DIFF = r"(?:[ +-](?![-+]{2} ))?"  # a unified diff's column
_TOML_LINE = re.compile(rf"^{_DIFF}\s*(?:$|#|\[[^\]]+\]\s*$|[\w.\"'-]+\s*=|[\]\"'\w,{{}}-])")
_DIFF_HEAD = re.compile(r"^(?:--- |\+\+\+ |@@ )")
_TOOLKIT_ANCHOR = re.compile(r"^\s*\[nvidia-container-(?:cli|runtime)\]\s*$")
_CONTAINERD_ANCHOR = re.compile(rf"^{_DIFF}\s*\[plugins\.[\"']io\.containerd|"
                                rf"^{_DIFF}\s*default_runtime_name\s*=")
_YAML_LINE = re.compile(r"^(?:\s*$|\s*#|---\s*$|\s+\S|- |[\w.-]+:(?:\s|$))")
_CDI_ANCHOR = re.compile(r"^cdiVersion:\s*['\"]?[0-9]|^kind:\s*['\"]?[\w.-]+\.\w+/[\w.-]+")
_CDI_JSON = re.compile(r'"cdiVersion"\s*:')
_DAEMON_KEY = re.compile(r'"(?:runtimes|default-runtime)"\s*:')
_CTK_VERSION = re.compile(r"NVIDIA Container Toolkit CLI version|^commit: [0-9a-f]{7,40}\s*$")
_CTK_LIST = re.compile(r"Found [0-9]+ CDI devices?|^\s*[a-z0-9][\w.-]*\.[a-z]{2,}/[\w.-]+="
                       r"[\w.:-]+\s*$")
_CTK_VERSION_HEAD = "NVIDIA Container Toolkit CLI version"
# the words the outputs of nvidia-ctk are claimed under (before their exact test), and
# the keys a JSON object is claimed around
_CTK_VERSION_GATE = Gate(literals=(_CTK_VERSION_HEAD,))
_CTK_LIST_GATE = Gate(literals=("CDI device",))
_JSON_GATES = {key: Gate(key) for key in (_CDI_JSON, _DAEMON_KEY)}


def _is_toml_line(line: str) -> bool:
    return bool(_TOML_LINE.match(line))


def _is_containerd_line(line: str) -> bool:
    return bool(_TOML_LINE.match(line) or _DIFF_HEAD.match(line) or "{{" in line)


def _is_yaml_line(line: str) -> bool:
    return bool(_YAML_LINE.match(line))


@gated_by(_TOOLKIT_ANCHOR, _CONTAINERD_ANCHOR, _CDI_ANCHOR, *_JSON_GATES.values(),
          _CTK_VERSION_GATE, _CTK_LIST_GATE)
def claim_container_config(doc: PasteDoc) -> None:
    """The container stack's configuration files and ``nvidia-ctk`` outputs."""
    for name, anchor, line_ok in (
            ("container_toolkit_config", _TOOLKIT_ANCHOR, _is_toml_line),
            ("containerd_config", _CONTAINERD_ANCHOR, _is_containerd_line),
            ("cdi_specs", _CDI_ANCHOR, _is_yaml_line)):
        gated_blocks(doc, name, anchor, line_ok, before=line_ok)
    _claim_json(doc, "cdi_specs", _CDI_JSON)
    _claim_json(doc, "docker_daemon_json", _DAEMON_KEY)
    if _CTK_VERSION_GATE.open(doc) and any(
            doc.free(i) and _CTK_VERSION_HEAD in ln for i, ln in enumerate(doc.lines)):
        gated_lines(doc, "nvidia_ctk_version", _CTK_VERSION)
    if _CTK_LIST_GATE.open(doc) and any(
            doc.free(i) and "CDI device" in ln for i, ln in enumerate(doc.lines)):
        gated_lines(doc, "nvidia_ctk_cdi_list", _CTK_LIST)


def _claim_json(doc: PasteDoc, name: str, key: re.Pattern[str]) -> None:
    """Claim the JSON object (from its ``{`` line to the brace that closes it) around a
    free line with ``key``."""
    if not _JSON_GATES[key].open(doc):
        return
    for i, line in enumerate(doc.lines):
        if not (doc.free(i) and key.search(line)):
            continue
        start = i
        while doc.free(start) and not doc.lines[start].lstrip().startswith("{"):
            start -= 1
        if not doc.free(start):
            continue
        depth, end = 0, start
        while doc.free(end):
            depth += doc.lines[end].count("{") - doc.lines[end].count("}")
            end += 1
            if depth <= 0:
                break
        doc.claim(name, start, end)


_ENV = re.compile(r"^\s*(?:export\s+|declare -x\s+)?(?:NVIDIA|CUDA)_[A-Z0-9_]+=\S*\s*$")


@gated_by(_ENV)
def claim_container_env(doc: PasteDoc) -> None:
    """``env`` lines that set NVIDIA_* or CUDA_* variables (what a container was given),
    when the job's own output did not take them."""
    gated_lines(doc, "container_env", _ENV)
