// nn-split-mlp: fc1 -> gelu -> fc2 split along the hidden dimension into parts of at most max_k (multiples of 16
// but the last), the partial fc2 results added; the bias of fc2 goes to part 0. A hidden size <= max_k is kept,
// and so is an MLP over fewer than min_rows rows (here 4 < 16 by default). The default order is stage by stage (every
// fc1, every gelu, every fc2: the fc1s' shared input dies before the fc2 operands arrive); order=parts goes part by part.

// RUN: ipu-opt %s -p 'nn-split-mlp{max_k=32 min_rows=1}' | filecheck %s
// RUN: ipu-opt %s -p 'nn-split-mlp{max_k=32 min_rows=1 order=parts}' | filecheck %s --check-prefix=PARTS
// RUN: ipu-opt %s -p 'nn-split-mlp{max_k=32}' | filecheck %s --check-prefix=KEEP
// RUN: ipu-opt %s -p 'nn-split-mlp' | filecheck %s --check-prefix=KEEP
// RUN: ipu-opt %s -p 'nn-split-mlp{max_k=32 min_rows=1}' | ipu-opt | filecheck %s

func.func @mlp() {
  %x = nn.input "x" : tensor<4x8xf32>
  %w1 = nn.param "fc1.weight" : tensor<40x8xf32>
  %b1 = nn.param "fc1.bias" : tensor<40xf32>
  %h = nn.linear %x, %w1, %b1 : tensor<4x8xf32>, tensor<40x8xf32>, tensor<40xf32> -> tensor<4x40xf32>
  %g = nn.gelu %h "tanh" : tensor<4x40xf32> -> tensor<4x40xf32>
  %w2 = nn.param "fc2.weight" : tensor<8x40xf32>
  %b2 = nn.param "fc2.bias" : tensor<8xf32>
  %y = nn.linear %g, %w2, %b2 : tensor<4x40xf32>, tensor<8x40xf32>, tensor<8xf32> -> tensor<4x8xf32>
  nn.output "y" %y : tensor<4x8xf32>
  func.return
}

// CHECK-LABEL: func.func @mlp
// CHECK:         %[[W1A:[^ ]+]] = nn.slice %w1 offsets=[0, 0] : tensor<40x8xf32> -> tensor<32x8xf32>
// CHECK-NEXT:    %[[B1A:[^ ]+]] = nn.slice %b1 offsets=[0] : tensor<40xf32> -> tensor<32xf32>
// CHECK-NEXT:    %[[HA:[^ ]+]] = nn.linear %x, %[[W1A]], %[[B1A]] : tensor<4x8xf32>, tensor<32x8xf32>, tensor<32xf32> -> tensor<4x32xf32>
// CHECK-NEXT:    %[[W1B:[^ ]+]] = nn.slice %w1 offsets=[32, 0] : tensor<40x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT:    %[[B1B:[^ ]+]] = nn.slice %b1 offsets=[32] : tensor<40xf32> -> tensor<8xf32>
// CHECK-NEXT:    %[[HB:[^ ]+]] = nn.linear %x, %[[W1B]], %[[B1B]] : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[GA:[^ ]+]] = nn.gelu %[[HA]] "tanh" : tensor<4x32xf32> -> tensor<4x32xf32>
// CHECK-NEXT:    %[[GB:[^ ]+]] = nn.gelu %[[HB]] "tanh" : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[W2A:[^ ]+]] = nn.slice %w2 offsets=[0, 0] : tensor<8x40xf32> -> tensor<8x32xf32>
// CHECK-NEXT:    %[[YA:[^ ]+]] = nn.linear %[[GA]], %[[W2A]], %b2 : tensor<4x32xf32>, tensor<8x32xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[W2B:[^ ]+]] = nn.slice %w2 offsets=[0, 32] : tensor<8x40xf32> -> tensor<8x8xf32>
// CHECK-NEXT:    %[[YB:[^ ]+]] = nn.linear %[[GB]], %[[W2B]] : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %y = nn.add %[[YA]], %[[YB]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    nn.output "y" %y : tensor<4x8xf32>

// PARTS-LABEL: func.func @mlp
// PARTS:         %[[W1A:[^ ]+]] = nn.slice %w1 offsets=[0, 0] : tensor<40x8xf32> -> tensor<32x8xf32>
// PARTS-NEXT:    %[[B1A:[^ ]+]] = nn.slice %b1 offsets=[0] : tensor<40xf32> -> tensor<32xf32>
// PARTS-NEXT:    %[[HA:[^ ]+]] = nn.linear %x, %[[W1A]], %[[B1A]] : tensor<4x8xf32>, tensor<32x8xf32>, tensor<32xf32> -> tensor<4x32xf32>
// PARTS-NEXT:    %[[GA:[^ ]+]] = nn.gelu %[[HA]] "tanh" : tensor<4x32xf32> -> tensor<4x32xf32>
// PARTS-NEXT:    %[[W2A:[^ ]+]] = nn.slice %w2 offsets=[0, 0] : tensor<8x40xf32> -> tensor<8x32xf32>
// PARTS-NEXT:    %[[YA:[^ ]+]] = nn.linear %[[GA]], %[[W2A]], %b2 : tensor<4x32xf32>, tensor<8x32xf32>, tensor<8xf32> -> tensor<4x8xf32>
// PARTS-NEXT:    %[[W1B:[^ ]+]] = nn.slice %w1 offsets=[32, 0] : tensor<40x8xf32> -> tensor<8x8xf32>
// PARTS-NEXT:    %[[B1B:[^ ]+]] = nn.slice %b1 offsets=[32] : tensor<40xf32> -> tensor<8xf32>
// PARTS-NEXT:    %[[HB:[^ ]+]] = nn.linear %x, %[[W1B]], %[[B1B]] : tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// PARTS-NEXT:    %[[GB:[^ ]+]] = nn.gelu %[[HB]] "tanh" : tensor<4x8xf32> -> tensor<4x8xf32>
// PARTS-NEXT:    %[[W2B:[^ ]+]] = nn.slice %w2 offsets=[0, 32] : tensor<8x40xf32> -> tensor<8x8xf32>
// PARTS-NEXT:    %[[YB:[^ ]+]] = nn.linear %[[GB]], %[[W2B]] : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
// PARTS-NEXT:    %y = nn.add %[[YA]], %[[YB]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// PARTS-NEXT:    nn.output "y" %y : tensor<4x8xf32>

// KEEP-LABEL: func.func @mlp
// KEEP-NOT:     nn.slice
// KEEP:         %y = nn.linear %g, %w2, %b2
