"""The text form: parse(print(f)) is structurally equal to f for every model in the
tests, printing is stable, and bad text gives errors with line and column."""

from __future__ import annotations

import pytest
from graph_models import ALL_MODELS

from tensorfab.compiler.graph import ParseError, astext, parse, structural_equal
from tensorfab.compiler.graph import builder as gb


@pytest.mark.parametrize("name", sorted(ALL_MODELS))
def test_round_trip(name: str) -> None:
    f = ALL_MODELS[name]()
    text = astext(f)
    g = parse(text)
    assert structural_equal(g, f)
    assert astext(g) == text


def test_shared_subexpression_printed_once_and_kept_shared() -> None:
    x = gb.var("x", (4,))
    s = gb.sigmoid(x)
    f = gb.function([x], gb.add(s, s))
    text = astext(f)
    assert text.count("sigmoid(") == 1
    g = parse(text)
    assert g.body.args[0] is g.body.args[1]


def test_text_of_a_let_and_devices() -> None:
    text = """
    fn (%x: Tensor[(n, 2), float32] @cpu) -> Tensor[(n, 2), float32] @accel(default) {
      let %v @accel(default) = device_copy(%x, src_device=@cpu, dst_device=@accel(default));
      %0 = relu(%v);  // a comment
      %0
    }
    """
    f = parse(text)
    assert f.params[0].virtual_device.kind == "cpu"
    assert f.body.var.virtual_device.hw_config == "default"
    assert f.result_device.kind == "accel"
    assert structural_equal(parse(astext(f)), f)


@pytest.mark.parametrize("text,match", [
    ("fn (%x: Tensor[(2,), float32]) { relu(%y) }", r"line 1, column 39: %y is not defined"),
    ("fn (%x: Tensor[(2,), float33]) { %x }", "unknown dtype"),
    ("fn (%x: Tensor[(2,), float32]) {\n  %0 = bogus(%x);\n  %0\n}",
     "line 2, column 8: unknown operator 'bogus'"),
    ("fn (%x: Tensor[(2,), float32]) { relu(%x, alpha=1.0) }", "unknown attributes"),
    ("fn (%x: Tensor[(2,), float32]) { %x $ }", "unexpected character '\\$'"),
    ("fn (%x: Tensor[(2,), float32] @gpu) { %x }", "unknown device kind 'gpu'"),
    ("fn (%x: Tensor[(2,), float32]) { const(float32, [3], [1.0]) }", "has 1 values"),
    ("fn (%x: Tensor[(2,), float32]) { %x", "expected '}'"),
    ("fn (%x: Tensor[(2,), float32]) { add(%x, meta[3]) }",
     r"line 1, column 47: expected the name of a constant in meta\[...\]"),
    ("fn (%x: Tensor[(2,), float32]) { add(%x, meta[c7]) }",
     r"column 47: meta\[c7\]: no such constant \(known: none were given\)"),
])
def test_parse_errors(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse(text)


def test_example_of_docs_parses_and_expands() -> None:
    from pathlib import Path

    from tensorfab.compiler.graph import accel
    from tensorfab.compiler.graph.planning import expand_devices

    doc = (Path(__file__).parents[3] / "docs" / "graph.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```\n")[1:]]
    examples = [b for b in blocks if b.startswith("fn (")]
    assert examples
    for text in examples:
        f = expand_devices(parse(text))
        assert astext(f) == text
        conv = f.body.value.args[0]
        assert conv.op == "nn.conv2d" and conv.virtual_device == accel("default")
