// nn-fuse-sum-activation takes no options; a sum's activation other than gelu_tanh fails verification with the
// op's message, before the pass runs.

// RUN: not ipu-opt %s -p 'nn-fuse-sum-activation{relu=true}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not ipu-opt %s -p nn-fuse-sum-activation 2>&1 | filecheck %s --check-prefix=VERIFY

// OPTION: ipu-opt: error: bad pass pipeline: Provided arguments ["relu"] not found
// OPTION-NOT: Traceback
// VERIFY: error: nn.reduce_sum: activation must be one of gelu_tanh, got "relu"
// VERIFY-NOT: Traceback

func.func @f(%p: tensor<2x8x16xf16>) -> tensor<8x16xf16> {
  %s = nn.reduce_sum %p {activation = "relu"} : tensor<2x8x16xf16> -> tensor<8x16xf16>
  func.return %s : tensor<8x16xf16>
}
