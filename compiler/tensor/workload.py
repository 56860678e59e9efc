"""Operator shapes: one description covers conv2d, dense and batched matmul.

A :class:`Workload` is a (grouped) 2-D convolution ``out[g, n, o, y, x] = Σ_{c, i, j}
inp[g, n, c, y·sh + i - pt, x·sw + j - pl] · wgt[g, o, c, i, j]`` with zero padding.
Dense is the case ``H = W = KH = KW = 1`` with the matrix rows as the batch; a batched
matmul adds ``groups`` independent dense problems, each with its own weights.

Blocked extents (``*_blocks``) count buffer entries along an axis: batch rows in
``cfg.batch``, input channels in ``cfg.block_in``, output channels in ``cfg.block_out``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorfab.isa import HwConfig
from tensorfab.isa.layout import blocks

from .errors import CompileError


@dataclass(frozen=True)
class Workload:
    """Shape of one operator.

    Attributes
    ----------
    batch, in_channels, height, width : int
        Input ``(N, C, H, W)``.
    out_channels : int
        ``O``.
    kernel : tuple[int, int]
        ``(KH, KW)``.
    stride : tuple[int, int]
        ``(SH, SW)``.
    padding : tuple[int, int, int, int]
        ``(top, bottom, left, right)`` zero padding.
    groups : int
        Independent problems with their own inputs, weights and outputs (batched matmul).
    name : str
        Label used in reports.
    """

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    name: str = ""

    def __post_init__(self) -> None:
        for f in ("batch", "in_channels", "height", "width", "out_channels", "groups"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise CompileError(f"Workload.{f} = {v!r} must be a positive integer")
        object.__setattr__(self, "kernel", tuple(int(k) for k in self.kernel))
        object.__setattr__(self, "stride", tuple(int(s) for s in self.stride))
        object.__setattr__(self, "padding", tuple(int(p) for p in self.padding))
        if len(self.kernel) != 2 or min(self.kernel) < 1:
            raise CompileError(f"Workload.kernel = {self.kernel} must be two positive sizes")
        if len(self.stride) != 2 or min(self.stride) < 1:
            raise CompileError(f"Workload.stride = {self.stride} must be two positive steps")
        if len(self.padding) != 4 or min(self.padding) < 0:
            raise CompileError(f"Workload.padding = {self.padding} must be four non-negative "
                             "sizes (top, bottom, left, right)")
        if self.out_height < 1 or self.out_width < 1:
            raise CompileError(f"{self}: the kernel does not fit the padded input")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def conv2d(cls, batch: int, in_channels: int, height: int, width: int,
               out_channels: int, kernel: int | tuple[int, int],
               stride: int | tuple[int, int] = 1,
               padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
               name: str = "") -> Workload:
        """A convolution; ``padding`` is one size, ``(vertical, horizontal)`` or
        ``(top, bottom, left, right)``."""
        k = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
        s = (stride, stride) if isinstance(stride, int) else tuple(stride)
        if isinstance(padding, int):
            p = (padding,) * 4
        elif len(padding) == 2:
            p = (padding[0], padding[0], padding[1], padding[1])
        else:
            p = tuple(padding)
        return cls(batch, in_channels, height, width, out_channels, k, s, p,  # type: ignore[arg-type]
                   name=name)

    @classmethod
    def dense(cls, m: int, k: int, n: int, groups: int = 1, name: str = "") -> Workload:
        """``(m, k) @ (k, n)``, or ``groups`` of them (batched matmul)."""
        return cls(m, k, 1, 1, n, groups=groups, name=name)

    # ------------------------------------------------------------------ derived sizes
    @property
    def out_height(self) -> int:
        """Output rows."""
        pt, pb = self.padding[0], self.padding[1]
        return (self.height + pt + pb - self.kernel[0]) // self.stride[0] + 1

    @property
    def out_width(self) -> int:
        """Output columns."""
        pl, pr = self.padding[2], self.padding[3]
        return (self.width + pl + pr - self.kernel[1]) // self.stride[1] + 1

    @property
    def is_dense(self) -> bool:
        """True for a (batched) matmul: 1×1 image and kernel."""
        return self.height == self.width == 1 and self.kernel == (1, 1)

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates (unpadded channels)."""
        return (self.groups * self.batch * self.out_channels * self.out_height
                * self.out_width * self.in_channels * self.kernel[0] * self.kernel[1])

    def batch_blocks(self, cfg: HwConfig) -> int:
        """Input entries along the batch: ``ceil(N / batch)``."""
        return blocks(self.batch, cfg.batch)

    def in_blocks(self, cfg: HwConfig) -> int:
        """Input entries along the channels: ``ceil(C / block_in)``."""
        return blocks(self.in_channels, cfg.block_in)

    def out_blocks(self, cfg: HwConfig) -> int:
        """Output entries along the channels: ``ceil(O / block_out)``."""
        return blocks(self.out_channels, cfg.block_out)

    def extents(self, cfg: HwConfig) -> dict[str, int]:
        """Extent of every schedulable axis: ``b`` (batch blocks), ``oc`` (output-channel
        blocks), ``oh``, ``ow`` (output pixels) and ``ic`` (input-channel blocks)."""
        return {"b": self.batch_blocks(cfg), "oc": self.out_blocks(cfg),
                "oh": self.out_height, "ow": self.out_width, "ic": self.in_blocks(cfg)}

    def describe(self) -> str:
        """One-line summary."""
        if self.is_dense:
            g = f"{self.groups}×" if self.groups > 1 else ""
            return f"dense {g}{self.batch}×{self.in_channels}→{self.out_channels}"
        kh, kw = self.kernel
        return (f"conv2d N{self.batch} {self.in_channels}×{self.height}×{self.width} → "
                f"{self.out_channels}×{self.out_height}×{self.out_width} k{kh}×{kw} "
                f"s{self.stride} p{self.padding}")


#: VTA's ResNet-18 convolution workloads C2–C11 (batch 1), as in TVM's VTA tutorials.
RESNET18_CONV: dict[str, Workload] = {
    "C2": Workload.conv2d(1, 64, 56, 56, 64, 3, 1, 1, name="C2"),
    "C3": Workload.conv2d(1, 64, 56, 56, 128, 3, 2, 1, name="C3"),
    "C4": Workload.conv2d(1, 64, 56, 56, 128, 1, 2, 0, name="C4"),
    "C5": Workload.conv2d(1, 128, 28, 28, 128, 3, 1, 1, name="C5"),
    "C6": Workload.conv2d(1, 128, 28, 28, 256, 3, 2, 1, name="C6"),
    "C7": Workload.conv2d(1, 128, 28, 28, 256, 1, 2, 0, name="C7"),
    "C8": Workload.conv2d(1, 256, 14, 14, 256, 3, 1, 1, name="C8"),
    "C9": Workload.conv2d(1, 256, 14, 14, 512, 3, 2, 1, name="C9"),
    "C10": Workload.conv2d(1, 256, 14, 14, 512, 1, 2, 0, name="C10"),
    "C11": Workload.conv2d(1, 512, 7, 7, 512, 3, 1, 1, name="C11"),
}

#: Dense layers of the issue: ResNet-18's classifier and a transformer-sized projection.
DENSE_LAYERS: dict[str, Workload] = {
    "fc1000": Workload.dense(1, 512, 1000, name="fc1000"),
    "proj": Workload.dense(128, 384, 1536, name="proj"),
}

__all__ = ["DENSE_LAYERS", "RESNET18_CONV", "Workload"]
