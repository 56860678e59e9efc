"""InsnSequencer in Amaranth's simulator against a cycle-level Python model.

The testbench plays the engine's surroundings at random: instructions arrive with
gaps and random token flags, the token queues fill at random, push room comes and
goes, the datapath takes 0 to 3 cycles (0: done in the start cycle), sometimes fails,
and ``halt`` comes in bursts that drop instructions at every step. Every cycle the
sequencer's outputs must equal the model's; the queues' counts check that no token is
popped that was not there or pushed where there was no room, and the log checks the
order: instructions retire in the order taken, each popping its tokens at its start
and pushing them at its retire.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from amaranth.sim import Simulator

from tensorfab.hw.sequencer import InsnSequencer
from tensorfab.isa import PRESETS, Engine, insn_width
from tensorfab.isa.formats import header_format, token_pops, token_pushes

CFG = PRESETS["tiny"]


def flag_bits() -> dict[str, int]:
    """Bit position of each dependency flag in an instruction word."""
    out, pos = {}, 0
    for f in header_format(CFG).fields:
        if f.name.startswith(("pop_", "push_")):
            out[f.name] = pos
        pos += f.width
    return out


@dataclass
class SequencerModel:
    """What :class:`InsnSequencer` does, cycle by cycle (the docstring's rules)."""

    pops: tuple[str, ...]
    pushes: tuple[str, ...]
    state: str = "IDLE"
    word: int = 0
    index: int = 0
    bits: dict[str, int] = field(default_factory=flag_bits)

    def flag(self, name: str) -> bool:
        return bool(self.word >> self.bits[name] & 1)

    def outputs(self, i: dict) -> dict:
        """Outputs of this cycle; ``i``: insn_valid, halt, pop valids, push readies,
        and the datapath's done/fail/idle (which may depend on ``start``)."""
        o = {"insn_ready": 0, "start": 0, "busy": 0, "stall": 0, "retire": 0, "idle": 0,
             **{f: 0 for f in self.pops + self.pushes}, "next": self.state}

        def drop() -> None:
            o["next"] = "IDLE" if i["idle"] else "DROP"

        def outcome(otherwise: str) -> None:
            if i["fail"]:
                drop()
            elif i["done"]:
                o["next"] = "PUSH"
            else:
                o["next"] = otherwise

        s = self.state
        if s == "IDLE":
            o["idle"] = 1
            o["insn_ready"] = int(not i["halt"])
            if i["insn_valid"] and not i["halt"]:
                o["next"] = "POP"
        elif s == "POP":
            o["busy"] = 1
            if i["halt"]:
                drop()
            elif all(not self.flag(f) or i[f] for f in self.pops):
                o["start"] = 1
                for f in self.pops:
                    o[f] = int(self.flag(f))
                outcome("EXEC")
            else:
                o["stall"] = 1
        elif s == "EXEC":
            o["busy"] = 1
            if i["halt"]:
                drop()
            else:
                outcome("EXEC")
        elif s == "PUSH":
            o["busy"] = 1
            if i["halt"]:
                drop()
            elif all(not self.flag(f) or i[f] for f in self.pushes):
                for f in self.pushes:
                    o[f] = int(self.flag(f))
                o["retire"] = 1
                o["next"] = "IDLE"
            else:
                o["stall"] = 1
        elif s == "DROP":
            o["idle"] = int(i["idle"])
            if i["idle"]:
                o["next"] = "IDLE"
        return o


@pytest.mark.parametrize("engine", list(Engine), ids=lambda e: e.name.lower())
def test_sequencer_matches_model(engine: Engine) -> None:
    dut = InsnSequencer(CFG, engine)
    pops = tuple(f for f, _ in token_pops(engine))
    pushes = tuple(f for f, _ in token_pushes(engine))
    model = SequencerModel(pops, pushes)
    rng = random.Random(int(engine) + 11)
    width = insn_width(CFG)
    program = [(1000 + k, rng.getrandbits(width)) for k in range(300)]
    seen = dict.fromkeys(("stall_pop", "stall_push", "done_at_start", "fail", "drop_halt",
                          "drop_drain", "retire"), 0)

    async def bench(ctx) -> None:
        queues = {f: 0 for f in pops}  # tokens available to pop
        pos = 0  # next instruction to offer
        taken: list[int] = []  # indices taken, in order
        retired: list[int] = []
        dropped: list[int] = []
        started: list[int] = []
        exec_left: int | None = None  # datapath: cycles until done/fail
        will_fail = False
        drain = 0  # datapath: cycles still needed after a drop
        halt_left = 0
        hist: dict[str, int] = {}
        for cycle in range(6000):
            hist[model.state] = hist.get(model.state, 0) + 1
            if pos == len(program) and model.state == "IDLE":
                break
            # inputs
            if halt_left == 0 and rng.random() < 0.01:
                halt_left = rng.randint(1, 6)
            halt = halt_left > 0
            halt_left = max(0, halt_left - 1)
            for f in pops:
                if rng.random() < 0.1:
                    queues[f] += 1
            i = {"halt": int(halt), "insn_valid": int(pos < len(program) and rng.random() < 0.7)}
            i |= {f: int(queues[f] > 0) for f in pops}
            i |= {f: int(rng.random() < 0.6) for f in pushes}
            ctx.set(dut.halt, i["halt"])
            ctx.set(dut.insn.valid, i["insn_valid"])
            if pos < len(program):
                ctx.set(dut.insn.payload, {"index": program[pos][0], "word": program[pos][1]})
            for f in pops:
                ctx.set(getattr(dut, f).valid, i[f])
            for f in pushes:
                ctx.set(getattr(dut, f).ready, i[f])
            # the datapath answers (possibly in the start cycle)
            done = fail = 0
            if ctx.get(dut.exec.start):
                assert exec_left is None and drain == 0
                exec_left = rng.randint(0, 3)
                will_fail = exec_left > 0 and rng.random() < 0.15
                started.append(model.index)
                seen["done_at_start"] += exec_left == 0
            if exec_left is not None and halt:
                exec_left, drain = None, rng.randint(0, 2)
            elif exec_left == 0:
                exec_left = None
                if will_fail:
                    fail, drain = 1, rng.randint(0, 1)
                    seen["fail"] += 1
                else:
                    done = 1
            idle = int(exec_left is None and drain == 0)
            code = rng.randint(1, 15)
            ctx.set(dut.exec.done, done)
            ctx.set(dut.exec.fail, fail)
            ctx.set(dut.exec.code, code)
            ctx.set(dut.exec.idle, idle)
            i |= {"done": done, "fail": fail, "idle": idle}
            o = model.outputs(i)
            got = {"insn_ready": ctx.get(dut.insn.ready), "start": ctx.get(dut.exec.start),
                   "busy": ctx.get(dut.busy), "stall": ctx.get(dut.stall),
                   "retire": ctx.get(dut.retire), "idle": ctx.get(dut.idle)}
            got |= {f: ctx.get(getattr(dut, f).ready) for f in pops}
            got |= {f: ctx.get(getattr(dut, f).valid) for f in pushes}
            want = {k: v for k, v in o.items() if k != "next"}
            assert got == want, f"cycle {cycle}, state {model.state}, inputs {i}"
            assert ctx.get(dut.exec.word) == model.word or model.state == "IDLE"
            assert ctx.get(dut.error.valid) == fail
            if fail:
                assert ctx.get(dut.error.code) == code
                assert ctx.get(dut.error.index) == model.index
            # tokens move only where there is one / there is room
            for f in pops:
                if got[f]:
                    assert queues[f] > 0
                    queues[f] -= 1
            for f in pushes:
                assert not got[f] or i[f]
            # bookkeeping and the model's step
            if model.state == "POP" and model.pops and o["stall"]:
                seen["stall_pop"] += 1
            if model.state == "PUSH" and o["stall"]:
                seen["stall_push"] += 1
            if o["insn_ready"] and i["insn_valid"]:
                model.index, model.word = program[pos]
                taken.append(model.index)
                pos += 1
            if o["retire"]:
                retired.append(model.index)
                seen["retire"] += 1
            if (model.state not in ("IDLE", "DROP") and o["next"] in ("IDLE", "DROP")
                    and not o["retire"]):
                dropped.append(model.index)
                seen["drop_drain" if o["next"] == "DROP" else "drop_halt"] += 1
            model.state = o["next"]
            if drain > 0:
                drain -= 1
            if exec_left is not None:
                exec_left -= 1
            await ctx.tick()
        assert pos == len(program), f"the program did not run through: {hist} {seen}"
        assert taken == [k for k, _ in program]
        assert sorted(retired + dropped) == taken
        assert retired == [k for k in taken if k not in set(dropped)]  # in order
        assert set(started) >= set(retired)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    missing = [k for k, v in seen.items() if not v and not (k == "stall_pop" and not pops)
               and not (k == "stall_push" and not pushes)]
    assert not missing, f"never happened: {missing} ({seen})"
