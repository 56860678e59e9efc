"""docs/isa.md must agree with the one declaration of the ISA."""

from pathlib import Path

from tensorfab.isa import PRESETS, insn_formats
from tensorfab.isa.docgen import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "isa.md"


def test_isa_doc_matches_declaration():
    text = DOC.read_text()
    assert render(text) == text, "docs/isa.md is stale: run `make isa-doc`"


def test_isa_doc_lists_every_field_at_its_offset():
    text = DOC.read_text()
    for op, fmt in insn_formats(PRESETS["default"]).items():
        assert f"### {op.name}" in text
        for name, off in fmt.offsets().items():
            width = fmt.field(name).width
            bits = f"{off}" if width == 1 else f"{off + width - 1}:{off}"
            assert f"| {bits} | `{name}` | {width} |" in text
