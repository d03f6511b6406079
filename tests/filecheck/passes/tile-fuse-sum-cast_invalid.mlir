// tile-fuse-sum-cast's option is checked by name; an FP8 sum that is not the f16 partials' cast fails
// verification with the op's message, before the pass runs.

// RUN: not ipu-opt %s -p 'tile-fuse-sum-cast{enable=maybe}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not ipu-opt %s -p tile-fuse-sum-cast 2>&1 | filecheck %s --check-prefix=VERIFY

// OPTION: ipu-opt: error: bad pass pipeline:
// OPTION-NOT: Traceback
// VERIFY: nn.reduce_sum: an FP8 result needs f16 partials and no addends
// VERIFY-NOT: Traceback

func.func @f(%p: tensor<2x8x16xf32>) -> tensor<8x16xf8E4M3FNUZ> {
  %s = nn.reduce_sum %p {scale = 0 : i64} : tensor<2x8x16xf32> -> tensor<8x16xf8E4M3FNUZ>
  func.return %s : tensor<8x16xf8E4M3FNUZ>
}
