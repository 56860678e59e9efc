"""PyTorch checkpoints (``.pth``) read into numpy arrays without torch.

A checkpoint is a pickle of a state dict whose tensors point at storages stored beside
it. :func:`load_state_dict` reads both file formats torch writes: the zip archive of
torch ≥ 1.6 (``archive/data.pkl`` and ``archive/data/<key>``) and the legacy stream
(magic number, protocol, system info, the state dict, the storage keys, then each
storage as an 8-byte element count and its bytes). The unpickler is restricted: it
resolves only ``collections.OrderedDict``, torch's ``_rebuild_tensor_v2`` and the typed
storage classes, each to a function that builds a numpy array; any other global (code a
hostile file would run) is refused with :class:`CheckpointError` naming it. A bfloat16
tensor, which numpy has no type for, is read as the float32 values it stands for.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tensorfab.isa import TensorfabError

__all__ = ["CheckpointError", "load_state_dict"]

#: torch's typed storages → numpy dtypes.
STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
    "BFloat16Storage": np.uint16,  # read as its 16 bits, widened to float32 (_widened)
}
#: Storages of bfloat16: the top 16 bits of a float32, which numpy has no type for.
BFLOAT16_STORAGES = frozenset({"BFloat16Storage"})
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class CheckpointError(TensorfabError, ValueError):
    """A checkpoint that is not a plain state dict of tensors (names what and where)."""


class _StorageRef:
    """A storage the pickle points at: its key, dtype (as stored: ``uint16`` for
    bfloat16) and element count, and whether it holds bfloat16."""

    def __init__(self, key: str, dtype: type, count: int, bfloat16: bool = False) -> None:
        self.key, self.dtype, self.count, self.bfloat16 = key, dtype, count, bfloat16

    @property
    def dtype_name(self) -> str:
        return "bfloat16" if self.bfloat16 else np.dtype(self.dtype).name


def _widened(ref: _StorageRef, flat: np.ndarray) -> np.ndarray:
    """A storage's elements as read: bfloat16's 16 bits shifted into the top of a
    ``uint32`` and viewed as ``float32`` (exact: bfloat16 is a float32 with its low 16
    mantissa bits cut); other dtypes unchanged."""
    if not ref.bfloat16:
        return flat
    return (flat.astype(np.uint32) << 16).view(np.float32)


class _TensorRef:
    def __init__(self, storage: _StorageRef, offset: int, shape: tuple[int, ...],
                 stride: tuple[int, ...]) -> None:
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride


def _rebuild_tensor(storage: _StorageRef, offset: int, shape: tuple[int, ...],
                    stride: tuple[int, ...], *_: Any) -> _TensorRef:
    return _TensorRef(storage, offset, tuple(shape), tuple(stride))


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return name
        raise CheckpointError(f"{self.where}: refuses the pickled global {module}.{name} "
                              "(only a state dict of tensors is read)")

    def persistent_load(self, pid: Any) -> _StorageRef:
        # ('storage', storage type, key, location, element count[, view metadata])
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"
                and pid[1] in STORAGE_DTYPES):
            raise CheckpointError(f"{self.where}: unexpected persistent id {pid!r}")
        if not _is_count(pid[4]):
            raise CheckpointError(f"{self.where}: storage {pid[2]!r} has {pid[4]!r} "
                                  "elements, not a non-negative integer")
        return _StorageRef(str(pid[2]), STORAGE_DTYPES[pid[1]], int(pid[4]),
                           pid[1] in BFLOAT16_STORAGES)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_geometry(ref: _TensorRef, what: str) -> None:
    """Refuse an offset, shape or stride that would view memory outside the storage:
    each must be a non-negative integer (torch writes no negative strides), one stride
    a dimension."""
    if not isinstance(ref.storage, _StorageRef):
        raise CheckpointError(f"{what}: built on a {type(ref.storage).__name__}, not on a "
                              "storage of the file")
    if not _is_count(ref.offset):
        raise CheckpointError(f"{what}: storage offset {ref.offset!r} is not a "
                              "non-negative integer")
    if len(ref.shape) != len(ref.stride):
        raise CheckpointError(f"{what}: shape {ref.shape} and stride {ref.stride} differ "
                              "in length")
    for label, values in (("shape", ref.shape), ("stride", ref.stride)):
        if not all(_is_count(v) for v in values):
            raise CheckpointError(f"{what}: {label} {values} is not non-negative integers")


def _tensors(state: Any, read: Callable[[_StorageRef], np.ndarray],
             where: str) -> dict[str, np.ndarray]:
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: the pickle holds a {type(state).__name__}, not a "
                              "state dict")
    out: dict[str, np.ndarray] = {}
    for name, ref in state.items():
        if not isinstance(ref, _TensorRef):
            raise CheckpointError(f"{where}: entry {name!r} is a {type(ref).__name__}, "
                                  "not a tensor")
        _check_geometry(ref, f"{where}: tensor {name!r}")
        flat = _widened(ref.storage, read(ref.storage))
        item = flat.itemsize
        need = ref.offset + sum((d - 1) * s for d, s in zip(ref.shape, ref.stride,
                                                            strict=True)) + 1
        if min(ref.shape, default=1) > 0 and need > flat.size:
            raise CheckpointError(f"{where}: tensor {name!r} {ref.shape} reaches element "
                                  f"{need} of a storage of {flat.size}")
        view = np.lib.stride_tricks.as_strided(
            flat[ref.offset:], ref.shape, tuple(s * item for s in ref.stride))
        out[str(name)] = np.ascontiguousarray(view)
    return out


#: What a damaged pickle makes the unpickler raise (a wrong opcode argument, a missing
#: memo entry, bytes that are not UTF-8, a huge length, a call on the wrong object).
_DAMAGED = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            KeyError, IndexError, OverflowError, MemoryError, struct.error)


def _unpickle(file: BinaryIO, where: str, what: str) -> Any:
    """One pickle of the checkpoint read by the restricted unpickler; a damaged or
    truncated one is a :class:`CheckpointError` naming ``what`` it was."""
    try:
        return _RestrictedUnpickler(file, where).load()
    except CheckpointError:
        raise
    except _DAMAGED as e:
        raise CheckpointError(f"{where}: {what} is damaged or truncated "
                              f"({type(e).__name__}: {e})") from None


def _storage_array(raw: bytes, ref: _StorageRef, where: str,
                   byteorder: str = "little") -> np.ndarray:
    """A storage's bytes as its dtype (stored in ``byteorder``, returned in the
    machine's), refused when shorter than the pickle says."""
    dtype = np.dtype(ref.dtype)
    need = ref.count * dtype.itemsize
    if len(raw) < need:
        raise CheckpointError(f"{where}: storage {ref.key} holds {len(raw)} bytes, the "
                              f"pickle says {ref.count} × {ref.dtype_name} "
                              f"({need} bytes): truncated")
    stored = dtype.newbyteorder("<" if byteorder == "little" else ">")
    return np.frombuffer(raw, stored, count=ref.count).astype(dtype, copy=False)


def _load_zip(path: Path) -> dict[str, np.ndarray]:
    where = str(path)

    def member(z: zipfile.ZipFile, name: str) -> bytes:
        try:
            return z.read(name)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError,
                OSError) as e:
            raise CheckpointError(f"{where}: zip member {name} is damaged "
                                  f"({type(e).__name__}: {e})") from None

    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{where}: not a readable zip archive ({e})") from None
    with z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if not pkl:
            raise CheckpointError(f"{path}: a zip without data.pkl is not a torch checkpoint")
        root = pkl[0][: -len("data.pkl")]
        byteorder = "little"  # (torch writes archive/byteorder since 1.10; before: little)
        if f"{root}byteorder" in names:
            byteorder = member(z, f"{root}byteorder").decode("ascii", "replace").strip()
            if byteorder not in ("little", "big"):
                raise CheckpointError(f"{where}: {root}byteorder is {byteorder!r}, not "
                                      "'little' or 'big'")
        state = _unpickle(io.BytesIO(member(z, pkl[0])), where, pkl[0])

        def read(ref: _StorageRef) -> np.ndarray:
            name = f"{root}data/{ref.key}"
            if name not in names:
                raise CheckpointError(f"{path}: storage {ref.key} missing ({name})")
            return _storage_array(member(z, name), ref, where, byteorder)

        return _tensors(state, read, where)


def _load_legacy(path: Path) -> dict[str, np.ndarray]:
    with path.open("rb") as f:
        zip_head = f.read(4) == b"PK\x03\x04"
    if zip_head:
        raise CheckpointError(f"{path}: a zip archive without its central directory "
                              "(truncated or damaged) is not a readable torch checkpoint")
    with path.open("rb") as f:
        where = str(path)
        try:
            magic = _RestrictedUnpickler(f, where).load()
        except CheckpointError:
            raise
        except _DAMAGED as e:
            raise CheckpointError(f"{where}: not a torch checkpoint (neither a zip archive "
                                  f"nor a legacy stream: {e})") from None
        if magic != _LEGACY_MAGIC:
            raise CheckpointError(f"{where}: not a torch checkpoint (magic {magic!r})")
        _unpickle(f, where, "the protocol version")
        info = _unpickle(f, where, "the system info")
        state = _unpickle(f, where, "the state dict")
        keys = _unpickle(f, where, "the list of storage keys")
        if not isinstance(info, dict) or not info.get("little_endian", True):
            raise CheckpointError(f"{where}: only little-endian checkpoints are read")
        if not isinstance(keys, list):
            raise CheckpointError(f"{where}: the list of storage keys is a "
                                  f"{type(keys).__name__}")
        refs: dict[str, _StorageRef] = {}
        for ref in state.values() if isinstance(state, dict) else ():
            if isinstance(ref, _TensorRef) and isinstance(ref.storage, _StorageRef):
                refs[ref.storage.key] = ref.storage
        size = path.stat().st_size
        data: dict[str, np.ndarray] = {}
        for key in keys:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{where}: storage {key} truncated (no element count)")
            (count,) = struct.unpack("<q", head)
            ref = refs.get(str(key))
            dtype = ref.dtype if ref is not None else np.uint8
            if not 0 <= count * np.dtype(dtype).itemsize <= size - f.tell():
                raise CheckpointError(f"{where}: storage {key} of {count} elements does not "
                                      f"fit the {size - f.tell()} bytes left: truncated")
            raw = f.read(count * np.dtype(dtype).itemsize)
            data[str(key)] = np.frombuffer(raw, dtype)

        def read(ref: _StorageRef) -> np.ndarray:
            if ref.key not in data:
                raise CheckpointError(f"{where}: storage {ref.key} missing")
            return data[ref.key]

        return _tensors(state, read, where)


def load_state_dict(path: str | Path) -> dict[str, np.ndarray]:
    """A ``.pth`` state dict as numpy arrays by name (see the module docstring).

    Raises
    ------
    CheckpointError
        The file is missing, not a torch checkpoint, truncated or damaged (naming the
        pickle, zip member or storage), holds anything but a state dict of tensors, has a
        tensor reaching outside its storage, or pickles a global other than the few
        tensor-building ones.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if zipfile.is_zipfile(path):
        return _load_zip(path)
    return _load_legacy(path)
