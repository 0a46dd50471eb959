"""What a node should have: the expectations file (``/etc/gputriage/expect.toml``,
``$GPUTRIAGE_EXPECT`` or ``--expect FILE``), read into :class:`Expectations`.

Every table and key is optional; a key left out is not checked. An unknown table or
key, a value of the wrong type, or a TOML syntax error is an :class:`InputError`
naming the file and the key, so a typo never silently disables a check::

    [gpu]
    count = 8
    model = "NVIDIA H100 80GB HBM3"
    driver = "550.54.15"
    cuda = "12.4"          # the minimum
    mig = false
    persistence = true

    [nvswitch]
    count = 4

    [pcie]                 # every GPU's link, as trained (under load)
    gen = 5
    width = 16

    [infiniband]
    ports = 8
    rate_gbps = 400
    state = "Active"

    [hugepages]
    size_kb = 2048
    count = 32768

    [weights]              # where this node keeps a model's weights: check and collect
    model_dir = "/models/llama-3-70b"   # judge its storage (as --model-dir does)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, cast

from gputriage.errors import InputError
from gputriage.io import safejson
from gputriage.io.inputs import read_bytes
from gputriage.text.fields import as_float, as_int, strict_int

__all__ = ["DEFAULT_PATH", "ENV_VAR", "Expectations", "GpuExpect", "HugepagesExpect",
           "InfinibandExpect", "NvSwitchExpect", "PcieExpect", "WeightsExpect", "default_path",
           "load", "parse"]

DEFAULT_PATH = Path("/etc/gputriage/expect.toml")
ENV_VAR = "GPUTRIAGE_EXPECT"
MAX_BYTES = 1 << 20  # an expectations file is a few lines: more is not one
MAX_DEPTH = 8  # tables of keys: a value nested deeper is not an expectation
MAX_WHOLE = 2 ** 31 - 1  # a count, a generation, a width, a size in kB
MAX_NUMBER = 1e9  # a rate in Gb/s


@dataclass(frozen=True)
class GpuExpect:
    """``[gpu]``: count and model of the GPUs the driver lists, driver and minimum CUDA
    version, MIG mode and persistence mode of every GPU."""

    count: int | None = None
    model: str | None = None
    driver: str | None = None
    cuda: str | None = None
    mig: bool | None = None
    persistence: bool | None = None


@dataclass(frozen=True)
class NvSwitchExpect:
    """``[nvswitch]``: how many NVSwitches the host has."""

    count: int | None = None


@dataclass(frozen=True)
class PcieExpect:
    """``[pcie]``: every GPU's link generation and width as trained (a busy link)."""

    gen: int | None = None
    width: int | None = None


@dataclass(frozen=True)
class InfinibandExpect:
    """``[infiniband]``: at least ``ports`` HCA ports in ``state`` at ``rate_gbps`` or
    faster."""

    ports: int | None = None
    rate_gbps: float | None = None
    state: str | None = None


@dataclass(frozen=True)
class HugepagesExpect:
    """``[hugepages]``: at least ``count`` pages of ``size_kb`` reserved."""

    size_kb: int | None = None
    count: int | None = None


@dataclass(frozen=True)
class WeightsExpect:
    """``[weights]``: the directory this node serves a model's weights from; check and
    collect look at where it lies (``--model-dir`` names another)."""

    model_dir: str | None = None


_TABLES: dict[str, type] = {"gpu": GpuExpect, "nvswitch": NvSwitchExpect, "pcie": PcieExpect,
                            "infiniband": InfinibandExpect, "hugepages": HugepagesExpect,
                            "weights": WeightsExpect}
# key -> (accepted types, what the error calls it)
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "int | None": ((int,), "a whole number"),
    "float | None": ((int, float), "a number"),
    "str | None": ((str,), "a string"),
    "bool | None": ((bool,), "true or false"),
}
_VERSIONS = ("driver", "cuda")  # strings of dotted numbers


@dataclass(frozen=True)
class Expectations:
    """What the node should have, by table; ``path`` is the file it was read from."""

    gpu: GpuExpect = field(default_factory=GpuExpect)
    nvswitch: NvSwitchExpect = field(default_factory=NvSwitchExpect)
    pcie: PcieExpect = field(default_factory=PcieExpect)
    infiniband: InfinibandExpect = field(default_factory=InfinibandExpect)
    hugepages: HugepagesExpect = field(default_factory=HugepagesExpect)
    weights: WeightsExpect = field(default_factory=WeightsExpect)
    path: str | None = None

    def value(self, key: str) -> Any:
        """The value of ``table.key`` (None when not stated)."""
        table, _, name = key.partition(".")
        return getattr(getattr(self, table), name)

    def line(self, key: str) -> str | None:
        """``table.key = value`` as the file would state it; None when not stated."""
        value = self.value(key)
        return None if value is None else f"{key} = {_toml_value(value)}"

    def stated(self) -> list[str]:
        """Every stated value, as ``table.key = value`` lines."""
        keys = [f"{t}.{f.name}" for t in _TABLES for f in fields(getattr(self, t))]
        return [line for key in keys if (line := self.line(key)) is not None]

    def to_toml(self, header: str = "") -> str:
        """The expectations as a TOML file (tables and keys in the documented order;
        ``header`` becomes comment lines on top)."""
        out = [f"# {line}".rstrip() for line in header.splitlines()]
        for table in _TABLES:
            values = [(f.name, getattr(getattr(self, table), f.name))
                      for f in fields(getattr(self, table))]
            values = [(k, v) for k, v in values if v is not None]
            if not values:
                continue
            if out:
                out.append("")
            out.append(f"[{table}]")
            out += [f"{key} = {_toml_value(value)}" for key, value in values]
        return "\n".join(out) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    return str(value)


def default_path() -> Path | None:
    """The expectations file a check reads without ``--expect``: ``$GPUTRIAGE_EXPECT``
    when set (it must then exist), else the standard file when present."""
    named = os.environ.get(ENV_VAR)
    if named:
        return Path(named)
    return DEFAULT_PATH if DEFAULT_PATH.is_file() else None


def load(path: str) -> Expectations:
    """The expectations of the file at ``path``; InputError when it cannot be read or
    is not a valid expectations file."""
    data = read_bytes(path, MAX_BYTES, what="an expectations file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text: not an expectations file") from None
    return parse(text, path)


def parse(text: str, path: str = "<expect>") -> Expectations:
    """The expectations of TOML ``text`` (``path`` names it in errors)."""
    toml = _toml_reader()
    try:
        doc = toml.loads(text)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply: not an expectations file") from None
    except ValueError as exc:  # TOMLDecodeError, and a number of over 4,300 digits
        raise InputError(f"{path}: TOML syntax error: {str(exc)[:200]}") from None
    if safejson.too_deep(doc, MAX_DEPTH):
        raise InputError(f"{path}: nested more than {MAX_DEPTH} levels deep: not an "
                         "expectations file")
    tables: dict[str, Any] = {}
    for name, body in doc.items():
        if name not in _TABLES:
            raise InputError(f"{path}: unknown {'table' if isinstance(body, dict) else 'key'} "
                             f"{name!r} (known tables: {', '.join(_TABLES)})")
        if not isinstance(body, dict):
            raise InputError(f"{path}: {name} must be a table ([{name}])")
        tables[name] = _table(path, name, body)
    return Expectations(**tables, path=path)


def _toml_reader() -> Any:
    """The standard library's TOML reader (Python 3.11), else the ``tomli`` package it
    came from."""
    import importlib

    for name in ("tomllib", "tomli"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise InputError("reading an expectations file needs Python 3.11 or the tomli package")


def _table(path: str, name: str, body: dict[str, Any]) -> Any:
    """One table's dataclass, every key checked for its name and type."""
    cls = _TABLES[name]
    known = {f.name: str(f.type) for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in body.items():
        if key not in known:
            raise InputError(f"{path}: unknown key {name}.{key} (known in [{name}]: "
                             f"{', '.join(known)})")
        values[key] = _checked(f"{path}: {name}.{key}", key, known[key], value)
    return cls(**values)


def _checked(where: str, key: str, kind: str, value: Any) -> Any:
    """``value`` when it is of ``kind`` (a float for a number); InputError otherwise."""
    types, words = _KINDS[kind]
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise InputError(f"{where} must be {words}, not {_toml_type(value)} {_shown(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        whole = kind == "int | None"
        if value < 0:
            raise InputError(f"{where} must not be negative ({_shown(value)})")
        if (as_int(value, hi=MAX_WHOLE) if whole else as_float(value, hi=MAX_NUMBER)) is None:
            top = f"{MAX_WHOLE:,}" if whole else f"{MAX_NUMBER:,.0f}"
            raise InputError(f"{where} must be a finite number up to {top}, not "
                             f"{_shown(value)}")
    if key in _VERSIONS and not _is_version(str(value)):
        raise InputError(f"{where} must be a version such as \"550.54.15\", not "
                         f"{_shown(value)}")
    return float(cast(float, value)) if kind == "float | None" else value


def _is_version(text: str) -> bool:
    return all(strict_int(p, signed=False) is not None for p in text.strip().split("."))


def _toml_type(value: Any) -> str:
    return {bool: "a boolean", int: "a whole number", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), "a date or time")


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
