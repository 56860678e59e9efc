"""Generate the reference part of docs/isa.md from the declarations."""

from __future__ import annotations

from pathlib import Path

from .config import PRESETS, HwConfig
from .csr import CSRS, ErrorCode
from .fields import Format
from .formats import AluOp, Buffer, Opcode, insn_formats, insn_width, uop_format

BEGIN = "<!-- BEGIN GENERATED: do not edit below; `make isa-doc` rewrites it -->"
END = "<!-- END GENERATED -->"


def format_table(fmt: Format) -> str:
    """Markdown table of a format: bits, field, width, meaning."""
    rows = ["| bits | field | width | meaning |", "|------|-------|-------|---------|"]
    offs = fmt.offsets()
    for f in fmt.fields:
        lo = offs[f.name]
        hi = lo + f.width - 1
        bits = f"{lo}" if lo == hi else f"{hi}:{lo}"
        kind = " (signed)" if f.signed else ""
        rows.append(f"| {bits} | `{f.name}` | {f.width} | {f.doc}{kind} |")
    if fmt.used_bits < fmt.width:
        lo = fmt.used_bits
        bits = f"{lo}" if lo == fmt.width - 1 else f"{fmt.width - 1}:{lo}"
        rows.append(f"| {bits} | reserved | "
                    f"{fmt.width - fmt.used_bits} | must be zero |")
    return "\n".join(rows)


def reference(cfg: HwConfig) -> str:
    """The generated reference section for ``cfg``."""
    out = ["| offset | register | access | meaning |", "|--------|----------|--------|---------|"]
    out += [f"| {c.offset:#04x} | `{c.name}` | {c.access} | {c.doc} |" for c in CSRS]
    out += ["", "Error codes: " + ", ".join(f"{e.value} `{e.name}`" for e in ErrorCode) + ".",
            "", f"## Bit layouts ({cfg.name} config)", "",
            f"Instructions are {insn_width(cfg)}-bit little-endian words; micro-ops are "
            f"{uop_format(cfg).width}-bit words. Field widths that depend on the config are "
            "derived from it (see `tensorfab config show NAME`).", "",
            "Enumerations: opcode " + ", ".join(f"{o.name}={o.value}" for o in Opcode)
            + "; buffer " + ", ".join(f"{b.name}={b.value}" for b in Buffer)
            + "; ALU op " + ", ".join(f"{a.name}={a.value}" for a in AluOp) + "."]
    for op, fmt in insn_formats(cfg).items():
        out += ["", f"### {op.name}", "", format_table(fmt)]
    out += ["", "### Micro-op", "", format_table(uop_format(cfg))]
    return "\n".join(out)


def render(doc_text: str, cfg: HwConfig | None = None) -> str:
    """``doc_text`` with the generated block replaced by the current reference."""
    cfg = cfg or PRESETS["default"]
    head, sep, rest = doc_text.partition(BEGIN)
    if not sep or END not in rest:
        raise ValueError("docs/isa.md lacks the generated-block markers")
    tail = rest.partition(END)[2]
    return f"{head}{BEGIN}\n{reference(cfg)}\n{END}{tail}"


def update(path: str | Path) -> bool:
    """Rewrite the generated block of the file at ``path``; True if it changed."""
    path = Path(path)
    old = path.read_text()
    new = render(old)
    if new != old:
        path.write_text(new)
    return new != old


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "docs/isa.md"
    print(f"{target}: {'updated' if update(target) else 'up to date'}")
