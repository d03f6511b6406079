"""panels_f16's pace check (`RowsKernel.pf_pace`): the vectorized, memoized bank-clash test agrees with the
direct walk (worker by worker, panel by panel, bundle t loading atom t + 1 and storing atom t) on random
layouts across both memory regions."""

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as rw
from ipu.backend.kernels.elementwise import split
from ipu.backend.target import Target


def _walk_clashes(in0, out, pstep, istride, ostride, rows, panels, width) -> bool:
    cols = 8 * np.arange(width // 4, dtype=np.int64)
    for first, cnt in split(rows):
        r = (first + np.arange(cnt, dtype=np.int64))[:, None]
        for j in range(panels):
            src = (in0 + j * pstep + r * istride + cols).reshape(-1)
            dst = (out + r * ostride + 2 * j * width + cols).reshape(-1)
            for t in range(len(src) - 1):
                x, d = int(src[t + 1]), int(src[t + 1]) ^ int(dst[t])
                if x >= Target.region1_base:
                    if d < Target.region1_element_bytes and not d & 8:
                        return True
                elif d < Target.region0_element_bytes:
                    return True
    return False


@pytest.mark.parametrize("seed", range(4))
def test_vectorized_clash_check_matches_the_walk(seed):
    rng = np.random.default_rng(seed)
    clashes = 0
    for _ in range(150):
        width = int(rng.choice([4, 8, 16, 24, 32]))
        rows, panels = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        istride = 2 * width * int(rng.integers(1, 4))
        ostride = 2 * width * panels + 8 * int(rng.integers(0, 3))
        base = int(rng.choice([0x4C000, 0x70000, 0x80000, 0x90000, 0xC0000]))
        in0, out = base + 8 * int(rng.integers(0, 4096)), base + 8 * int(rng.integers(0, 8192))
        args = (in0, out, rows * istride, istride, ostride, rows, panels, width)
        want = _walk_clashes(*args)
        assert rw._pf_bank_clash(*args) == want, args
        clashes += want
    assert 0 < clashes < 150  # both outcomes exercised
