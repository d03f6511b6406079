// RUN: ipu-opt %s | ipu-opt | filecheck %s
// RUN: ipu-opt %s --print-op-generic | ipu-opt | filecheck %s
// RUN: ipu-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

builtin.module {
  asm.kernel @main supervisor {
    asm.setzi m0, 311296
    asm.put CCCSLOAD, m0
    asm.ld64putcs 0
    asm.setzi m1, "work"
    asm.runall m1, m2, 4
    asm.sync TEXCH_SYNCZONE_LOCAL
    asm.br lr
  }
  asm.kernel @work worker {
    asm.setzi a0, 2
    asm.uput FP_CLR, a0
    asm.ld32 m5, mvertex_base, mzero, 0
    asm.tapack m2:3, m5, m6, m7
    asm.rpt m8, 0
    asm.bundle {
      asm.ld2xst64pace a0:3, a4:5, m2:3+=, mzero, 0
      asm.f16v4hihov4amp a4:5, a0:1, a2:3, TAMP_F16V4_E4_P0
    }
    asm.label ".Lloop"
    asm.add m0, m0, -1
    asm.brnzdec m0, ".Lloop" {comment = "count down"}
    asm.exitz mzero
  }
}

// CHECK:      builtin.module {
// CHECK-NEXT:   asm.kernel @main supervisor {
// CHECK-NEXT:     asm.setzi m0, 311296
// CHECK-NEXT:     asm.put CCCSLOAD, m0
// CHECK-NEXT:     asm.ld64putcs 0
// CHECK-NEXT:     asm.setzi m1, "work"
// CHECK-NEXT:     asm.runall m1, m2, 4
// CHECK-NEXT:     asm.sync TEXCH_SYNCZONE_LOCAL
// CHECK-NEXT:     asm.br lr
// CHECK-NEXT:   }
// CHECK-NEXT:   asm.kernel @work worker {
// CHECK-NEXT:     asm.setzi a0, 2
// CHECK-NEXT:     asm.uput FP_CLR, a0
// CHECK-NEXT:     asm.ld32 m5, mvertex_base, mzero, 0
// CHECK-NEXT:     asm.tapack m2:3, m5, m6, m7
// CHECK-NEXT:     asm.rpt m8, 0
// CHECK-NEXT:     asm.bundle {
// CHECK-NEXT:       asm.ld2xst64pace a0:3, a4:5, m2:3+=, mzero, 0
// CHECK-NEXT:       asm.f16v4hihov4amp a4:5, a0:1, a2:3, TAMP_F16V4_E4_P0
// CHECK-NEXT:     }
// CHECK-NEXT:     asm.label ".Lloop"
// CHECK-NEXT:     asm.add m0, m0, -1
// CHECK-NEXT:     asm.brnzdec m0, ".Lloop" {comment = "count down"}
// CHECK-NEXT:     asm.exitz mzero
// CHECK-NEXT:   }
// CHECK-NEXT: }

// GENERIC:      "asm.kernel"() <{sym_name = "work", context = "worker"}> ({
// GENERIC:        "asm.ld2xst64pace"() <{d = "$a0:3", s = "$a4:5", addr = "$m2:3+=", stride = "$mzero", sel = 0 : i32}> : () -> ()
