// Bad option values fail before any IR is read, with one line naming the option.

// RUN: not ipu-opt %s -p 'nn-quantize-activations{format=e4m3}' 2>&1 | filecheck %s --check-prefix=FORMAT
// RUN: not ipu-opt %s -p 'nn-quantize-activations{scale=32}' 2>&1 | filecheck %s --check-prefix=SCALE
// RUN: not ipu-opt %s -p 'nn-quantize-activations{scale=big}' 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: not ipu-opt %s -p 'nn-quantize-activations{scales="fc1"}' 2>&1 | filecheck %s --check-prefix=ENTRY
// RUN: not ipu-opt %s -p 'nn-quantize-activations{scales="fc1=40"}' 2>&1 | filecheck %s --check-prefix=RANGE

// FORMAT: ipu-opt: error: bad pass pipeline: nn-quantize-activations: option 'format' must be one of f143, f152, got 'e4m3'
// FORMAT-NOT: Traceback
// SCALE: ipu-opt: error: bad pass pipeline: nn-quantize-activations: option 'scale' must be an integer in [-32, 31] (the FP8 metadata range), got 32
// TYPE: ipu-opt: error: bad pass pipeline:
// TYPE-NOT: Traceback
// ENTRY: ipu-opt: error: bad pass pipeline: nn-quantize-activations: option 'scales': entries are "NAME=S" (a parameter-name substring, an integer scale in [-32, 31]), got 'fc1'
// RANGE: ipu-opt: error: bad pass pipeline: nn-quantize-activations: option 'scales': {{.*}} got 'fc1=40'

// A substring of `only` that is part of no linear's weight name (a typo) is named, not ignored:
// RUN: not ipu-opt %s -p 'nn-quantize-activations{only=fc9}' 2>&1 | filecheck %s --check-prefix=ONLY
// ONLY: ipu-opt: error: nn-quantize-activations: option 'only': 'fc9' is part of no linear's weight parameter name

func.func @linear() {
  %x = nn.input "x" : tensor<64x256xf16>
  nn.output "x" %x : tensor<64x256xf16>
  func.return
}
