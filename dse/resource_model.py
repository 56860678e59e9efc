"""A resource model of the accelerator on ECP5: LUT, FF, DSP and block RAM of any
configuration, fitted to real Yosys syntheses (:mod:`.resource_builds`) and validated
on held-out builds (leave-one-out).

Each resource is linear in a few features of the configuration that follow the
design's structure (:data:`FEATURES`): the GEMM core's MACs (one multiplier each) and
their reduction over ``block_in`` (MACs × block_in for the logic, MACs × log2 block_in
for the adder tree's pipeline registers), the vector ALU's lanes (``batch ×
block_out``, a 32-bit multiplier each), the weight tile (``block_in × block_out``
bytes assembled by the load engine), the DRAM address width (the load, store and fetch
engines' address arithmetic), for the registers whether the core has its performance
counters (eleven 32-bit counters: a constant block) and, for block RAM, the
DP16KD blocks the buffers need by their shapes (the accumulator's apart: it is read by
several ports). The feature sets were chosen among such structural terms by
leave-one-out error on the first eight builds; the two after them were held out of
that choice, and the counters' term was added with the two board configurations
(built without counters; it lowers the registers' held-out error, mean 1.7 -> 1.0 %,
and raises the logic's, 5.8 -> 7.4 %, so the logic goes without it). The board's on-chip
memory (block RAM of its own) is added by its shape, so the model trained on one ECP5
board estimates the others.

Every figure it gives is an estimate: outputs label it so. The fitted model, its
training data (with the Yosys version and the source hash of the design it was built
from) and its leave-one-out errors are ``resource_model.json`` beside this module,
written by ``tensorfab dse fit-resources``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tensorfab.isa import HwConfig, UsageError
from tensorfab.isa.formats import requant_supported

__all__ = ["ALU_DSP_PER_LANE", "FEATURES", "MIN_BUILDS", "MODEL_PATH", "REPORTED_BUILDS",
           "RESOURCES", "SDRAM_CONTROLLER", "SEQUENTIAL_ALU_DSP_SAVED_PER_LANE",
           "STORE_REQUANT_DSP_PER_LANE", "ResourceModel",
           "buffer_blocks", "buffer_brams", "config_features", "dp16kd_blocks", "ecp5_board",
           "fit_resource_model",
           "memory_brams"]

#: The resources the model estimates, in :mod:`tensorfab.fpga_builds.breakdown`'s
#: categories (``LUT``: ECP5 LUT4 slots before packing, as ``fpga breakdown``'s logic).
RESOURCES = ("LUT", "FF", "DSP", "BRAM")

#: What an SoC with its device memory in SDRAM adds to one with on-chip memory, besides
#: dropping the memory's BRAMs: the SDRAM controller and its read FIFO. The mean of two
#: flat Yosys syntheses of each (LUT in :data:`RESOURCES`' unit; ulx3s-85f tiny: LUT
#: +436, FF +334; ulx3s-25f ecp5-25f: LUT +548, FF +337; DSP and the BRAM beyond the
#: memory's unchanged).
SDRAM_CONTROLLER = {"LUT": 492, "FF": 336}

#: ``MULT18X18D`` blocks per lane of the requantizing STORE's datapath on a config with
#: REQUANT (:class:`tensorfab.hw.store_requant.StoreRequant`: a lane's four partial
#: products, each a :class:`~tensorfab.hw.dsp.RegisteredMultiplier`). No build the model
#: is fitted to has REQUANT (none fits a board), so they are added to its estimate as
#: counted.
STORE_REQUANT_DSP_PER_LANE = 4

#: ``MULT18X18D`` blocks per lane a config with ``sequential_multiplier`` saves: the
#: vector ALU's four partial-product multipliers become one
#: (:mod:`tensorfab.hw.alu_sequential`; ulx3s-25f ``ecp5-25f``, 2 lanes: 20 → 14 DSP).
SEQUENTIAL_ALU_DSP_SAVED_PER_LANE = 3

#: ``MULT18X18D`` blocks per lane of the vector ALU (its four partial-product
#: multipliers), which every build the model is fitted to has: a config without it
#: (``vector_alu`` false) has that many fewer. Its LUTs are not taken out of the
#: estimate (no build without the ALU to fit them to).
ALU_DSP_PER_LANE = 4

#: The features each resource is linear in (``one`` is the constant term).
FEATURES: dict[str, tuple[str, ...]] = {
    "LUT": ("one", "macs", "lanes", "macs_x_block_in", "dram_addr_width"),
    "FF": ("one", "lanes", "weight_tile", "macs_x_log2_block_in", "dram_addr_width",
           "perf_counters"),
    "DSP": ("one", "macs", "lanes"),
    "BRAM": ("one", "acc_brams", "other_brams"),
}

#: The fewest builds a fit takes: the most features of a resource plus one, so that
#: each build can be held out.
MIN_BUILDS = max(len(f) for f in FEATURES.values()) + 1

#: The package's fitted model (``tensorfab dse fit-resources`` writes it).
MODEL_PATH = Path(__file__).with_name("resource_model.json")

#: Real place-and-route builds (nextpnr-ecp5) recorded in docs/fpga.md's table: whether
#: the design routed, the fmax it reached against its clock constraint (seed 1), the
#: device memory it was built with and what it used (nextpnr's counts; the placed but
#: unrouted build's from its placement). Not modelled: reported beside the estimates; a
#: build that did not route outweighs an estimate that fits, and one that reached less
#: than a board's clock flags the config there (``advise``). Of a board and config's
#: entries, the first with the device memory asked about is the one reported, else the
#: first.
REPORTED_BUILDS: tuple[dict[str, Any], ...] = (
    {"board": "ulx3s-85f", "config": "ecp5-85f", "routed": True, "fmax_mhz": 99.9,
     "constraint_mhz": 100.0, "memory": "sdram",
     "used": {"LUT": 24139, "FF": 13625, "DSP": 100, "BRAM": 66},
     "note": "fpga build --board ulx3s-85f --clock-mhz 100, seed 3; 1 of 36,948 register "
             "inputs late at 100 MHz, by 0.01 ns"},
    {"board": "ulx3s-85f", "config": "ecp5-85f", "routed": True, "fmax_mhz": 73.08,
     "constraint_mhz": 70.0, "memory": "on-chip",
     "used": {"LUT": 25409, "FF": 12429, "DSP": 100, "BRAM": 98},
     "note": "fpga build --board ulx3s-85f --memory on-chip (router1, the default there; "
             "9,106 s)"},
    {"board": "ulx3s-85f", "config": "ecp5-85f", "routed": True, "fmax_mhz": 55.26,
     "constraint_mhz": 100.0, "memory": "on-chip",
     "used": {"LUT": 25127, "FF": 12431, "DSP": 100, "BRAM": 98},
     "note": "router2; 9,722 of 39,367 register inputs late at 100 MHz"},
    {"board": "ulx3s-85f", "config": "tiny", "routed": True, "fmax_mhz": 76.1,
     "constraint_mhz": 60.0, "memory": "sdram",
     "used": {"LUT": 16304, "FF": 8076, "DSP": 36, "BRAM": 18}},
    {"board": "ulx3s-85f", "config": "tiny", "routed": True, "fmax_mhz": 63.6,
     "constraint_mhz": 60.0, "memory": "on-chip",
     "used": {"LUT": 16872, "FF": 6655, "DSP": 36, "BRAM": 50}},
    {"board": "ulx3s-85f", "config": "small", "routed": False, "fmax_mhz": None,
     "constraint_mhz": 60.0, "memory": "on-chip",
     "used": {"LUT": 29037, "FF": 8709, "DSP": 100, "BRAM": 98},
     "note": "placed (29,037 LUT, 100 DSP) but router1 does not converge and router2 "
             "did not finish"},
    {"board": "ulx3s-25f", "config": "ecp5-25f", "routed": True, "fmax_mhz": 108.15,
     "constraint_mhz": 100.0, "memory": "on-chip",
     "used": {"LUT": 11918, "FF": 6128, "DSP": 20, "BRAM": 19},
     "note": "fpga build --timing-closure (the default there); seeds 2 and 3: 104.20 and "
             "109.10 MHz"},
    {"board": "ulx3s-25f", "config": "ecp5-25f-4x4", "routed": True, "fmax_mhz": 93.86,
     "constraint_mhz": 80.0, "memory": "on-chip",
     "used": {"LUT": 15702, "FF": 7765, "DSP": 24, "BRAM": 26},
     "note": "1x4x4 with the sequential multiplier, seed 1, 274 s; seeds 2 and 3: 91.77 "
             "and 92.94 MHz; at a 100 MHz constraint about 95 MHz (0.3-0.8 ns short)"},
    {"board": "orangecrab-25f", "config": "ecp5-25f", "routed": True, "fmax_mhz": 83.4,
     "constraint_mhz": 80.0, "memory": "on-chip",
     "used": {"LUT": 12881, "FF": 5263, "DSP": 20, "BRAM": 19}},
    {"board": "orangecrab-85f", "config": "ecp5-85f", "routed": True, "fmax_mhz": 79.18,
     "constraint_mhz": 56.0, "memory": "on-chip",
     "used": {"LUT": 25187, "FF": 12427, "DSP": 100, "BRAM": 98},
     "note": "the board's default build (fpga build --board orangecrab-85f, router2); "
             "seeds 2 and 3: 70.14 and 78.08 MHz"},
    {"board": "orangecrab-85f", "config": "ecp5-85f", "routed": True, "fmax_mhz": 60.05,
     "constraint_mhz": 60.0, "memory": "on-chip",
     "used": {"LUT": 25280, "FF": 12428, "DSP": 100, "BRAM": 98},
     "note": "router2; seed 1, 0.05 MHz to spare"},
    {"board": "orangecrab-85f", "config": "tiny", "routed": True, "fmax_mhz": 79.9,
     "constraint_mhz": 72.0, "memory": "on-chip",
     "used": {"LUT": 17526, "FF": 6656, "DSP": 36, "BRAM": 50}},
)

#: DP16KD shapes (depth, width): 18 Kbit, 16 Kbit of them in the narrow modes.
_DP16KD_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def dp16kd_blocks(depth: int, width: int) -> int:
    """ECP5 DP16KD blocks a ``depth × width`` memory takes in its best shape."""
    return min(math.ceil(depth / d) * math.ceil(width / w) for d, w in _DP16KD_SHAPES)


def buffer_blocks(cfg: HwConfig) -> dict[str, int]:
    """DP16KD blocks of each of the core's on-chip buffers by its shape (``inp``,
    ``uop``, ``acc``, ``wgt``: the weight buffer's 64-bit banks), as
    :class:`~tensorfab.hw.core.Core` declares them."""
    from tensorfab.hw.signatures import (
        acc_entry_bits,
        inp_entry_bits,
        uop_entry_bits,
        wgt_entry_bits,
    )

    bank = min(64, wgt_entry_bits(cfg))
    return {"inp": dp16kd_blocks(cfg.inp_depth, inp_entry_bits(cfg)),
            "uop": dp16kd_blocks(cfg.uop_depth, uop_entry_bits(cfg)),
            "acc": dp16kd_blocks(cfg.acc_depth, acc_entry_bits(cfg)),
            "wgt": wgt_entry_bits(cfg) // bank * dp16kd_blocks(cfg.wgt_depth, bank)}


def buffer_brams(cfg: HwConfig) -> int:
    """DP16KD blocks of all the core's buffers by their shapes (:func:`buffer_blocks`)."""
    return sum(buffer_blocks(cfg).values())


def memory_brams(mem_bytes: int, cfg: HwConfig) -> int:
    """DP16KD blocks of a board's on-chip memory (``mem_bytes``, one bus word wide)."""
    return dp16kd_blocks(mem_bytes * 8 // cfg.mem_bus_width, cfg.mem_bus_width)


def config_features(cfg: HwConfig) -> dict[str, float]:
    """The model's features of a configuration (:data:`FEATURES` names them)."""
    blocks = buffer_blocks(cfg)
    return {"one": 1.0, "macs": float(cfg.batch * cfg.block_in * cfg.block_out),
            "lanes": float(cfg.batch * cfg.block_out),
            "weight_tile": float(cfg.block_in * cfg.block_out),
            "macs_x_block_in": float(cfg.batch * cfg.block_in ** 2 * cfg.block_out),
            "macs_x_log2_block_in": float(cfg.batch * cfg.block_in * cfg.block_out
                                          * math.log2(cfg.block_in)),
            "mem_bus_width": float(cfg.mem_bus_width),
            "dram_addr_width": float(cfg.dram_addr_width),
            "perf_counters": float(cfg.perf_counters),
            "acc_brams": float(blocks["acc"]),
            "other_brams": float(blocks["inp"] + blocks["uop"] + blocks["wgt"])}


def ecp5_board(name: str) -> Any:
    """An ECP5 board by name (the family the model is fitted to).

    Raises
    ------
    UsageError
        For an unknown board (the known ones listed) or one of another family.
    """
    from tensorfab.fpga_builds.boards import get_board
    from tensorfab.fpga_builds.errors import FpgaBuildError

    try:
        board = get_board(name)
    except FpgaBuildError as e:
        raise UsageError(f"--board: {e}") from None
    if board.family != "ecp5":
        raise UsageError(f"--board {name}: the resource model is fitted to ECP5 builds; "
                         f"{name} is {board.family}")
    return board


def _target(record: Mapping[str, Any], resource: str) -> float:
    """A build's figure the model fits: block RAM without the board's memory."""
    value = float(record[resource])
    if resource == "BRAM":
        cfg = HwConfig.from_dict(record["config"])
        value -= memory_brams(ecp5_board(record["board"]).mem_bytes, cfg)
    return value


def _design(records: Sequence[Mapping[str, Any]], resource: str) -> np.ndarray:
    rows = [config_features(HwConfig.from_dict(r["config"])) for r in records]
    return np.array([[row[f] for f in FEATURES[resource]] for row in rows])


def _least_squares(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return coef


def fit_resource_model(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Fit each resource to the builds by least squares, with leave-one-out errors.

    Parameters
    ----------
    records : sequence of mapping
        :func:`~tensorfab.dse.resource_builds.synthesize_configs`'s results: ``config``,
        ``board`` and the measured ``LUT``, ``FF``, ``DSP``, ``BRAM``.

    Returns
    -------
    dict
        ``resources`` (per resource: ``features``, ``coefficients``, ``training_error``
        and ``loo`` — each build's leave-one-out estimate and relative error, their mean
        and max), ``builds`` (the records), ``source_hash``, ``yosys``, ``board``.

    Raises
    ------
    UsageError
        With fewer builds than a resource has features plus one (no held-out check).
    """
    if len(records) < MIN_BUILDS:
        raise UsageError(f"the resource model needs at least {MIN_BUILDS} builds "
                         f"(got {len(records)})")
    resources: dict[str, Any] = {}
    for res in RESOURCES:
        x = _design(records, res)
        y = np.array([_target(r, res) for r in records])
        coef = _least_squares(x, y)
        fitted = x @ coef
        held_out = []
        for i, rec in enumerate(records):
            keep = np.arange(len(records)) != i
            pred = float(x[i] @ _least_squares(x[keep], y[keep]))
            measured = float(rec[res])
            offset = measured - y[i]  # the board memory's blocks, for BRAM
            estimate = pred + offset
            held_out.append({"name": rec["name"], "measured": measured,
                             "estimate": round(estimate, 1),
                             "relative_error": round(abs(estimate - measured)
                                                     / max(measured, 1.0), 4)})
        errors = [h["relative_error"] for h in held_out]
        resources[res] = {
            "features": list(FEATURES[res]),
            "coefficients": [round(float(c), 6) for c in coef],
            "training_error_max": round(float(np.max(np.abs(fitted - y)
                                                     / np.maximum(np.abs(y), 1.0))), 4),
            "loo": {"builds": held_out, "mean_relative_error": round(float(np.mean(errors)), 4),
                    "max_relative_error": round(float(np.max(errors)), 4)},
        }
    first = records[0]
    return {"kind": "tensorfab resource model", "family": "ecp5", "board": first["board"],
            "source_hash": first["source_hash"], "yosys": first["yosys"],
            "lut_unit": "ECP5 LUT4 slots before packing (LUT4 + 2 x CCU2C + "
                        "6 x TRELLIS_DPR16X4), the flattened synthesis of fpga build",
            "resources": resources,
            "builds": [{k: v for k, v in r.items() if k != "reused"} for r in records]}


@dataclass(frozen=True)
class ResourceModel:
    """A fitted resource model (the content of ``resource_model.json``).

    Attributes
    ----------
    data : dict
        :func:`fit_resource_model`'s result.
    """

    data: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path | None = None) -> ResourceModel:
        """Read a model file (default: the package's, :data:`MODEL_PATH`).

        Raises
        ------
        UsageError
            The file is missing or is not a resource model (the file named).
        """
        p = Path(path) if path is not None else MODEL_PATH
        try:
            data = json.loads(p.read_text())
        except OSError as e:
            raise UsageError(f"{p}: cannot read the resource model ({e.strerror}); "
                             "`tensorfab dse fit-resources` writes it") from None
        except json.JSONDecodeError as e:
            raise UsageError(f"{p}: not JSON (line {e.lineno})") from None
        if not isinstance(data, dict) or data.get("kind") != "tensorfab resource model":
            raise UsageError(f"{p}: not a tensorfab resource model file")
        for res in RESOURCES:
            entry = data.get("resources", {}).get(res)
            if not entry or len(entry.get("coefficients", ())) != len(entry.get(
                    "features", ())) or any(f not in config_features(HwConfig())
                                            for f in entry["features"]):
                raise UsageError(f"{p}: resource {res!r} is missing or malformed")
        return cls(data)

    def estimate(self, cfg: HwConfig, board: str, sdram: bool | None = None
                 ) -> dict[str, int]:
        """Estimated LUT, FF, DSP and BRAM of ``cfg``'s SoC on ``board`` (ECP5), with
        its device memory in the board's SDRAM (no memory BRAMs; the controller's logic,
        :data:`SDRAM_CONTROLLER`) or on-chip (``sdram`` False; None: the board's
        default, :meth:`~tensorfab.fpga_builds.boards.Board.uses_sdram`).

        Raises
        ------
        UsageError
            For an unknown board or one that is not ECP5.
        FpgaBuildError
            ``sdram`` on a board without SDRAM.
        """
        b = ecp5_board(board)
        in_sdram = b.uses_sdram(sdram)
        feats = config_features(cfg)
        out = {}
        for res in RESOURCES:
            entry = self.data["resources"][res]
            value = sum(c * feats[f] for f, c in zip(entry["features"],
                                                     entry["coefficients"], strict=True))
            if res == "DSP" and requant_supported(cfg):
                value += STORE_REQUANT_DSP_PER_LANE * feats["lanes"]
            if res == "DSP" and cfg.sequential_multiplier:
                value -= SEQUENTIAL_ALU_DSP_SAVED_PER_LANE * feats["lanes"]
            if res == "DSP" and not cfg.vector_alu:
                value -= ALU_DSP_PER_LANE * feats["lanes"]
            if in_sdram:
                value += SDRAM_CONTROLLER.get(res, 0)
            elif res == "BRAM":
                value += memory_brams(b.mem_bytes, cfg)
            out[res] = max(0, round(value))
        return out

    def fits(self, estimate: Mapping[str, int], board: str) -> tuple[bool, list[str]]:
        """Whether an estimate is within ``board``'s device, and the resources over."""
        cap = ecp5_board(board).capacity
        over = [f"{res} {estimate[res]} > {cap[res]}" for res in RESOURCES
                if estimate[res] > cap[res]]
        return not over, over

    def held_out_error(self) -> dict[str, dict[str, float]]:
        """Leave-one-out relative error per resource: ``mean`` and ``max``."""
        return {res: {"mean": e["loo"]["mean_relative_error"],
                      "max": e["loo"]["max_relative_error"]}
                for res, e in self.data["resources"].items()}

    def held_out_text(self) -> str:
        """:meth:`held_out_error` in words: ``LUT mean 6.0 % max 12.6 %, ...``."""
        return ", ".join(f"{res} mean {e['mean']:.1%} max {e['max']:.1%}"
                         for res, e in self.held_out_error().items())

    def reported_fmax(self, board: str) -> dict[str, Any] | None:
        """The highest fmax a real build reached on ``board`` (docs/fpga.md), if any."""
        routed = [b for b in REPORTED_BUILDS if b["board"] == board and b["routed"]]
        return max(routed, key=lambda b: b["fmax_mhz"], default=None)

    def reported_build(self, board: str, cfg: HwConfig, memory: str | None = None
                       ) -> dict[str, Any] | None:
        """The real build of ``cfg`` (the same values, whatever its name and clock) on
        ``board`` (:data:`REPORTED_BUILDS`), if any: the first with device memory
        ``memory`` (``sdram``, ``on-chip``) when there is one, else the first."""
        from tensorfab.fpga_builds.board_configs import board_config

        def same(c: HwConfig) -> bool:
            a, b = c.to_dict(), cfg.to_dict()
            return all(a[k] == b[k] for k in a if k not in ("name", "clock_mhz"))

        builds = [b for b in REPORTED_BUILDS
                  if b["board"] == board and same(board_config(b["config"]))]
        return next((b for b in builds if b["memory"] == memory),
                    builds[0] if builds else None)
