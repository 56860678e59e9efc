"""The int8 digits CNN with its convolution chains on the cycle-accurate RTL core
(Verilator): the outputs equal the functional simulator's bit for bit."""

from __future__ import annotations

import numpy as np

from tensorfab.models import load_digits_split
from tensorfab.models.digits_int8 import compile_digits_int8, on_executor, predict_in_batches
from tensorfab.runtime.interpreter import run_program

BATCH = 4


def test_digits_cnn_on_rtl_equals_functional_simulator() -> None:
    model = compile_digits_int8(batch=BATCH, config="default")
    _, _, x, y = load_digits_split(0)
    images = x[:2 * BATCH]
    fsim = predict_in_batches(on_executor(model.program, "fsim"), images, BATCH)
    rtl = predict_in_batches(on_executor(model.program, "rtl"), images, BATCH)
    assert rtl.dtype == fsim.dtype and rtl.shape == (2 * BATCH, 10)
    np.testing.assert_array_equal(rtl, fsim)
    # and both equal the integer graph on the CPU interpreter
    np.testing.assert_array_equal(rtl, predict_in_batches(model.reference, images, BATCH))
    # the accelerator programs really ran on the RTL executor
    execs = {n.attrs["executor"] for n in on_executor(model.program, "rtl").nodes
             if n.op == "accel.program"}
    assert execs == {"rtl"}
    assert len([n for n in model.program.nodes if n.op == "accel.program"]) == 3  # + dense
    assert (np.asarray(run_program(model.reference, [images[:BATCH]])).argmax(axis=1)
            == y[:BATCH]).mean() >= 0.5
