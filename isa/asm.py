"""Assembler: text to :class:`~.program.Program`.

Syntax (one statement per line; ``;`` or ``#`` start a comment)::

    .config default                        ; preset name, or inline JSON
    .segment x int8 4,16                   ; name, dtype, shape [output] [file=x.npy]
    .data x 1 2 3 ...                      ; initial values, appended in order
    .uop acc=0 src=0 wgt=0                 ; next micro-op of the table
    load.inp sram=0 dram=x+32 y=4 x=16 stride=64 pad=1,1,0,0 pop_next
    gemm uop=0:4 iter=2,3 acc=1,4 inp=16,0 wgt=0,1 reset push_next
    alu.shr_rnd uop=0:1 iter=1,16 dst=0,1 imm=3
    store sram=0 dram=out y=1 x=4 stride=4 pop_prev
    finish

``dram`` accepts a number, a segment name, or ``name+N`` / ``name-N``; units are
entries of the tile moved (see docs/isa.md). Errors are :class:`~.errors.AsmError`
naming the file, line and column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .asm_syntax import IMPLIED, REQUIRED, mnemonic_table, vocabulary
from .config import ConfigError, HwConfig, get_config
from .errors import AsmError, ProgramError, TensorfabError
from .formats import Buffer, Opcode, uop_format
from .insn import INSN_CLASSES, Insn, Uop, dram_unit_of, encode_insn
from .program import DTYPES, RESERVED_SEGMENT_NAMES, SEGMENT_NAME, UOP_SEGMENT, Program, Segment

_TOKEN = re.compile(r"\S+")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|[0-9_]+)$")
_SYMBOL = re.compile(rf"({SEGMENT_NAME.pattern})(?:([+-])(.+))?$")


@dataclass
class _Tok:
    text: str
    col: int


@dataclass
class _PendingInsn:
    line: int
    opcode: Opcode
    values: dict[str, object]
    cols: dict[str, int]
    dram: tuple[str | None, int, int] | None = None  # (symbol, offset, column)
    mnemonic_col: int = 1


@dataclass
class _State:
    source: str
    base_dir: Path | None
    lookup: Callable[[str], HwConfig] = get_config
    config: HwConfig | None = None
    config_line: int = 0
    segments: dict[str, Segment] = field(default_factory=dict)
    seg_lines: dict[str, int] = field(default_factory=dict)
    seg_data: dict[str, list[int]] = field(default_factory=dict)
    seg_files: dict[str, np.ndarray] = field(default_factory=dict)
    uops: list[tuple[int, dict[str, int], dict[str, int]]] = field(default_factory=list)
    insns: list[_PendingInsn] = field(default_factory=list)


def _err(st: _State, line: int, col: int, msg: str) -> AsmError:
    return AsmError(msg, line=line, column=col, source=st.source)


def _parse_int(st: _State, line: int, tok: _Tok, text: str | None = None) -> int:
    s = tok.text if text is None else text
    if _INT.match(s):
        try:
            return int(s, 0)
        except ValueError:
            pass
    raise _err(st, line, tok.col, f"expected an integer, got {s!r} (decimal without leading "
               "zeros, 0x hex, 0o octal or 0b binary; '_' only between digits)")


def _split_kv(st: _State, line: int, tok: _Tok) -> tuple[str, _Tok]:
    key, sep, val = tok.text.partition("=")
    if not sep or not key or not val:
        raise _err(st, line, tok.col, f"expected key=value, got {tok.text!r}")
    return key, _Tok(val, tok.col + len(key) + 1)


def tokenize(line_text: str) -> list[_Tok]:
    """Split a line into tokens with 1-based columns, dropping the comment.

    A comment starts at ``;`` anywhere, or at ``#`` at the start of a token: a ``#``
    inside a token (``dram=x#1``) is part of it, so the token is rejected rather than
    the rest of the line silently dropped.
    """
    if "#" not in line_text and ";" not in line_text:
        return [_Tok(m.group(), m.start() + 1) for m in _TOKEN.finditer(line_text)]
    toks = []
    for m in _TOKEN.finditer(line_text):
        text = m.group()
        if text.startswith("#"):
            break
        semi = text.find(";")
        if semi >= 0:
            if semi:
                toks.append(_Tok(text[:semi], m.start() + 1))
            break
        toks.append(_Tok(text, m.start() + 1))
    return toks


# --------------------------------------------------------------------- directives
def _directive(st: _State, line: int, toks: list[_Tok]) -> None:
    name = toks[0].text
    if name == ".config":
        if len(toks) < 2:
            raise _err(st, line, toks[0].col, ".config needs a preset name or JSON")
        arg = " ".join(t.text for t in toks[1:])
        try:
            cfg = (HwConfig.from_json(arg) if arg.startswith("{")
                   else st.lookup(_config_path(st, arg)))
        except ConfigError as exc:
            raise _err(st, line, toks[1].col, str(exc)) from exc
        if st.config is not None and st.config != cfg:
            same = (f"another config named {cfg.name!r}: {cfg.differences(st.config)}"
                    if cfg.name == st.config.name else st.config.name)
            raise _err(st, line, toks[1].col,
                       f".config {cfg.name} conflicts with the config given ({same})")
        st.config, st.config_line = cfg, line
    elif name == ".segment":
        if len(toks) < 4:
            raise _err(st, line, toks[0].col, ".segment needs NAME DTYPE SHAPE")
        seg, dt, shp = toks[1], toks[2], toks[3]
        if not SEGMENT_NAME.fullmatch(seg.text):
            raise _err(st, line, seg.col, f"bad segment name {seg.text!r}")
        if seg.text in RESERVED_SEGMENT_NAMES:
            raise _err(st, line, seg.col, f"segment name {seg.text!r} is reserved")
        if seg.text in st.segments:
            raise _err(st, line, seg.col, f"segment {seg.text!r} already declared on line "
                       f"{st.seg_lines[seg.text]}")
        if dt.text not in DTYPES:
            raise _err(st, line, dt.col, f"dtype {dt.text!r} is not one of {', '.join(DTYPES)}")
        shape = []
        for part in shp.text.split(","):
            v = _parse_int(st, line, shp, part)
            if v < 1:
                raise _err(st, line, shp.col, f"shape extent {v} must be positive")
            shape.append(v)
        nbytes = math.prod(shape) * DTYPES[dt.text].itemsize
        cfg = st.config or get_config("default")
        if nbytes > cfg.dram_bytes:
            raise _err(st, line, shp.col, f"segment {seg.text!r} needs {nbytes} bytes, more "
                       f"than the {cfg.dram_addr_width}-bit DRAM address space of config "
                       f"{cfg.name!r} ({cfg.dram_bytes} bytes)")
        output = False
        for t in toks[4:]:
            if t.text == "output":
                output = True
            elif t.text.startswith("file="):
                st.seg_files[seg.text] = _load_side_file(st, line, t, seg.text, dt.text, shape)
            else:
                raise _err(st, line, t.col, f"unexpected {t.text!r} (expected output or file=)")
        st.segments[seg.text] = Segment(seg.text, dt.text, tuple(shape), None, output)
        st.seg_lines[seg.text] = line
    elif name == ".data":
        if len(toks) < 2:
            raise _err(st, line, toks[0].col, ".data needs a segment name")
        seg = toks[1]
        if seg.text not in st.segments:
            raise _err(st, line, seg.col, f"no segment {seg.text!r} declared before .data")
        if seg.text in st.seg_files:
            raise _err(st, line, seg.col, f"segment {seg.text!r} already takes its data from "
                       "a file")
        vals = st.seg_data.setdefault(seg.text, [])
        dtype = st.segments[seg.text].dtype
        info = np.iinfo(DTYPES[dtype])
        for t in toks[2:]:
            for part in filter(None, t.text.split(",")):
                v = _parse_int(st, line, t, part)
                if not info.min <= v <= info.max:
                    raise _err(st, line, t.col, f"{v} is outside the {dtype} range of segment "
                               f"{seg.text!r} ({info.min}..{info.max})")
                vals.append(v)
    elif name == ".uop":
        vals: dict[str, int] = {}
        cols: dict[str, int] = {}
        names = [f.name for f in uop_format(st.config or get_config("default")).fields]
        for t in toks[1:]:
            key, val = _split_kv(st, line, t)
            if key not in names:
                raise _err(st, line, t.col, f"micro-ops have fields {', '.join(names)}, "
                           f"not {key!r}")
            if key in vals:
                raise _err(st, line, t.col, f"{key} given twice")
            vals[key] = _parse_int(st, line, val)
            cols[key] = t.col
        st.uops.append((line, vals, cols))
    else:
        raise _err(st, line, toks[0].col, f"unknown directive {name!r}")


def _config_path(st: _State, arg: str) -> str:
    """A ``.config`` JSON file path, relative to the source's folder as ``file=`` is."""
    if st.base_dir is None or not arg.endswith(".json") or Path(arg).is_absolute():
        return arg
    return str(st.base_dir / arg)


def _load_side_file(st: _State, line: int, tok: _Tok, seg: str, dtype: str,
                    shape: list[int]) -> np.ndarray:
    rel = tok.text[len("file="):]
    path = Path(rel) if st.base_dir is None else st.base_dir / rel
    if path.suffix != ".npy":
        raise _err(st, line, tok.col, f"{rel}: side files are .npy arrays (np.save), "
                   f"not {path.suffix or 'files without a suffix'}")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise _err(st, line, tok.col, f"cannot read {path}: "
                   f"{getattr(exc, 'strerror', None) or exc}") from exc
    if not isinstance(arr, np.ndarray):
        raise _err(st, line, tok.col, f"{path} is not a single .npy array")
    if arr.dtype.kind not in "iub":
        raise _err(st, line, tok.col, f"{path} holds {arr.dtype} values; segment {seg!r} "
                   f"({dtype}) needs integers (convert with np.rint(a).astype(np.{dtype}))")
    if arr.size != math.prod(shape):
        raise _err(st, line, tok.col, f"{path} holds {arr.size} values, segment {seg!r} "
                   f"needs {math.prod(shape)}")
    return arr


# -------------------------------------------------------------------- instructions
_MNEMONICS = mnemonic_table()


def _instruction(st: _State, cfg: HwConfig, line: int, toks: list[_Tok]) -> None:
    mn = toks[0].text.lower()
    if mn not in _MNEMONICS:
        close = [m for m in _MNEMONICS if m.split(".")[0] == mn.split(".")[0]]
        hint = f" (did you mean one of {', '.join(close)}?)" if close else ""
        raise _err(st, line, toks[0].col, f"unknown mnemonic {toks[0].text!r}{hint}")
    opcode, implied = _MNEMONICS[mn]
    voc = vocabulary(cfg, opcode)
    p = _PendingInsn(line, opcode, dict(implied), {}, mnemonic_col=toks[0].col)
    for t in toks[1:]:
        if "=" not in t.text:
            if t.text not in voc.flags:
                raise _err(st, line, t.col, f"{mn} has no flag {t.text!r} (flags: "
                           f"{', '.join(voc.flags)})")
            if t.text in p.values:
                raise _err(st, line, t.col, f"{t.text} given twice")
            p.values[t.text] = True
            p.cols[t.text] = t.col
            continue
        key, val = _split_kv(st, line, t)
        k = voc.key(key)
        if k is None and key in voc.flags:
            raise _err(st, line, t.col, f"{key} is a flag: write it as a bare word, "
                       "without a value")
        if k is None:
            raise _err(st, line, t.col, f"{mn} has no field {key!r} (fields: "
                       f"{', '.join(k.name for k in voc.keys)})")
        if any(f in p.values for f in k.fields):
            raise _err(st, line, t.col, f"{key} given twice")
        if k.name == "dram":
            p.dram = _parse_dram(st, line, val)
            p.cols["dram"] = t.col
            continue
        parts = val.text.split(k.sep) if k.is_group else [val.text]
        if len(parts) != len(k.fields):
            raise _err(st, line, val.col, f"{key} takes {len(k.fields)} values separated by "
                       f"{k.sep!r}, got {val.text!r}")
        for f, part in zip(k.fields, parts, strict=True):
            p.values[f] = _parse_int(st, line, val, part)
            p.cols[f] = t.col
        for implied_field, by_key in IMPLIED.items():
            if by_key == key:
                p.values[implied_field] = True
                p.cols[implied_field] = t.col
    given = {k.name for k in voc.keys if any(f in p.values for f in k.fields)}
    if p.dram is not None:
        given.add("dram")
    missing = [k.name for k in voc.keys if k.name in REQUIRED and k.name not in given]
    if missing:
        raise _err(st, line, toks[0].col, f"{mn} needs {', '.join(f'{m}=' for m in missing)} "
                   "(only pad, the loop factors, imm and the flags have defaults)")
    st.insns.append(p)


def _parse_dram(st: _State, line: int, val: _Tok) -> tuple[str | None, int, int]:
    if _INT.match(val.text):
        return (None, _parse_int(st, line, val), val.col)
    m = _SYMBOL.match(val.text)
    if not m:
        raise _err(st, line, val.col, f"expected a DRAM address (number, name or name+N), "
                   f"got {val.text!r}")
    name, sign, off = m.groups()
    n = 0
    if sign:
        n = _parse_int(st, line, val, off) * (-1 if sign == "-" else 1)
    return (name, n, val.col)


def _resolve(st: _State, prog: Program, p: _PendingInsn, index: int) -> Insn:
    cfg = prog.config
    values = dict(p.values)
    if p.dram is not None:
        sym, off, col = p.dram
        if sym is None:
            values["dram"] = off
        else:
            regions = prog.layout()
            if sym not in regions or sym in ("insns", "end"):
                known = ", ".join([UOP_SEGMENT, *st.segments]) or "none"
                raise _err(st, p.line, col, f"unknown segment {sym!r} (known: {known})")
            unit = dram_unit_of(cfg, p.opcode, values.get("buffer", Buffer.INP))
            base = regions[sym].offset
            if base % unit:
                raise _err(st, p.line, col, f"segment {sym!r} at byte {base} is not aligned "
                           f"to {unit}-byte entries")
            values["dram"] = base // unit + off
            if values["dram"] < 0:
                raise _err(st, p.line, col, f"{sym}{off:+d} is a negative address")
    cls = INSN_CLASSES[p.opcode]
    try:
        insn = cls(**values)  # type: ignore[arg-type]
        encode_insn(insn, cfg, index)
    except ProgramError as exc:
        col = p.mnemonic_col
        voc = vocabulary(cfg, p.opcode)
        if exc.field is not None:
            key = voc.key_of_field(exc.field)
            col = p.cols.get(exc.field, p.cols.get(key.name if key else "", col))
        raise _err(st, p.line, col, exc.detail) from exc
    return insn


def assemble(text: str, config: HwConfig | str | None = None, *, source: str = "<asm>",
             base_dir: str | Path | None = None,
             lookup: Callable[[str], HwConfig] = get_config) -> Program:
    """Assemble program text.

    Parameters
    ----------
    text : str
        Assembly source.
    config : HwConfig | str | None
        Config to assemble for. If the text has a ``.config`` line it must agree.
        With neither, the ``default`` preset is used.
    source : str
        File name used in error messages.
    base_dir : str | Path | None
        Folder that ``file=`` side files and a ``.config`` JSON file are relative to.
    lookup : callable
        The config of a name (``config`` given as a string, or ``.config NAME``): by
        default :func:`~.config.get_config` (presets and JSON files); the command line
        passes one that knows the board configs too.

    Raises
    ------
    AsmError
        Any syntax or semantic error, with line and column.
    """
    st = _State(source, Path(base_dir) if base_dir is not None else None, lookup)
    if config is not None:
        st.config = lookup(config) if isinstance(config, str) else config
    lines = text.splitlines()
    # .config must be known before the widths of fields are; take it in a first pass.
    for n, raw in enumerate(lines, 1):
        toks = tokenize(raw)
        if toks and toks[0].text == ".config":
            _directive(st, n, toks)
    cfg = st.config or get_config("default")
    st.config = cfg
    for n, raw in enumerate(lines, 1):
        toks = tokenize(raw)
        if not toks or toks[0].text == ".config":
            continue
        if toks[0].text.startswith("."):
            _directive(st, n, toks)
        else:
            _instruction(st, cfg, n, toks)
    return _build(st, cfg)


def _build(st: _State, cfg: HwConfig) -> Program:
    segments = []
    for name, seg in st.segments.items():
        data: np.ndarray | None = st.seg_files.get(name)
        if name in st.seg_data:
            vals = st.seg_data[name]
            if len(vals) != seg.size:
                raise _err(st, st.seg_lines[name], 1, f"segment {name!r} has {len(vals)} "
                           f".data values, shape {seg.shape} needs {seg.size}")
            data = np.array(vals, dtype=np.int64)
        try:
            segments.append(Segment(name, seg.dtype, seg.shape, data, seg.output))
        except ProgramError as exc:
            raise _err(st, st.seg_lines[name], 1, exc.detail) from exc
    ufmt = uop_format(cfg)
    uops = []
    for i, (line, vals, cols) in enumerate(st.uops):
        for key, v in vals.items():
            f = ufmt.field(key)
            if not f.lo <= v <= f.hi:
                raise _err(st, line, cols[key], f"micro-op {i}: {key} = {v} does not fit "
                           f"{f.width} bits (0..{f.hi})")
        uops.append(Uop(**vals))
    if not st.insns:
        raise _err(st, len(st.seg_lines) + 1, 1, "no instructions")
    placeholder = [INSN_CLASSES[p.opcode]() for p in st.insns]
    prog = Program(cfg, placeholder, uops, segments)
    prog.insns = [_resolve(st, prog, p, i) for i, p in enumerate(st.insns)]
    try:
        prog.validate()
    except ProgramError as exc:
        idx = exc.index if exc.index is not None else len(st.insns) - 1
        line = st.insns[min(idx, len(st.insns) - 1)].line
        raise _err(st, line, 1, str(exc)) from exc
    return prog


def assemble_file(path: str | Path, config: HwConfig | str | None = None, *,
                  lookup: Callable[[str], HwConfig] = get_config) -> Program:
    """Assemble a ``.s`` file (side files and a ``.config`` JSON file are relative to
    its folder; ``lookup`` as :func:`assemble`'s)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TensorfabError(f"cannot read {path}: {exc.strerror}") from exc
    return assemble(decode_text(raw, str(path)), config, source=str(path),
                    base_dir=path.parent, lookup=lookup)


def decode_text(raw: bytes, source: str) -> str:
    """UTF-8 text of a source file; an undecodable byte is an :class:`AsmError` at its
    line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise AsmError(f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
                       line=line, column=col, source=source) from exc

