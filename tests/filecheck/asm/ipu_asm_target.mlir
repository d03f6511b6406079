// RUN: ipu-opt %s -t ipu-asm | filecheck %s
// RUN: ipu-opt %s -t 'ipu-asm{layout=true}' | filecheck %s --check-prefix=LAYOUT

builtin.module {
  asm.kernel @main supervisor {
    asm.setzi m1, "work"
    asm.setzi m2, 4096
    asm.runall m1, m2, 4
    asm.sync TEXCH_SYNCZONE_LOCAL
    asm.br lr
  }
  asm.kernel @work worker {
    asm.ld32 m2, mvertex_base, mzero, 2
    asm.rpt m2, 1
    asm.bundle {
      asm.ld64step a0:1, m0, m4+=, 1
      asm.f16v4add a2:3, a2:3, a0:1
    }
    asm.f16v4mul a4:5, a2:3, a0:1
    asm.label ".Lend"
    asm.brnzdec m3, ".Lend"
    asm.exitz mzero
  }
}

// CHECK:      .section .text.main
// CHECK-NEXT: .globl main
// CHECK-NEXT: .supervisor
// CHECK-NEXT: .align 8
// CHECK-NEXT: main:
// CHECK-NEXT:     setzi $m1, work
// CHECK-NEXT:     setzi $m2, 0x1000
// CHECK-NEXT:     runall $m1, $m2, 4
// CHECK-NEXT:     sync TEXCH_SYNCZONE_LOCAL
// CHECK-NEXT:     br $m10
// CHECK-EMPTY:
// CHECK-NEXT: .section .text.work
// CHECK-NEXT: .globl work
// CHECK-NEXT: .worker
// CHECK-NEXT: .align 8
// CHECK-NEXT: work:
// CHECK-NEXT:     ld32 $m2, $m13, $mzero, 2
// CHECK-NEXT:     rpt $m2, 1
// CHECK-NEXT:     { ld64step $a0:1, $m0, $m4+=, 1 ; f16v4add $a2:3, $a2:3, $a0:1 }
// CHECK-NEXT:     f16v4mul $a4:5, $a2:3, $a0:1
// CHECK-NEXT: .Lend:
// CHECK-NEXT:     brnzdec $m3, .Lend
// CHECK-NEXT:     exitz $mzero

// The laid-out form shows the padding and the bundled rpt body, with addresses.
// LAYOUT:      work:
// LAYOUT-NEXT:     ld32 $m2, $m13, $mzero, 2{{ +}}// 0x4c018
// LAYOUT-NEXT:     rpt $m2, 1{{ +}}// 0x4c01c
// LAYOUT-NEXT:     { ld64step $a0:1, $m0, $m4+=, 1 ; f16v4add $a2:3, $a2:3, $a0:1 }{{ +}}// 0x4c020
// LAYOUT-NEXT:     { nop ; f16v4mul $a4:5, $a2:3, $a0:1 }{{ +}}// 0x4c028
// LAYOUT-NEXT: .Lend:
// LAYOUT-NEXT:     brnzdec $m3, .Lend{{ +}}// 0x4c030
