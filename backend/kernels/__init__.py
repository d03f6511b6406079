"""The kernel library: each kernel is an asm generator, its numpy semantics and its cycle estimate, side by side.

Modules:
- `gemm`: F16 and FP8 matrix products on the AMP (shared supervisor per precision and coefficient-load mode,
  shared worker bodies, a small entry frame giving the six workers their row split).
- `elementwise`: bias/residual add, scale, casts f32/f16/FP8.
- `rowwise`: GELU, layer norm, softmax, row sum/max, FlashAttention online-softmax steps (f32 state).
- `pack`: row-major <-> AMP panels, AMP weight panels from B^T (F16/FP8) and from B (F16 transpose).
- `copy`: on-tile copies of (source, destination, bytes) pieces by the six workers (`copy_sup`).
- `harness`: helpers that load a kernel library into the simulator and run one call (tests, benchmarks).

See docs/kernels.md for the calling convention shared by all kernels.
"""
