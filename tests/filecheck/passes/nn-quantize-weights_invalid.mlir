// Bad option values fail before any IR is read, with one line naming the option.

// RUN: not ipu-opt %s -p 'nn-quantize-weights{format=f999}' 2>&1 | filecheck %s --check-prefix=FORMAT
// RUN: not ipu-opt %s --pass-pipeline='builtin.module(nn-quantize-weights{scale=32})' 2>&1 | filecheck %s --check-prefix=SCALE
// RUN: not ipu-opt %s -p 'nn-quantize-weights{scale=-33}' 2>&1 | filecheck %s --check-prefix=SCALE-LOW
// RUN: not ipu-opt %s -p 'nn-quantize-weights{activations=bf16}' 2>&1 | filecheck %s --check-prefix=ACT
// RUN: not ipu-opt %s -p 'nn-quantize-weights{scale=big}' 2>&1 | filecheck %s --check-prefix=TYPE

// FORMAT: ipu-opt: error: bad pass pipeline: nn-quantize-weights: option 'format' must be one of f143, f152, got 'f999'
// FORMAT-NOT: Traceback
// SCALE: ipu-opt: error: bad pass pipeline: nn-quantize-weights: option 'scale' must be in [-32, 31] (the FP8 metadata range), got 32
// SCALE-LOW: ipu-opt: error: bad pass pipeline: nn-quantize-weights: option 'scale' must be in [-32, 31] (the FP8 metadata range), got -33
// ACT: ipu-opt: error: bad pass pipeline: nn-quantize-weights: option 'activations' must be one of f16, none, got 'bf16'
// TYPE: ipu-opt: error: bad pass pipeline:
// TYPE-NOT: Traceback

func.func @linear() {
  %x = nn.input "x" : tensor<4x8xf32>
  %w = nn.param "w" : tensor<8x8xf32>
  %y = nn.linear %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}
