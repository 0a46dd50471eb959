"""A model's files, read without loading a tensor: what each holds and its size.

* safetensors: the library's own header reading (``safe_open``: every tensor's dtype
  and shape) where the package is installed; else the documented layout read with
  bounds (8-byte little-endian header length, then that many bytes of JSON).
* ``*.safetensors.index.json``: the shards a sharded checkpoint names.
* GGUF: the header through the ``gguf`` package (imported here only), each tensor's
  byte count as the file stores it (quantised blocks included).
* PyTorch ``.bin`` / ``.pt`` / ``.pth``: only their size on disk (reading them means
  unpickling, which runs code).
* ``config.json``: the shape (see :mod:`gputriage.weights.arch`).
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputriage.errors import InputError
from gputriage.weights.arch import ModelConfig, parse_config
from gputriage.weights.units import dtype_bytes, normalise_dtype

__all__ = ["ModelFiles", "TensorFile", "read_model", "read_safetensors_header"]

# a header larger than this is not a model's (the format's own limit is 100 MB)
MAX_HEADER_BYTES = 100 * 1000 * 1000
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")


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


def _element_bytes(dtype: str) -> float:
    try:
        return dtype_bytes(dtype)
    except ValueError:
        return 0.0


def read_safetensors_header(path: str) -> dict[str, Any]:
    """The JSON header of a safetensors file, read with bounds; InputError when the file
    is not one (too short, a declared length past the end or over 100 MB, bad JSON)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise InputError(f"{path}: not a safetensors file (shorter than its "
                                 "8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise InputError(f"{path}: not a safetensors file (declares a "
                                 f"{length}-byte header in a {size}-byte file)")
            raw = fh.read(length)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InputError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a safetensors file (its header is not an object)")
    header["__header_bytes__"] = length
    return header


def _tensors_by_library(path: str) -> list[tuple[str, list[int]]] | None:
    """(dtype, shape) of every tensor, by ``safe_open``; None when the package is
    absent. The library refuses a malformed header: InputError with its words."""
    try:
        from safetensors import SafetensorError, safe_open
    except ImportError:
        return None
    try:
        with safe_open(path, framework="numpy") as handle:
            out = []
            for name in handle.keys():  # noqa: SIM118 - a handle, not a dict
                piece = handle.get_slice(name)
                out.append((str(piece.get_dtype()), list(piece.get_shape())))
            return out
    except SafetensorError as exc:
        raise InputError(f"{path}: not a safetensors file ({exc})") from None
    except ImportError:  # the framework it was asked for is not installed
        return None


def _safetensors(path: str, size: int) -> TensorFile:
    header = read_safetensors_header(path)  # bounds checked before the library reads it
    tensors = _tensors_by_library(path)
    if tensors is None:
        tensors = [(str(v.get("dtype", "")), list(v.get("shape", [])))
                   for k, v in header.items()
                   if k not in ("__metadata__", "__header_bytes__") and isinstance(v, dict)]
    dtypes: Counter[str] = Counter()
    params = 0
    for dtype, shape in tensors:
        count = math.prod(shape)
        params += count
        name = normalise_dtype(dtype) or dtype.lower()
        dtypes[name] += int(count * _element_bytes(dtype))
    data = size - 8 - int(header["__header_bytes__"])
    return TensorFile(path, "safetensors", size, tensor_bytes=data, parameters=params,
                      tensors=len(tensors), dtypes=dict(dtypes))


def _gguf(path: str, size: int) -> TensorFile:
    try:
        from gguf import GGUFReader
    except ImportError:
        return TensorFile(path, "gguf", size)  # its size on disk only
    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # noqa: BLE001 - the reader raises many kinds on bad files
        raise InputError(f"{path}: not a GGUF file ({type(exc).__name__}: {exc})") from None
    dtypes: Counter[str] = Counter()
    params = data = 0
    for tensor in reader.tensors:
        params += int(tensor.n_elements)
        data += int(tensor.n_bytes)
        kind = tensor.tensor_type.name.lower()
        dtypes[normalise_dtype(kind) or kind] += int(tensor.n_bytes)
    return TensorFile(path, "gguf", size, tensor_bytes=data, parameters=params,
                      tensors=len(reader.tensors), dtypes=dict(dtypes))


def _read_file(path: str) -> TensorFile:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if path.endswith(".safetensors"):
        return _safetensors(path, size)
    if path.endswith(".gguf"):
        return _gguf(path, size)
    return TensorFile(path, "pytorch", size)


def _json_file(path: Path) -> Any:
    try:
        if path.stat().st_size > 16 * 1000 * 1000:
            raise InputError(f"{path}: too large for a model's JSON file")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable JSON ({exc})") from None


def _index_shards(index: Path, found: ModelFiles) -> list[Path]:
    doc = _json_file(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict):
        raise InputError(f"{index}: not a sharded checkpoint's index (no weight_map)")
    shards = []
    for name in sorted({str(v) for v in weight_map.values()}):
        shard = index.parent / name
        if shard.is_file():
            shards.append(shard)
        else:
            found.index_missing.append(name)
    return shards


def _directory(root: Path, found: ModelFiles) -> list[Path]:
    indexes = sorted(root.glob("*.safetensors.index.json"))
    if indexes:
        paths: list[Path] = []
        for index in indexes:
            paths += [p for p in _index_shards(index, found) if p not in paths]
        return paths
    paths = sorted(p for p in root.iterdir() if p.is_file() and p.name.endswith(
        _WEIGHT_SUFFIXES) and not p.name.startswith("."))
    if any(p.suffix == ".safetensors" for p in paths):  # a .bin beside them is a duplicate
        skipped = [p.name for p in paths if p.suffix in (".bin", ".pt", ".pth")]
        if skipped:
            found.notes.append(f"{len(skipped)} PyTorch file(s) beside the safetensors "
                               "left out (the same weights in the older format)")
        paths = [p for p in paths if p.suffix in (".safetensors", ".gguf")]
    return paths


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
            raise InputError(f"{raw}: no such file or directory")
    if configs:
        try:
            found.config = parse_config(_json_file(configs[0]))
        except ValueError as exc:
            if not weights:
                raise InputError(f"{configs[0]}: {exc}") from None
            found.notes.append(f"{configs[0]}: {exc}; shape not known")
    if not weights and found.config is None:
        raise InputError(f"{found.root}: no model here (no *.safetensors, *.gguf, *.bin, "
                         "*.pt, index or config.json)")
    found.files = [_read_file(str(p)) for p in weights]
    if found.index_missing:
        found.notes.append(f"{len(found.index_missing)} shard(s) the index names are "
                           f"missing: {', '.join(found.index_missing[:4])}")
    return found
