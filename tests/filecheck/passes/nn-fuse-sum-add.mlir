// nn-fuse-sum-add: an f32 nn.add whose operand is a K split's sum read only by it becomes that sum with the other
// operand as an addend (addends=sums, the default: when the addend is itself a sum, as the two MLP parts' sums;
// addends=loops: also a value a layer loop carries, as the residual stream in @loop, but not a residual add
// outside a loop, %r in @mlp_parts). A fused sum takes the next add's addend too, up to max_addends. Not fused: an
// f16 sum, a broadcast add, a sum with a second reader, a sum with an activation, an addend defined after the
// sum. With addends=any the residual stream's add folds everywhere; addends=none leaves everything. Prints and
// parses back.

// RUN: ipu-opt %s -p nn-fuse-sum-add | filecheck %s
// RUN: ipu-opt %s -p nn-fuse-sum-add | ipu-opt | filecheck %s
// RUN: ipu-opt %s -p 'nn-fuse-sum-add{addends=any}' | filecheck %s --check-prefix=ANY
// RUN: ipu-opt %s -p 'nn-fuse-sum-add{addends=any max_addends=1}' | filecheck %s --check-prefix=ONE
// RUN: ipu-opt %s -p 'nn-fuse-sum-add{addends=none}' | filecheck %s --check-prefix=NONE
// RUN: ipu-opt %s -p 'nn-fuse-sum-add{addends=loops}' | filecheck %s --check-prefix=LOOPS
// RUN: ipu-opt %s -p 'nn-fuse-sum-add{addends=loops}' | filecheck %s --check-prefix=LOOPSKEPT

func.func @mlp_parts(%pa: tensor<8x35x32xf16>, %pb: tensor<8x35x32xf16>, %b: tensor<32xf32>, %h: tensor<35x32xf32>) -> tensor<35x32xf32> {
  %ya = nn.reduce_sum %pa, %b : tensor<8x35x32xf16>, tensor<32xf32> -> tensor<35x32xf32>
  %yb = nn.reduce_sum %pb : tensor<8x35x32xf16> -> tensor<35x32xf32>
  %y = nn.add %ya, %yb : tensor<35x32xf32>, tensor<35x32xf32> -> tensor<35x32xf32>
  %r = nn.add %h, %y : tensor<35x32xf32>, tensor<35x32xf32> -> tensor<35x32xf32>
  func.return %r : tensor<35x32xf32>
}

// CHECK-LABEL: func.func @mlp_parts
// CHECK-NEXT:    %ya = nn.reduce_sum %pa, %b : tensor<8x35x32xf16>, tensor<32xf32> -> tensor<35x32xf32>
// CHECK-NEXT:    %y = nn.reduce_sum %pb addends(%ya : tensor<35x32xf32>) : tensor<8x35x32xf16> -> tensor<35x32xf32>
// CHECK-NEXT:    %r = nn.add %h, %y
// CHECK-NEXT:    func.return %r

// ANY-LABEL: func.func @mlp_parts
// ANY-NEXT:    %ya = nn.reduce_sum %pa, %b
// ANY-NEXT:    %r = nn.reduce_sum %pb addends(%ya, %h : tensor<35x32xf32>, tensor<35x32xf32>) : tensor<8x35x32xf16> -> tensor<35x32xf32>
// ANY-NEXT:    func.return %r

// ONE-LABEL: func.func @mlp_parts
// ONE-NEXT:    %ya = nn.reduce_sum %pa, %b
// ONE-NEXT:    %y = nn.reduce_sum %pb addends(%ya : tensor<35x32xf32>)
// ONE-NEXT:    %r = nn.add %h, %y

// NONE-LABEL: func.func @mlp_parts
// NONE-NEXT:    %ya = nn.reduce_sum %pa, %b
// NONE-NEXT:    %yb = nn.reduce_sum %pb :
// NONE-NEXT:    %y = nn.add %ya, %yb

func.func @kept(%p: tensor<2x8x16xf16>, %q: tensor<2x8x16xf16>, %c: tensor<16xf32>) -> (tensor<8x16xf16>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  %s16 = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf16>
  %a16 = nn.reduce_sum %q : tensor<2x8x16xf16> -> tensor<8x16xf16>
  %x16 = nn.add %s16, %a16 : tensor<8x16xf16>, tensor<8x16xf16> -> tensor<8x16xf16>
  %s = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf32>
  %bc = nn.add %s, %c : tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>
  %t = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf32>
  %u = nn.reduce_sum %q : tensor<2x8x16xf16> -> tensor<8x16xf32>
  %two = nn.add %t, %u : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  %again = nn.add %two, %t : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %x16, %bc, %again, %u : tensor<8x16xf16>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %s16 = nn.reduce_sum %p
// CHECK-NEXT:    %a16 = nn.reduce_sum %q
// CHECK-NEXT:    %x16 = nn.add %s16, %a16
// CHECK-NEXT:    %s = nn.reduce_sum %p
// CHECK-NEXT:    %bc = nn.add %s, %c
// CHECK-NEXT:    %t = nn.reduce_sum %p
// CHECK-NEXT:    %u = nn.reduce_sum %q
// CHECK-NEXT:    %two = nn.add %t, %u
// CHECK-NEXT:    %again = nn.add %two, %t

func.func @late(%p: tensor<2x8x16xf16>, %w: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = nn.reduce_sum %p : tensor<2x8x16xf16> -> tensor<8x16xf32>
  %late = nn.add %w, %w : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  %z = nn.add %s, %late : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  func.return %z : tensor<8x16xf32>
}

// ANY-LABEL: func.func @late
// ANY-NEXT:    %s = nn.reduce_sum %p
// ANY-NEXT:    %late = nn.add %w, %w
// ANY-NEXT:    %z = nn.add %s, %late

func.func @loop(%h: tensor<35x32xf32>, %ps: tensor<2x8x35x32xf16>, %qs: tensor<2x8x35x32xf16>) -> tensor<35x32xf32> {
  %r = nn.repeat 2 carried(%h : tensor<35x32xf32>) stacked(%ps, %qs : tensor<2x8x35x32xf16>, tensor<2x8x35x32xf16>) -> tensor<35x32xf32> {
  ^bb0(%a: tensor<35x32xf32>, %p: tensor<8x35x32xf16>, %q: tensor<8x35x32xf16>):
    %s = nn.reduce_sum %p : tensor<8x35x32xf16> -> tensor<35x32xf32>
    %h2 = nn.add %a, %s : tensor<35x32xf32>, tensor<35x32xf32> -> tensor<35x32xf32>
    %t = nn.reduce_sum %q : tensor<8x35x32xf16> -> tensor<35x32xf32>
    %h3 = nn.add %h2, %t : tensor<35x32xf32>, tensor<35x32xf32> -> tensor<35x32xf32>
    nn.yield %h3 : tensor<35x32xf32>
  }
  func.return %r : tensor<35x32xf32>
}

// LOOPS-LABEL: func.func @loop
// LOOPS:         ^bb0(%a: tensor<35x32xf32>, %p: tensor<8x35x32xf16>, %q: tensor<8x35x32xf16>):
// LOOPS-NEXT:      %h2 = nn.reduce_sum %p addends(%a : tensor<35x32xf32>) : tensor<8x35x32xf16> -> tensor<35x32xf32>
// LOOPS-NEXT:      %h3 = nn.reduce_sum %q addends(%h2 : tensor<35x32xf32>) : tensor<8x35x32xf16> -> tensor<35x32xf32>
// LOOPS-NEXT:      nn.yield %h3

// LOOPSKEPT-LABEL: func.func @mlp_parts
// LOOPSKEPT-NEXT:    %ya = nn.reduce_sum %pa, %b
// LOOPSKEPT-NEXT:    %y = nn.reduce_sum %pb addends(%ya : tensor<35x32xf32>)
// LOOPSKEPT-NEXT:    %r = nn.add %h, %y

// CHECK-LABEL: func.func @loop
// CHECK:            %s = nn.reduce_sum %p :
// CHECK-NEXT:       %h2 = nn.add %a, %s
// CHECK-NEXT:       %t = nn.reduce_sum %q :
// CHECK-NEXT:       %h3 = nn.add %h2, %t
