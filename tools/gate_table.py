"""Write the table of src/gputriage/parsers/detect_table.py (its docstring and imports
stay as written there): for each paste detector, the literals
and searches of the gates it declared (``gated_by`` in :mod:`gputriage.parsers.detect_gate`),
computed from its module's own regular expressions, so that detection can leave a
detector's module unimported when a paste cannot hold any of them.

    python tools/gate_table.py            # rewrite the table
    python tools/gate_table.py --check    # exit 1 when the table is out of date

tests/test_detect_lazy.py fails when the committed table is not what this writes: after
changing a detector's gates or the regular expressions they are made of, run the first
line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "src" / "gputriage" / "parsers" / "detect_table.py"

START = "GATES: dict[str, GateEntry | None] = {\n"  # the table: what this tool rewrites


def head() -> str:
    """The table module as it stands, up to the table (its docstring and imports, kept
    as they are written there)."""
    text = TABLE.read_text(encoding="utf-8")
    if START not in text:
        raise SystemExit(f"{TABLE.relative_to(ROOT)}: no line {START.strip()!r} to write after")
    return text[:text.index(START) + len(START)]


def _quoted(text: str) -> str:
    """A Python string literal of ``text`` in double quotes (JSON's escapes are Python's)."""
    return json.dumps(text)


def render() -> str:
    """The table's module, its table from the declarations of every detector (all
    imported)."""
    sys.path.insert(0, str(ROOT / "src"))
    from gputriage import sources
    from gputriage.parsers.detect_gate import declared_gates, gate_entry

    lines = [head()]
    for ref in sources.detector_refs():
        entry = gate_entry(declared_gates(sources.load(ref)))
        if entry is None:
            lines.append(f"    {_quoted(ref)}: None,\n")
            continue
        literals, searches = entry
        lines.append(f"    {_quoted(ref)}: (\n        (\n")
        lines.extend(f"            {_quoted(lit)},\n" for lit in literals)
        lines.append("        ),\n        (\n")
        lines.extend(f"            ({_quoted(pattern)}, {flags}),\n" for pattern, flags in searches)
        lines.append("        ),\n    ),\n")
    lines.append("}\n")
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the table is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if TABLE.read_text(encoding="utf-8") != text:
            print(f"{TABLE.relative_to(ROOT)} is out of date: run python tools/gate_table.py",
                  file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
