"""Programs: instructions, micro-op table, named DRAM segments, the DRAM image and the
binary file format.

DRAM layout of a program image (byte addresses, every region aligned to
:func:`dram_alignment`)::

    0            instruction stream (insn_width/8 bytes per instruction)
    uops         micro-op table (the segment named ``uops``)
    <segments>   user segments in declaration order

A *placed* program (:func:`tensorfab.isa.placement.place_program`) puts each region at
an address of its own instead, so that many programs share one device DRAM.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .config import HwConfig
from .csr import ErrorCode
from .errors import BinaryFormatError, ProgramError
from .formats import Buffer, Opcode, insn_width, uop_format
from .insn import (
    Finish,
    Insn,
    Uop,
    buffer_entry_bytes,
    check_insn,
    decode_insn,
    decode_uop,
    encode_insn,
    encode_uop,
)

DTYPES: dict[str, np.dtype] = {
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
}
"""Element types a segment may hold."""

UOP_SEGMENT = "uops"
"""Reserved segment name of the micro-op table."""

SEGMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
"""The segment names assembly reads (``.segment NAME``, ``dram=NAME+N``): the one
declaration the assembler, :meth:`Program.to_bytes` and :meth:`Program.from_bytes` use."""

RESERVED_SEGMENT_NAMES = ("insns", UOP_SEGMENT, "end")
"""Names of the layout's own regions, which no segment may take."""

_RESERVED = f"is reserved ({', '.join(RESERVED_SEGMENT_NAMES)} name the layout's regions)"


def segment_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a segment's name in assembly (``None`` if it can): not a
    :data:`SEGMENT_NAME`, or one of :data:`RESERVED_SEGMENT_NAMES`."""
    if not isinstance(name, str) or not SEGMENT_NAME.fullmatch(name):
        return ("is not a name the assembler reads back (a letter or _, then letters, "
                "digits, _ or .)")
    if name in RESERVED_SEGMENT_NAMES:
        return _RESERVED
    return None


def _check_not_reserved(segments: Sequence[Segment]) -> None:
    """Refuse a segment named as a region of the layout (:data:`RESERVED_SEGMENT_NAMES`):
    that region would stand for the segment in :meth:`Program.layout`."""
    for s in segments:
        if s.name in RESERVED_SEGMENT_NAMES:
            raise ProgramError(f"segment {s.name!r}: the name {_RESERVED}")


def check_segment_names(program: Program) -> None:
    """Raise :class:`ProgramError` naming the first segment of ``program`` whose name
    assembly cannot read back (:func:`segment_name_problem`)."""
    for s in program.segments:
        problem = segment_name_problem(s.name)
        if problem is not None:
            raise ProgramError(f"segment {s.name!r}: the name {problem}")


MAGIC = b"TFABPROG"
VERSION = 1


@dataclass
class Segment:
    """A named region of DRAM with a shape and an element type.

    Parameters
    ----------
    name : str
        Symbol used in assembly (``dram=x+32``).
    dtype : str
        One of :data:`DTYPES`.
    shape : tuple[int, ...]
        Array shape; the segment holds ``prod(shape)`` elements, row-major.
    data : numpy.ndarray | None
        Initial contents (cast to ``dtype``); ``None`` means zeros.
    output : bool
        Marks a result the executors return by name.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    output: bool = False

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ProgramError(f"segment {self.name!r}: dtype {self.dtype!r} is not one of "
                               f"{', '.join(DTYPES)}")
        self.shape = tuple(int(s) for s in self.shape)
        if not self.shape or any(s < 1 for s in self.shape):
            raise ProgramError(f"segment {self.name!r}: shape {self.shape} must have "
                               "positive extents")
        if self.data is not None:
            arr = np.asarray(self.data)
            if arr.size != self.size:
                raise ProgramError(f"segment {self.name!r}: data has {arr.size} elements, "
                                   f"shape {self.shape} needs {self.size}")
            info = np.iinfo(DTYPES[self.dtype])
            if arr.size and (arr.min() < info.min or arr.max() > info.max):
                raise ProgramError(f"segment {self.name!r}: data outside the {self.dtype} "
                                   f"range {info.min}..{info.max}")
            self.data = arr.astype(DTYPES[self.dtype]).reshape(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.size * DTYPES[self.dtype].itemsize


def dram_alignment(cfg: HwConfig) -> int:
    """Byte alignment of every DRAM region: the largest tile, word or bus beat."""
    return max(cfg.inp_entry_bytes, cfg.wgt_entry_bytes, cfg.acc_entry_bytes,
               cfg.out_entry_bytes, uop_format(cfg).bytes, insn_width(cfg) // 8,
               cfg.mem_bus_bytes)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True, eq=False)
class EncodedWords:
    """A program's instruction and micro-op words as :func:`~.insn.encode_insn` and
    :func:`~.insn.encode_uop` write them to DRAM (:meth:`Program.encoded`).

    Attributes
    ----------
    insns : numpy.ndarray
        ``(len(insns), insn_width / 8)`` ``uint8``: one little-endian word per row
        (read-only).
    uops : numpy.ndarray
        ``(len(uops), uop_format(config).bytes)`` ``uint8``, likewise.
    uop_offset : int
        :attr:`Program.uop_offset` when they were encoded.
    """

    insns: np.ndarray
    uops: np.ndarray
    uop_offset: int


@dataclass(frozen=True)
class Region:
    """Placement of a named region in the DRAM image."""

    name: str
    offset: int
    nbytes: int


@dataclass
class Program:
    """A complete program for one :class:`HwConfig`.

    Parameters
    ----------
    config : HwConfig
        Configuration the program is encoded for.
    insns : list[Insn]
        Instruction stream; must end with its only FINISH.
    uops : list[Uop]
        Micro-op table, placed in DRAM as segment ``uops`` for LOAD.UOP to read.
    segments : list[Segment]
        User DRAM segments, laid out in order after the micro-ops.
    placement : dict[str, int] | None
        Byte address of every region (``insns``, ``uops`` and each segment) when the
        program is placed in a shared DRAM; ``None``: the contiguous layout from 0.
    """

    config: HwConfig
    insns: list[Insn] = field(default_factory=list)
    uops: list[Uop] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    placement: dict[str, int] | None = None
    # (config, insns, uops, placement) as last encoded, and their EncodedWords
    _encoded: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_not_reserved(self.segments)
        names = [s.name for s in self.segments]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ProgramError(f"segment {dup!r} is declared twice")

    # ------------------------------------------------------------------- structure
    def segment(self, name: str) -> Segment:
        """The segment called ``name``."""
        for s in self.segments:
            if s.name == name:
                return s
        raise KeyError(f"program has no segment {name!r} "
                       f"(segments: {', '.join(s.name for s in self.segments) or 'none'})")

    @property
    def insn_bytes(self) -> int:
        """Bytes per instruction word."""
        return insn_width(self.config) // 8

    def layout(self) -> dict[str, Region]:
        """Placement of instructions (``insns``), micro-ops and segments in DRAM; ``end``
        is the first byte past the last region."""
        _check_not_reserved(self.segments)  # (a segment renamed after construction)
        align = dram_alignment(self.config)
        if self.placement is not None:
            sizes = {"insns": len(self.insns) * self.insn_bytes,
                     UOP_SEGMENT: len(self.uops) * uop_format(self.config).bytes,
                     **{s.name: s.nbytes for s in self.segments}}
            placed = {n: Region(n, self.placement[n], b) for n, b in sizes.items()}
            end = max(r.offset + r.nbytes for r in placed.values())
            return {**placed, "end": Region("end", _align(end, align), 0)}
        regions: dict[str, Region] = {}
        regions["insns"] = Region("insns", 0, len(self.insns) * self.insn_bytes)
        pos = self.uop_offset
        uop_bytes = len(self.uops) * uop_format(self.config).bytes
        regions[UOP_SEGMENT] = Region(UOP_SEGMENT, pos, uop_bytes)
        pos = _align(pos + uop_bytes, align)
        for s in self.segments:
            regions[s.name] = Region(s.name, pos, s.nbytes)
            pos = _align(pos + s.nbytes, align)
        regions["end"] = Region("end", pos, 0)
        return regions

    @property
    def uop_offset(self) -> int:
        """Byte address of the micro-op table (``layout()[UOP_SEGMENT].offset``, without
        laying out the segments)."""
        if self.placement is not None:
            return self.placement[UOP_SEGMENT]
        return _align(len(self.insns) * self.insn_bytes, dram_alignment(self.config))

    @property
    def insn_base(self) -> int:
        """Byte address of the first instruction (the INSN_BASE CSR of a run)."""
        return self.placement["insns"] if self.placement is not None else 0

    @property
    def dram_size(self) -> int:
        """Bytes of the DRAM image."""
        return self.layout()["end"].offset

    def validate(self) -> None:
        """Check every instruction and the FINISH rule.

        Raises
        ------
        ProgramError
            An illegal instruction, a missing FINISH, or an instruction after FINISH.
        """
        for i, insn in enumerate(self.insns):
            check_insn(insn, self.config, i)
            if isinstance(insn, Finish) and i != len(self.insns) - 1:
                raise ProgramError("FINISH must be the last instruction; "
                                   f"{len(self.insns) - 1 - i} instruction(s) follow it",
                                   code=ErrorCode.NO_FINISH, index=i, engine="compute")
        if not self.insns or not isinstance(self.insns[-1], Finish):
            raise ProgramError("the program does not end with FINISH",
                               code=ErrorCode.NO_FINISH, index=len(self.insns))
        if self.dram_size > self.config.dram_bytes:
            raise ProgramError(f"the DRAM image needs {self.dram_size} bytes, more than the "
                               f"{self.config.dram_addr_width}-bit address space",
                               code=ErrorCode.DRAM_RANGE)

    # ------------------------------------------------------------------ DRAM image
    def encoded(self) -> EncodedWords:
        """The encoded instruction and micro-op words, kept until the config, the
        instructions, the micro-ops or the placement change (:meth:`kept_encoded`).

        Raises
        ------
        IllegalInstruction
            An instruction or micro-op that does not encode (names its index).
        """
        kept = self.kept_encoded()
        if kept is not None:
            return kept
        words = EncodedWords(self._insn_words(), self._uop_words(), self.uop_offset)
        self.keep_encoded(words)
        return words

    def keep_encoded(self, words: EncodedWords) -> None:
        """Keep ``words`` as this program's encoding (:meth:`kept_encoded`) for a caller
        that has them without encoding: words just read from a file, or another
        program's with the fields a change touched re-encoded
        (:func:`~.placement.place_program`). They must equal :meth:`encoded`'s."""
        placement = None if self.placement is None else dict(self.placement)
        self._encoded = (self.config, list(self.insns), list(self.uops), placement, words)

    def _insn_words(self) -> np.ndarray:
        """The instruction words, one ``uint8`` row each (read-only)."""
        nb = self.insn_bytes
        words = b"".join(encode_insn(insn, self.config, i).to_bytes(nb, "little")
                         for i, insn in enumerate(self.insns))
        return np.frombuffer(words, dtype=np.uint8).reshape(-1, nb)

    def _uop_words(self) -> np.ndarray:
        """The micro-op words, one ``uint8`` row each (read-only)."""
        ub = uop_format(self.config).bytes
        words = b"".join(encode_uop(u, self.config, i).to_bytes(ub, "little")
                         for i, u in enumerate(self.uops))
        return np.frombuffer(words, dtype=np.uint8).reshape(-1, ub)

    def kept_encoded(self) -> EncodedWords | None:
        """The words :meth:`encoded` (or :meth:`dram_image`, :meth:`to_bytes`) last made,
        ``None`` if there are none or the program changed since (its config,
        instructions, micro-ops or placement, compared by value: an edit of the lists in
        place is seen; lists of the same objects compare in well under a
        microsecond)."""
        kept = self._encoded
        if (kept is not None and (kept[0] is self.config or kept[0] == self.config)
                and kept[1] == self.insns and kept[2] == self.uops
                and kept[3] == self.placement):
            return kept[4]
        return None

    def encode_insns(self) -> np.ndarray:
        """Instruction stream as little-endian bytes."""
        return self.encoded().insns.ravel().copy()

    def encode_uops(self) -> np.ndarray:
        """Micro-op table as little-endian bytes (the instructions are not encoded for
        it)."""
        kept = self.kept_encoded()
        return (self._uop_words() if kept is None else kept.uops).ravel().copy()

    def region_bytes(self, name: str) -> np.ndarray | None:
        """The initial bytes of region ``name`` of :meth:`layout`: the encoded
        instructions (``"insns"``), micro-ops (``"uops"``) or a segment's data (None for
        a segment without data)."""
        if name == "insns":
            return self.encode_insns()
        if name == UOP_SEGMENT:
            return self.encode_uops()
        data = self.segment(name).data
        return None if data is None else np.ascontiguousarray(data).view(np.uint8).ravel()

    def dram_image(self) -> np.ndarray:
        """The initial DRAM contents as a ``uint8`` array of :attr:`dram_size` bytes."""
        lay = self.layout()
        img = np.zeros(lay["end"].offset, dtype=np.uint8)
        for name in ("insns", UOP_SEGMENT, *(s.name for s in self.segments)):
            data = self.region_bytes(name)
            if data is not None:
                img[lay[name].offset: lay[name].offset + data.size] = data
        return img

    def read_segment(self, image: np.ndarray, name: str) -> np.ndarray:
        """A copy of segment ``name`` read out of a DRAM image, with its shape and dtype."""
        s = self.segment(name)
        r = self.layout()[name]
        raw = np.ascontiguousarray(image[r.offset: r.offset + r.nbytes])
        return raw.view(DTYPES[s.dtype]).reshape(s.shape).copy()

    def outputs(self, image: np.ndarray) -> dict[str, np.ndarray]:
        """Every segment marked ``output``, read from ``image``."""
        return {s.name: self.read_segment(image, s.name) for s in self.segments if s.output}

    # -------------------------------------------------------------- binary format
    def to_bytes(self) -> bytes:
        """Serialize to the ``.bin`` format (header JSON, words, segment data).

        Raises
        ------
        ProgramError
            A segment name assembly cannot read back (:func:`segment_name_problem`):
            ``disasm`` would print a line that does not assemble.
        IllegalInstruction
            An instruction or micro-op that does not encode (names its index).
        """
        check_segment_names(self)
        header = {
            "config": self.config.to_dict(),
            "n_insns": len(self.insns),
            "n_uops": len(self.uops),
            "segments": [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape),
                          "output": s.output, "has_data": s.data is not None}
                         for s in self.segments],
        }
        if self.placement is not None:
            header["placement"] = dict(self.placement)
        hdr = json.dumps(header, separators=(",", ":")).encode()
        parts = [MAGIC, struct.pack("<II", VERSION, len(hdr)), hdr,
                 self.encode_insns().tobytes(), self.encode_uops().tobytes()]
        parts += [np.ascontiguousarray(s.data).tobytes() for s in self.segments
                  if s.data is not None]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes, source: str = "<bytes>") -> Program:
        """Read a program written by :meth:`to_bytes`.

        Raises
        ------
        BinaryFormatError
            Bad magic or version, truncation, or trailing bytes.
        IllegalInstruction
            An instruction word that does not decode (names its index).
        """
        if blob[:8] != MAGIC:
            raise BinaryFormatError(f"{source}: not a tensorfab program (bad magic)")
        if len(blob) < 16:
            raise BinaryFormatError(f"{source}: truncated at byte {len(blob)}, inside the "
                                    f"16-byte preamble (magic, version, header length)")
        version, hlen = struct.unpack_from("<II", blob, 8)
        if version != VERSION:
            raise BinaryFormatError(f"{source}: version {version}, this tensorfab reads "
                                    f"{VERSION}")
        if 16 + hlen > len(blob):
            raise BinaryFormatError(_cut_header_message(blob, source))
        try:
            header = json.loads(blob[16: 16 + hlen])
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BinaryFormatError(f"{source}: unreadable header: {exc}") from exc
        cfg, n_insns, n_uops, seg_headers, placement = _check_header(header, source)
        pos = 16 + hlen
        nb = insn_width(cfg) // 8
        ub = uop_format(cfg).bytes

        def take(n: int, what: str) -> bytes:
            nonlocal pos
            if pos + n > len(blob):
                raise BinaryFormatError(f"{source}: truncated in {what} (byte {pos} of "
                                        f"{len(blob)}, {n} more needed)")
            chunk = blob[pos: pos + n]
            last[0] = pos
            pos += n
            return chunk

        last = [pos]
        insn_at = pos
        uop_reserved = uop_format(cfg).reserved_mask
        canonical = True  # every micro-op word as encode_uop writes it (no reserved bit)
        try:
            insns = [decode_insn(int.from_bytes(take(nb, f"instruction {i}"), "little"),
                                 cfg, i) for i in range(n_insns)]
            uop_at = pos
            uops = []
            for i in range(n_uops):
                word = int.from_bytes(take(ub, f"micro-op {i}"), "little")
                canonical = canonical and not word & uop_reserved
                uops.append(decode_uop(word, cfg))
        except ProgramError as exc:
            raise type(exc)(f"{source}: byte {last[0]}: {exc.detail}", code=exc.code,
                            index=exc.index, engine=exc.engine, field=exc.field) from exc
        segs = []
        for s in seg_headers:
            data = None
            if s["has_data"]:
                dt = DTYPES[s["dtype"]]
                n = math.prod(s["shape"]) * dt.itemsize
                data = np.frombuffer(take(n, f"segment {s['name']}"), dtype=dt).reshape(
                    s["shape"])
            segs.append(Segment(s["name"], s["dtype"], tuple(s["shape"]), data, s["output"]))
        if pos != len(blob):
            raise BinaryFormatError(f"{source}: {len(blob) - pos} trailing bytes after byte "
                                    f"{pos}")
        try:
            program = cls(cfg, insns, uops, segs, placement)
            check_placement(program)
        except ProgramError as exc:
            raise BinaryFormatError(f"{source}: header: {exc}") from exc
        if canonical:  # a decoded instruction encodes to its word again, bit for bit
            program.keep_encoded(EncodedWords(
                np.frombuffer(bytes(blob[insn_at: uop_at]), np.uint8).reshape(-1, nb),
                np.frombuffer(bytes(blob[uop_at: uop_at + n_uops * ub]),
                              np.uint8).reshape(-1, ub),
                program.uop_offset))
        return program

    # ----------------------------------------------------------------- statistics
    def count_by_opcode(self) -> dict[str, int]:
        """Number of instructions of each opcode."""
        counts = {op.name.lower(): 0 for op in Opcode}
        for insn in self.insns:
            counts[insn.opcode.name.lower()] += 1
        return counts


def _cut_header_message(blob: bytes, source: str) -> str:
    """Why a binary whose header length (bytes 12-15) reaches past its end is refused.

    The header :meth:`Program.to_bytes` writes is printable ASCII JSON, so a file whose
    bytes after the preamble are all printable ASCII was cut inside its header; any
    other byte there means the length (or more) is damaged. Neither message repeats
    the length, which a damaged file does not vouch for.
    """
    rest = blob[16:]
    bad = next((i for i, b in enumerate(rest) if not 0x20 <= b < 0x7F), None)
    if bad is None:
        return (f"{source}: header: truncated: the file ends at byte {len(blob)}, inside "
                f"its JSON header (which starts at byte 16)")
    return (f"{source}: header: the header length (bytes 12-15) reaches past the end of "
            f"the file (byte {len(blob)}), and byte {16 + bad} is not header text: "
            f"damaged")


def placement_alignment(program_or_cfg: Program | HwConfig) -> int:
    """The byte alignment a placed region needs: a multiple of every transfer unit and of
    :func:`~tensorfab.isa.program.dram_alignment` (so the region stays aligned for
    every access it serves)."""
    cfg = getattr(program_or_cfg, "config", program_or_cfg)

    units = [buffer_entry_bytes(cfg, b) for b in Buffer] + [cfg.out_entry_bytes,
                                                             uop_format(cfg).bytes]
    return math.lcm(dram_alignment(cfg), *units)


def check_placement(program: Program) -> None:
    """Raise :class:`ProgramError` if a placed program's regions are unaligned, overlap
    or leave the DRAM address space."""
    if program.placement is None:
        return
    align = placement_alignment(program)
    lay = program.layout()
    spans = sorted((r.offset, r.offset + r.nbytes, n) for n, r in lay.items()
                   if n != "end" and r.nbytes)
    for n, r in lay.items():
        if n != "end" and r.offset % align:
            raise ProgramError(f"placement: region {n!r} at byte {r.offset:#x} is not "
                               f"aligned to {align} bytes")
    for (_, end_a, a), (start_b, _, b) in itertools.pairwise(spans):
        if start_b < end_a:
            raise ProgramError(f"placement: regions {a!r} and {b!r} overlap at byte "
                               f"{start_b:#x}")
    if lay["end"].offset > program.config.dram_bytes:
        raise ProgramError(f"placement: the program reaches byte {lay['end'].offset:#x}, "
                           f"past the {program.config.dram_addr_width}-bit address space")


_HEADER_KEYS = {"config": dict, "n_insns": int, "n_uops": int, "segments": list}
_OPTIONAL_HEADER_KEYS = {"placement": dict}
_SEGMENT_KEYS = {"name": str, "dtype": str, "shape": list, "output": bool, "has_data": bool}


def _check_header(header: object, source: str
                  ) -> tuple[HwConfig, int, int, list[dict], dict[str, int] | None]:
    """Validate a binary's JSON header as untrusted input.

    Raises
    ------
    BinaryFormatError
        Naming the header key (and segment) that is missing or wrong.
    """
    def bad(what: str) -> BinaryFormatError:
        return BinaryFormatError(f"{source}: header: {what}")

    def typed(obj: dict, keys: dict[str, type], where: str,
              optional: dict[str, type] | None = None) -> None:
        optional = optional or {}
        for key, kind in (keys | optional).items():
            if key not in obj:
                if key in optional:
                    continue
                raise bad(f"{where}missing key {key!r}")
            v = obj[key]
            if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
                raise bad(f"{where}{key} = {v!r} is not a {kind.__name__}")
        extra = set(obj) - set(keys) - set(optional)
        if extra:
            raise bad(f"{where}unknown key(s) {', '.join(map(repr, sorted(extra)))}")

    if not isinstance(header, dict):
        raise bad("not a JSON object")
    typed(header, _HEADER_KEYS, "", _OPTIONAL_HEADER_KEYS)
    try:
        cfg = HwConfig.from_dict(header["config"])
    except (ValueError, TypeError) as exc:  # ConfigError is a ValueError
        raise bad(f"config: {exc}") from exc
    for key in ("n_insns", "n_uops"):
        if header[key] < 0:
            raise bad(f"{key} = {header[key]} is negative")
    segs = header["segments"]
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise bad(f"segment {i} is not a JSON object")
        typed(s, _SEGMENT_KEYS, f"segment {i}: ")
        problem = segment_name_problem(s["name"])
        if problem is not None:
            raise bad(f"segment {i} ({s['name']!r}): the name {problem}")
        if s["dtype"] not in DTYPES:
            raise bad(f"segment {i} ({s['name']!r}): dtype {s['dtype']!r} is not one of "
                      f"{', '.join(DTYPES)}")
        shape = s["shape"]
        if not shape or not all(isinstance(e, int) and not isinstance(e, bool) and e > 0
                                for e in shape):
            raise bad(f"segment {i} ({s['name']!r}): shape {shape} must be positive integers")
        if math.prod(shape) * DTYPES[s["dtype"]].itemsize > cfg.dram_bytes:
            raise bad(f"segment {i} ({s['name']!r}): shape {shape} exceeds the "
                      f"{cfg.dram_addr_width}-bit DRAM address space")
    placement = header.get("placement")
    if placement is not None:
        names = {"insns", UOP_SEGMENT, *(s["name"] for s in segs)}
        if set(placement) != names or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < cfg.dram_bytes
                for v in placement.values()):
            raise bad(f"placement {placement!r} must give a byte address inside the "
                      f"{cfg.dram_addr_width}-bit DRAM to each of {sorted(names)}")
    return cfg, header["n_insns"], header["n_uops"], segs, placement


def decode_stream(words: Iterable[int], cfg: HwConfig) -> list[Insn]:
    """Decode instruction words, naming the index of the first illegal one."""
    return [decode_insn(w, cfg, i) for i, w in enumerate(words)]


def words_from_bytes(raw: Sequence[int] | np.ndarray, cfg: HwConfig) -> list[int]:
    """Split little-endian instruction bytes into words."""
    nb = insn_width(cfg) // 8
    data = bytes(np.asarray(raw, dtype=np.uint8))
    return [int.from_bytes(data[i: i + nb], "little") for i in range(0, len(data), nb)]
