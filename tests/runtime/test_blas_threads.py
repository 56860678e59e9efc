"""The CPU kernels run BLAS on TENSORFAB_BLAS_THREADS threads (default 1), only while a
kernel runs; a bad value is named."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController

from tensorfab.runtime.blas_threads import BLAS_THREADS_ENV, kernel_blas_threads, limited_blas
from tensorfab.runtime.kernels import KERNELS


def _blas_threads() -> list[int]:
    """Threads of numpy's BLAS (another library loaded later, e.g. scipy's, is not what
    the kernels call)."""
    return [p["num_threads"] for p in ThreadpoolController().info()
            if p["user_api"] == "blas" and "numpy" in p["filepath"]]


def test_default_is_one_and_the_variable_sets_it(monkeypatch) -> None:
    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    assert kernel_blas_threads() == 1
    monkeypatch.setenv(BLAS_THREADS_ENV, "3")
    assert kernel_blas_threads() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(BLAS_THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"{BLAS_THREADS_ENV}='{bad}'"):
            kernel_blas_threads()


def test_limit_holds_inside_a_kernel_only(monkeypatch) -> None:
    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    with ThreadpoolController().limit(limits=2, user_api="blas"):
        before = _blas_threads()
        seen: list[list[int]] = []
        with limited_blas():
            seen.append(_blas_threads())
        assert seen == [[1] * len(before)] and _blas_threads() == before
        a, b = np.ones((1, 4, 8), np.float32), np.ones((8, 3), np.float32)
        np.testing.assert_array_equal(KERNELS["matmul"]([a, b], {}), np.full((1, 4, 3), 8.0))
        assert _blas_threads() == before
