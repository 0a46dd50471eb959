"""A model's files, read without loading a tensor: what each holds and its size.

* safetensors: the documented header, read and every entry checked with bounds
  (:mod:`gputriage.weights.stheader`).
* ``*.safetensors.index.json``: the shards a sharded checkpoint names (only names
  inside the index's directory).
* GGUF: the header walked with bounds (:mod:`gputriage.weights.ggufheader`), each
  tensor's byte count as the file stores it (quantised blocks included). A directory
  holds one GGUF model: one file or the parts of one split (``-00001-of-00003``).
* PyTorch ``.bin`` / ``.pt`` / ``.pth``: only their size on disk (reading them means
  unpickling, which runs code).
* ``config.json``: the shape (see :mod:`gputriage.weights.arch`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gputriage.errors import InputError
from gputriage.io.inputs import file_kind, read_bytes
from gputriage.text.units import normalise_dtype
from gputriage.weights.arch import ModelConfig, parse_config
from gputriage.weights.ggufheader import read_gguf_header
from gputriage.weights.stheader import read_safetensors_header, safetensors_tensors

__all__ = ["ModelFiles", "TensorFile", "read_model", "read_safetensors_header",
           "weights_files_bytes"]

_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
MAX_ENTRIES = 10_000  # of a directory, for weights_files_bytes
MAX_JSON_BYTES = 16 * 1000 * 1000  # a config.json or an index: far less


@dataclass
class TensorFile:
    """One weights file: its size on disk and, when its header says, what it holds."""

    path: str
    format: str  # safetensors | gguf | pytorch
    file_bytes: int
    tensor_bytes: int | None = None  # the tensors' data, from the header
    parameters: int | None = None
    tensors: int | None = None
    dtypes: dict[str, int] = field(default_factory=dict)  # dtype -> bytes


@dataclass
class ModelFiles:
    """What a model directory (or a list of files) holds."""

    root: str
    files: list[TensorFile] = field(default_factory=list)
    config: ModelConfig | None = None
    index_missing: list[str] = field(default_factory=list)  # shards the index names, absent
    index_ignored: list[str] = field(default_factory=list)  # names outside its directory
    notes: list[str] = field(default_factory=list)

    @property
    def file_bytes(self) -> int:
        return sum(f.file_bytes for f in self.files)

    @property
    def tensor_bytes(self) -> int:
        """The tensors' bytes (a file without a header: its size on disk)."""
        return sum(f.tensor_bytes if f.tensor_bytes is not None else f.file_bytes
                   for f in self.files)

    @property
    def parameters(self) -> int | None:
        """Parameters from the headers; None when a file has none to read."""
        counts = [f.parameters for f in self.files]
        return sum(c for c in counts if c is not None) if counts and None not in counts \
            else None

    @property
    def dtypes(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.dtypes)
        return dict(total)


def _safetensors(path: str, size: int) -> TensorFile:
    header = read_safetensors_header(path)
    tensors = safetensors_tensors(path, header, size)
    dtypes: Counter[str] = Counter()
    for t in tensors:
        dtypes[normalise_dtype(t.dtype) or t.dtype.lower()] += t.nbytes
    data = size - 8 - int(header["__header_bytes__"])
    return TensorFile(path, "safetensors", size, tensor_bytes=data,
                      parameters=sum(t.elements for t in tensors), tensors=len(tensors),
                      dtypes=dict(dtypes))


def _gguf(path: str, size: int) -> TensorFile:
    header = read_gguf_header(path)
    dtypes: Counter[str] = Counter()
    for t in header.tensors:
        kind = t.type_name.lower()
        dtypes[normalise_dtype(kind) or kind] += t.nbytes
    return TensorFile(path, "gguf", size, tensor_bytes=sum(t.nbytes for t in header.tensors),
                      parameters=sum(t.elements for t in header.tensors),
                      tensors=len(header.tensors), dtypes=dict(dtypes))


def _read_file(path: str) -> TensorFile:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    kind = _format(path)
    if kind == "safetensors":
        return _safetensors(path, size)
    if kind == "gguf":
        return _gguf(path, size)
    return TensorFile(path, "pytorch", size)


def _format(path: str) -> str:
    """The weights format of ``path``: by its name (``*.safetensors``, ``*.gguf``,
    ``*.bin``/``*.pt``/``*.pth``), else by its first bytes: GGUF's magic, a safetensors
    header (a little-endian length, then ``{``), a PyTorch checkpoint (a zip archive
    since PyTorch 1.6, a pickle before). Any other file is not a model's weights
    (InputError, exit 66): ``weights report.pdf`` must not size a PDF as a model."""
    if path.endswith(".safetensors"):
        return "safetensors"
    if path.endswith(".gguf"):
        return "gguf"
    if path.endswith((".bin", ".pt", ".pth")):
        return "pytorch"
    try:
        with open(path, "rb") as fh:
            head = fh.read(9)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if head.startswith(b"GGUF"):
        return "gguf"
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") > 1:
        return "safetensors"
    if head.startswith((b"PK\x03\x04", b"\x80\x02")):
        return "pytorch"
    raise InputError(f"{path}: not a model's weights (expected *.safetensors, *.gguf, a "
                     "PyTorch .bin/.pt/.pth, a *.index.json or a config.json)")


def _json_file(path: Path) -> Any:
    """A config.json or an index, read under the input policy (a FIFO or a device named
    config.json is refused or given up, never waited on)."""
    data = read_bytes(str(path), MAX_JSON_BYTES, what="a model's JSON file")
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:  # bad UTF-8, JSON, a huge integer
        raise InputError(f"{path}: not readable JSON ({exc})") from None
    except RecursionError:
        raise InputError(f"{path}: not readable JSON (nested too deep)") from None


def _names(names: list[str], most: int = 4) -> str:
    shown = ", ".join(n[:80] for n in names[:most])
    return shown + (", ..." if len(names) > most else "")


def _inside(name: str) -> bool:
    """A shard name that stays in the index's directory (by its words: a symbolic link
    there, as a Hugging Face cache has, is followed as any file is)."""
    pure = PurePosixPath(name)
    return bool(name) and "\0" not in name and not pure.is_absolute() \
        and ".." not in pure.parts


def _index_shards(index: Path, found: ModelFiles) -> list[Path]:
    doc = _json_file(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise InputError(f"{index}: not a sharded checkpoint's index (no weight_map)")
    names: set[str] = set()
    ignored: dict[str, None] = {}  # in order, once each
    for value in weight_map.values():
        if isinstance(value, str) and _inside(value):
            names.add(value)
        else:
            ignored[repr(value)[:80]] = None
    found.index_ignored += ignored
    shards = []
    for name in sorted(names):
        shard = index.parent / name
        if shard.is_file():
            shards.append(shard)
        else:
            found.index_missing.append(name)
    return shards


_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>[0-9]{5})-of-(?P<total>[0-9]{5})\.gguf$")


def _one_gguf_model(root: Path, ggufs: list[Path], found: ModelFiles) -> None:
    """Several GGUF files in a directory must be the parts of one split model (else they
    are alternatives, e.g. quantisations: InputError asking for one); parts missing
    are noted."""
    parts = [_SPLIT.match(p.name) for p in ggufs]
    keys = {(m.group("stem"), m.group("total")) for m in parts if m}
    if len(ggufs) > 1 and (None in parts or len(keys) != 1):
        raise InputError(f"{root}: {len(ggufs)} GGUF files that are not the parts of one "
                         f"split model ({_names([p.name for p in ggufs], 6)}): name the one "
                         "file to size")
    if len(keys) == 1 and len(ggufs) != int(next(iter(keys))[1]):
        found.notes.append(f"{len(ggufs)} of the {int(next(iter(keys))[1])} parts of the "
                           "split GGUF model here")


def _directory(root: Path, found: ModelFiles) -> list[Path]:
    indexes = sorted(root.glob("*.safetensors.index.json"))
    if indexes:
        paths: list[Path] = []
        for index in indexes:
            paths += [p for p in _index_shards(index, found) if p not in paths]
        return paths
    paths = sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(
        _WEIGHT_SUFFIXES) and not p.name.startswith("."))
    _one_gguf_model(root, [p for p in paths if p.suffix == ".gguf"], found)
    if any(p.suffix == ".safetensors" for p in paths):  # a .bin beside them is a duplicate
        skipped = [p.name for p in paths if p.suffix in (".bin", ".pt", ".pth")]
        if skipped:
            found.notes.append(f"{len(skipped)} PyTorch file(s) beside the safetensors "
                               "left out (the same weights in the older format)")
        paths = [p for p in paths if p.suffix in (".safetensors", ".gguf")]
    return paths


def _config(found: ModelFiles, config: Path, has_weights: bool) -> None:
    try:
        found.config = parse_config(_json_file(config))
    except ValueError as exc:
        if not has_weights:
            raise InputError(f"{config}: {exc}") from None
        found.notes.append(f"{config}: {exc}; shape not known")


def read_model(paths: list[str]) -> ModelFiles:
    """Read a model directory, or weights files (and a ``config.json``) named one by one;
    InputError when nothing there is a model."""
    found = ModelFiles(root=paths[0] if len(paths) == 1 else ", ".join(paths))
    weights: list[Path] = []
    configs: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            weights += _directory(path, found)
            if (path / "config.json").is_file():
                configs.append(path / "config.json")
        elif path.name.endswith(".index.json"):
            weights += _index_shards(path, found)
        elif path.suffix == ".json":
            configs.append(path)
        elif path.is_file():
            weights.append(path)
        else:
            raise _not_a_file(raw)
    if configs:
        _config(found, configs[0], bool(weights))
    if not weights and found.config is None:
        if found.index_missing or found.index_ignored:
            bad = found.index_missing + found.index_ignored
            raise InputError(f"{found.root}: every shard the index names is missing or "
                             f"outside its directory ({len(bad)}: {_names(bad)})")
        raise InputError(f"{found.root}: no model here (no *.safetensors, *.gguf, *.bin, "
                         "*.pt, index or config.json)")
    found.files = [_read_file(str(p)) for p in weights]
    if found.index_missing:
        found.notes.append(f"{len(found.index_missing)} shard(s) the index names are "
                           f"missing: {_names(found.index_missing)}")
    if found.index_ignored:
        found.notes.append(f"{len(found.index_ignored)} shard name(s) of the index ignored "
                           f"(absolute, outside its directory or not a file name): "
                           f"{_names(found.index_ignored)}")
    return found


def _not_a_file(raw: str) -> InputError:
    """Why ``raw`` is neither a model directory nor a file to read."""
    import stat

    try:
        mode = os.stat(raw).st_mode
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            return InputError(f"{raw}: no such file or directory")
        return InputError(f"{raw}: cannot read ({exc.strerror or exc})")
    return InputError(f"{raw}: {file_kind(mode)}, not a file" if not stat.S_ISREG(mode)
                      else f"{raw}: not a model file")


def weights_files_bytes(directory: str) -> int | None:
    """The summed sizes of the weights files directly in ``directory`` (of its first
    :data:`MAX_ENTRIES` entries; symbolic links followed, as a loader would), unread;
    None when there is none or it cannot be listed."""
    total = 0
    try:
        with os.scandir(directory) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_ENTRIES:
                    break
                if entry.name.endswith(_WEIGHT_SUFFIXES) and entry.is_file():
                    total += entry.stat().st_size
    except OSError:
        return None
    return total or None
