// nn-fuse-sum-add's options are checked by name; a sum's addend of the wrong type fails verification with the
// op's message, before the pass runs.

// RUN: not ipu-opt %s -p 'nn-fuse-sum-add{addends=some}' 2>&1 | filecheck %s --check-prefix=POLICY
// RUN: not ipu-opt %s -p 'nn-fuse-sum-add{max_addends=0}' 2>&1 | filecheck %s --check-prefix=COUNT
// RUN: not ipu-opt %s -p nn-fuse-sum-add 2>&1 | filecheck %s --check-prefix=VERIFY

// POLICY: nn-fuse-sum-add: option 'addends' must be one of loops, sums, any, none, got 'some'
// POLICY-NOT: Traceback
// COUNT: nn-fuse-sum-add: option 'max_addends' must be >= 1, got 0
// COUNT-NOT: Traceback
// VERIFY: nn.reduce_sum: addend #0 has type tensor<8x16xf16>, expected the result's tensor<8x16xf32>
// VERIFY-NOT: Traceback

func.func @f(%p: tensor<2x8x16xf16>, %a: tensor<8x16xf16>) -> tensor<8x16xf32> {
  %s = nn.reduce_sum %p addends(%a : tensor<8x16xf16>) : tensor<2x8x16xf16> -> tensor<8x16xf32>
  func.return %s : tensor<8x16xf32>
}
