"""The device server and RemoteDevice (hil/server.py, hil/remote.py): a remote run, a
device memory session and a resident model equal fsim's bit for bit; device errors come
back naming the server and the cause; clients take the device in turn."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import GatedFsim, RawClient, conv_program, memory_session

from tensorfab.hil.errors import HilError, RemoteError, WireError
from tensorfab.hil.remote import RemoteDevice, RemoteMemory
from tensorfab.hil.wire import Msg
from tensorfab.isa import Program
from tensorfab.isa.device import open_device
from tensorfab.isa.errors import UsageError
from tensorfab.sim import FunctionalSimulator


def assert_same_run(got, want) -> None:
    np.testing.assert_array_equal(got.dram, want.dram)
    assert got.dram.dtype == want.dram.dtype
    assert got.outputs.keys() == want.outputs.keys()
    for k in want.outputs:
        assert got.outputs[k].dtype == want.outputs[k].dtype
        np.testing.assert_array_equal(got.outputs[k], want.outputs[k])
    assert got.counters == want.counters and got.cycles == want.cycles
    assert got.device == want.device


def test_a_remote_run_equals_a_local_fsim_run_bit_for_bit(serve, program) -> None:
    server = serve("fsim")
    with open_device(server.address, token=server.token) as dev:
        assert isinstance(dev, RemoteDevice) and dev.remote_name == "fsim"
        assert dev.info()["device"] == "fsim"
        assert_same_run(dev.run(program), FunctionalSimulator().run(program))
        # from a DRAM image of its own (larger than the program's, with a marker)
        image = np.zeros(program.dram_size + 64, np.uint8)
        image[: program.dram_size] = program.dram_image()
        image[-1] = 0xA5
        got, want = dev.run(program, image), FunctionalSimulator().run(program, image)
        assert_same_run(got, want)
        assert got.dram[-1] == 0xA5
    assert server.runs == 2


def test_the_token_comes_from_the_environment(serve, program, monkeypatch) -> None:
    server = serve("fsim")
    monkeypatch.setenv("TENSORFAB_TOKEN", server.token)
    with RemoteDevice(server.address) as dev:
        assert dev.run(program).outputs.keys() == {"out"}
    monkeypatch.delenv("TENSORFAB_TOKEN")
    with pytest.raises(HilError, match=f"{server.address}: no token: pass token=... or "
                                       "set TENSORFAB_TOKEN"):
        RemoteDevice(server.address)


def test_serving_a_served_device_takes_its_token_in_the_url(serve, program, monkeypatch,
                                                            capsys) -> None:
    """`tensorfab serve --device tcp://...` (and DeviceServer('tcp://...')) without the
    served server's token said 'pass token=... or set TENSORFAB_TOKEN', but serve's
    --token and DeviceServer's token= are the server's own, and a tcp:// URL's ?token=
    was ignored ('no token' with one in the URL). The URL's ?token= is now the token,
    the message says to put it there, and the device served that way runs as fsim."""
    from tensorfab.cli import main
    from tensorfab.hil.errors import TOKEN_ENV, TokenError
    from tensorfab.hil.server import DeviceServer

    server = serve("fsim")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    for device, problem in ((server.address, "no token"), (
            f"{server.address}?token=wrong", "the server refused the connection: wrong token")):
        capsys.readouterr()
        assert main(["serve", "--device", device, "--token", "mine"]) == 2
        assert capsys.readouterr().err == (
            f"error: {server.address}: {problem}: pass the device server's token in "
            f"--device '{server.address}?token=...' (--token is this server's own) or set "
            f"{TOKEN_ENV} (the server prints its token when it starts)\n")
        with pytest.raises(TokenError) as info:
            DeviceServer(device)
        assert str(info.value).startswith(
            f"{server.address}: {problem}: pass the device server's token in the target's "
            f"query ('{server.address}?token=...') or set {TOKEN_ENV}"), info
    outer = serve(f"{server.address}?token={server.token}")
    with open_device(outer.address, token=outer.token) as dev:
        got, want = dev.run(program), FunctionalSimulator().run(program)
        np.testing.assert_array_equal(got.outputs["out"], want.outputs["out"])
    with open_device(f"{server.address}?token={server.token}") as dev:
        assert dev.name == f"fsim@{server.address.removeprefix('tcp://')}"
    with pytest.raises(UsageError, match=r"tcp://[^?]*: unknown option tokn \(a tcp:// "
                                         r"target takes token\)"):
        open_device(f"{server.address}?tokn={server.token}")


def test_a_memory_session_equals_fsim(serve, program) -> None:
    server = serve("fsim")
    with RemoteDevice(server.address, token=server.token) as dev:
        assert isinstance(dev.open_memory(program.config, 4096), RemoteMemory)
        got, results = memory_session(dev, program)
    want, local = memory_session(FunctionalSimulator(), program)
    for g, w, r, lr in zip(got, want, results, local, strict=True):
        np.testing.assert_array_equal(g, w)
        assert r.counters == lr.counters and r.dram is None and r.outputs == {}
    # the second input is another convolution's: the runs differ
    assert not np.array_equal(got[0], got[1])


def _conv_relu_onnx():
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((8, 16, 1, 1)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_relu_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_resident_model_runs_remotely_with_its_weights_sent_once(serve) -> None:
    from tensorfab.compiler.model_compile import compile_onnx
    from tensorfab.runtime.interpreter import run_program
    from tensorfab.runtime.resident import ResidentModel

    rng = np.random.default_rng(1)
    calib = rng.standard_normal((8, 8, 6, 6)).astype(np.float32)
    graph = compile_onnx(_conv_relu_onnx(), config="tiny", calibration=calib).program
    xs = [rng.standard_normal((1, 8, 6, 6)).astype(np.float32) for _ in range(2)]
    server = serve("fsim")
    with RemoteDevice(server.address, token=server.token) as dev, \
            ResidentModel(graph, dev) as model:
        assert isinstance(model.memory, RemoteMemory)
        for x in xs:
            before = model.memory.host_bytes_written
            np.testing.assert_array_equal(model.run([x]), run_program(graph, [x]))
            # only the activations crossed the wire, the weights stayed on the server
            assert model.memory.host_bytes_written - before == model.last_run.written
            assert model.last_run.written < model.load_bytes
    assert server.runs >= 2 * len(xs)


def test_a_device_error_comes_back_naming_the_server_and_the_cause(serve) -> None:
    from support.error_programs import tiny_error_programs

    server = serve("fsim")
    progs, images, _ = tiny_error_programs()
    with RemoteDevice(server.address, token=server.token) as dev:
        for prog, image in list(zip(progs, images, strict=True))[:4]:
            with pytest.raises(Exception) as local:
                FunctionalSimulator().run(prog, image)
            with pytest.raises(RemoteError) as remote:
                dev.run(prog, image)
            err = remote.value
            assert err.address == server.address
            assert err.remote_class == type(local.value).__name__
            assert err.detail == str(local.value)
            assert str(err) == f"{server.address}: {err.remote_class}: {local.value}"
        # the connection and the device still serve
        assert dev.run(conv_program()).outputs


def test_a_wrong_dram_image_is_the_devices_error_not_a_wrong_result(serve, program) -> None:
    server = serve("fsim")
    with RemoteDevice(server.address, token=server.token) as dev:
        with pytest.raises(RemoteError, match="ProgramError: the DRAM image has 3 bytes"):
            dev.run(program, np.zeros(3, np.uint8))
        with pytest.raises(RemoteError, match="BinaryFormatError: the program sent: not a "
                                              "tensorfab program"):
            dev.connection.request(Msg.RUN, program=b"garbage")


def test_two_clients_at_once_are_both_served_correctly_in_turn(serve) -> None:
    device = GatedFsim()
    server = serve(device)
    programs = [conv_program(10 + i) for i in range(2)]
    wants = [FunctionalSimulator().run(p) for p in programs]
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with RemoteDevice(server.address, token=server.token) as dev:
                for _ in range(5):
                    assert_same_run(dev.run(programs[k]), wants[k])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert server.runs == 10 and device.max_active == 1


def test_a_client_gone_mid_run_leaves_the_device_to_the_next(serve, program,
                                                             raw_client) -> None:
    device = GatedFsim()
    server = serve(device)
    gone: RawClient = raw_client(server.port)
    assert gone.hello(server.token)["type"] == "ok"
    gone.send({"type": "open_memory", "config": program.config.to_json(), "size": 4096})
    assert gone.recv()["type"] == "ok" and device.open_memories == 1
    device.gate.clear()
    gone.send({"type": "run", "program": program.to_bytes()})
    assert device.started.wait(5)
    gone.close()  # mid-run
    device.gate.set()
    with RemoteDevice(server.address, token=server.token) as dev:
        assert_same_run(dev.run(program), FunctionalSimulator().run(program))
    assert device.finished.is_set()
    # the gone client's memory is closed once the server sees the connection end
    deadline = time.monotonic() + 5
    while device.open_memories and time.monotonic() < deadline:
        time.sleep(0.01)
    assert device.open_memories == 0


def test_an_rtl_device_served_remotely_equals_the_local_rtl(serve, program) -> None:
    from tensorfab.isa import Buffer, Finish, Gemm, Load, Uop
    from tensorfab.sim.rtl import HangError, RtlSimulator
    from tensorfab.sim.rtl.device import RtlRunResult

    server = serve(RtlSimulator(hang_cycles=2000))
    local = RtlSimulator(hang_cycles=2000)
    # a compute engine waiting for a token nobody pushes
    hang = Program(program.config,
                   [Load(buffer=Buffer.UOP, sram=0, dram=0, y=1, x=1, stride=1),
                    Gemm(pop_prev=True, reset=True), Finish()], [Uop()], [])
    with RemoteDevice(server.address, token=server.token) as dev:
        got = dev.run(program)
        with pytest.raises(HangError) as want_err:
            local.run(hang)
        with pytest.raises(RemoteError) as got_err:
            dev.run(hang)
        assert got_err.value.remote_class == "HangError"
        assert got_err.value.detail == str(want_err.value)
        assert "waits to pop from load→compute" in str(got_err.value)
    want = local.run(program)
    assert isinstance(got, RtlRunResult) and got.device == "rtl"
    assert_same_run(got, want)
    assert got.csrs == want.csrs and got.memory == want.memory


def test_an_image_the_wire_cannot_carry_is_refused_before_sending(serve, program) -> None:
    server = serve("fsim")
    with RemoteDevice(server.address, token=server.token) as dev:
        with pytest.raises(WireError, match="dtype object cannot be sent"):
            dev.run(program, np.array([object()] * 8))
        assert dev.run(program).outputs  # the connection is still open


def test_sim_takes_the_token_of_a_served_device(serve, tmp_path, capsys,
                                                monkeypatch) -> None:
    """`tensorfab sim prog.s --target tcp://... --token T` was an argparse error (sim
    had no --token, unlike run); now it runs there, and --token on a local target is
    refused in one line, as for run. No token named the Python API's `token=...`; it
    names --token."""
    from tensorfab.cli import main
    from tensorfab.example import example_path

    monkeypatch.delenv("TENSORFAB_TOKEN", raising=False)
    prog = example_path()
    server = serve("fsim")
    capsys.readouterr()
    assert main(["sim", str(prog), "--target", server.address, "--token", server.token,
                 "--json"]) == 0
    assert '"device": "fsim"' in capsys.readouterr().out
    assert main(["sim", str(prog), "--target", server.address, "--token", "wrong"]) == 2
    # a refused token names --token too (it was 'tcp://...: AuthenticationError: wrong
    # token', a RemoteError)
    assert capsys.readouterr().err == (f"error: {server.address}: the server refused the "
                                       "connection: wrong token: pass --token or set "
                                       "TENSORFAB_TOKEN (the server prints its token when "
                                       "it starts)\n")
    # no token: the command line names its option, the Python API token= (above)
    assert main(["sim", str(prog), "--target", server.address]) == 2
    assert capsys.readouterr().err == (f"error: {server.address}: no token: pass --token or "
                                       "set TENSORFAB_TOKEN (the server prints its token "
                                       "when it starts)\n")
    assert main(["sim", str(prog), "--token", "x"]) == 2
    assert "--token applies to tcp://, tracker://, socket:// targets, not 'fsim'" in (
        capsys.readouterr().err)
    assert main(["sim", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder; give a program file" in capsys.readouterr().err
