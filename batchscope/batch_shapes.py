"""How an op's tensor shapes grow with the batch size: each dimension either fixed or in
proportion to it. Used where a shape at an unmeasured batch size is needed: the kernel
probes (probe_plan.py) and the counts carried to a larger batch
(profiler/count_extrapolation.py)."""

from __future__ import annotations


def scaled_shapes(small: list[list[int]], b_small: int, large: list[list[int]], b_large: int,
                  b: int) -> list[list[int]] | None:
    """The shapes at batch ``b`` from the shapes at ``b_small`` and ``b_large``: each
    dimension the same at both (kept) or in proportion to the batch (scaled); None when one
    is neither or would not be whole.

    Example:
        >>> scaled_shapes([[2304], [4, 768]], 4, [[2304], [8, 768]], 8, 1024)
        [[2304], [1024, 768]]
    """
    if len(small) != len(large):
        return None
    out = []
    for s_shape, l_shape in zip(small, large, strict=True):
        if len(s_shape) != len(l_shape):
            return None
        dims = []
        for s_dim, l_dim in zip(s_shape, l_shape, strict=True):
            if s_dim == l_dim:
                dims.append(l_dim)
            elif s_dim * b_large == l_dim * b_small and (l_dim * b) % b_large == 0:
                dims.append(l_dim * b // b_large)
            else:
                return None
        out.append(dims)
    return out
