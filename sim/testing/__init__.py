"""tensorfab.sim.testing: verification tooling (not executors).

Random programs with valid token discipline (:mod:`.random_program`), the cocotb
runner and memory model (:mod:`.cocotb_runner`, :mod:`.cocotb_memory`) and the core's
cocotb testbench (:mod:`.tb_core`, driven by :mod:`.core_harness`).
"""
