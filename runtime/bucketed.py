"""A model whose one symbolic dim (a sequence length) is served by buckets: one VM
executable over a length that changes per call, each bucket a kernel compiled (or
loaded) on first use.

The executable (:func:`bucketed_executable`) pads each input along the symbolic axis
up to its bucket (``bucket.pad``: the length rounded up to a multiple of the block; its
shape function is what selects the bucket, and a length past the largest bucket is an
error naming the limit) and calls ``bucket.run`` on the padded inputs, which runs the
bucket's own loaded model (:class:`~.loaded_model.LoadedModel`, made by the caller's
``load`` the first time the bucket is needed: a new length costs at most one new
bucket). :class:`Buckets` holds the two kernels and the buckets loaded; the VM takes
them as extra kernels (:class:`~.vm.VirtualMachine` ``kernels``, ``shape_functions``),
so the runtime's own kernel table is unchanged and the runtime still never compiles:
``load`` is the caller's (a model that compiles buckets passes the compiler in it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorfab.isa import TensorfabError

from .graph_program import GraphProgram, InputSpec
from .loaded_model import LoadedModel
from .vm import VirtualMachine
from .vm_executable import Executable, Op, VMFunction

__all__ = ["BucketLimitError", "Buckets", "bucketed_executable", "bucketed_vm"]


class BucketLimitError(TensorfabError):
    """A length past the largest bucket, or an empty one (names the length and the
    limit)."""


@dataclass
class Buckets:
    """The kernels of a bucketed executable and the buckets loaded so far.

    Parameters
    ----------
    load : callable
        ``load(length)``: the loaded model of the bucket of that length (compiled or
        read from a cache by the caller), called once per bucket.
    block : int
        Bucket lengths are multiples of it.
    limit : int
        The largest bucket.
    axis : int
        The symbolic axis of every input.

    Attributes
    ----------
    loaded : dict[int, LoadedModel]
        The buckets loaded, by length, in the order they were first needed.
    """

    load: Callable[[int], LoadedModel]
    block: int
    limit: int
    axis: int = 1
    loaded: dict[int, LoadedModel] = field(default_factory=dict)

    def length(self, n: int) -> int:
        """The bucket of a length ``n``.

        Raises
        ------
        BucketLimitError
            ``n`` past :attr:`limit`, or 0 (padded, an empty sequence would run as
            padding alone: a model that averages over its real tokens gives NaN).
        """
        if n < 1:
            raise BucketLimitError(f"a length of {n}: the buckets take lengths 1 to "
                                   f"{self.limit} (an empty sequence has nothing to run)")
        if n > self.limit:
            raise BucketLimitError(f"a length of {n} is past the largest bucket, "
                                   f"{self.limit}")
        return max(self.block, -(-n // self.block) * self.block)

    def pad_shape(self, shapes: Sequence[tuple[int, ...]],
                  attrs: Mapping[str, Any]) -> tuple[int, ...]:
        """``bucket.pad``'s shape function: the input's shape with the symbolic axis
        at its bucket."""
        shape = list(shapes[0])
        shape[self.axis] = self.length(shape[self.axis])
        return tuple(shape)

    def pad(self, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
        """``bucket.pad``: the input padded with ``attrs["value"]`` up to its bucket."""
        x = inputs[0]
        widths = [(0, 0)] * x.ndim
        widths[self.axis] = (0, self.pad_shape([x.shape], attrs)[self.axis] - x.shape[self.axis])
        return np.pad(x, widths, constant_values=np.asarray(attrs["value"], x.dtype))

    def run(self, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> Any:
        """``bucket.run``: the bucket of the padded inputs' length (loaded on first
        use) run on them, by the names ``attrs["inputs"]``."""
        n = int(inputs[0].shape[self.axis])
        if n not in self.loaded:
            self.loaded[n] = self.load(n)
        return self.loaded[n].run(dict(zip(attrs["inputs"], inputs, strict=True)))

    @property
    def kernels(self) -> dict[str, Callable[..., Any]]:
        """The executable's kernels, for the VM."""
        return {"bucket.pad": self.pad, "bucket.run": self.run}

    @property
    def shape_functions(self) -> dict[str, Callable[..., Any]]:
        """Their shape functions, for the VM's ``SHAPE_FUNC``."""
        return {"bucket.pad": self.pad_shape}


def bucketed_executable(inputs: Sequence[tuple[str, Any]]) -> Executable:
    """``main(inputs...)``: each input (name, padding value) padded to its bucket
    (``bucket.pad``), then ``bucket.run`` on them all."""
    n = len(inputs)
    code: list[tuple[Any, ...]] = []
    attrs: list[Mapping[str, Any]] = []
    for k, (_, value) in enumerate(inputs):
        attrs.append({"value": value})
        code.append((Op.INVOKE, n + k, "bucket.pad", k, k))
        code.append((Op.KILL, k))
    attrs.append({"inputs": tuple(name for name, _ in inputs)})
    code.append((Op.INVOKE, 2 * n, "bucket.run", n, *range(n, 2 * n)))
    code.append((Op.RET, 2 * n))
    return Executable([VMFunction("main", n, 2 * n + 1, code)], attrs)


def bucketed_vm(inputs: Sequence[InputSpec], pad_values: Sequence[Any],
                buckets: Buckets) -> VirtualMachine:
    """The VM running :func:`bucketed_executable` of ``inputs`` (their symbolic dims
    checked as any model's) over ``buckets``."""
    executable = bucketed_executable([(i.name, v)
                                      for i, v in zip(inputs, pad_values, strict=True)])
    host = LoadedModel(GraphProgram(list(inputs), {}, [], -1), executable=executable)
    return VirtualMachine(host, executable, futures=False, kernels=buckets.kernels,
                          shape_functions=buckets.shape_functions)
