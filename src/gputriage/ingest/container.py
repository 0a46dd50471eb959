"""Outputs of the container stack in a paste that gputriage keeps as text (no parser):
``nvidia-container-cli info`` (with the debug lines ``-d`` adds)."""

from __future__ import annotations

import re

from gputriage.ingest.paste import PasteDoc, claim_blocks

__all__ = ["claim_container_cli_info"]

_NVRM = re.compile(r"^NVRM version:", re.M)
_DEVICE_INDEX = re.compile(r"^Device Index:", re.M)
_START = re.compile(r"^[IWEF]\d{4} |^NVRM version:")
_FIELD = re.compile(r"^(?:NVRM|CUDA) version:|^(?:Device (?:Index|Minor)|Model|Brand|GPU UUID|"
                    r"Bus Location|Architecture):|^\s*$|^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ")


def claim_container_cli_info(doc: PasteDoc) -> None:
    """``nvidia-container-cli info``: its version and device fields, and its debug lines;
    only when both a version and a device are among the lines left."""
    text = doc.free_text()
    if not (_NVRM.search(text) and _DEVICE_INDEX.search(text)):
        return
    claim_blocks(doc, "nvidia_container_cli_info", _START, lambda s: bool(_FIELD.match(s)))
