"""Every instruction against its documented semantics (runtime/semantics.py docstring), on a small target."""

import ml_dtypes
import numpy as np
import pytest

from ipu.backend.isa import FP_CLR_ZAACC, FP_CTL_NANOO, SUPERVISOR_CSRS
from ipu.backend.target import Target
from ipu.runtime import fp8
from ipu.runtime.semantics import pack_triple, unpack_triple
from ipu.runtime.testing import f32_bits, run_worker_snippet

T = Target.small(tiles=2, sram_kib=256)
MEM = 0x60000  # region 0 scratch
MEM2 = 0x64000  # another region-0 element
IL = 0x80000  # interleaved (region 1)
M32 = 0xFFFFFFFF


def run(body, **kw):
    return run_worker_snippet(T, body, **kw)


def m_of(sim, r, worker=0, tile=0):
    return int(sim.m[sim.worker_ctx(tile, worker), r])


def a_of(sim, r, worker=0, tile=0):
    return int(sim.a[sim.worker_ctx(tile, worker), r])


def a64_of(sim, r, worker=0, tile=0):
    return sim.a64[sim.worker_ctx(tile, worker), r // 2]


def s32(x):
    return x - (1 << 32) if x & (1 << 31) else x


ALU_REF = {
    "add": lambda a, b: (a + b) & M32,
    "sub": lambda a, b: (a - b) & M32,
    "mul": lambda a, b: (a * b) & M32,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "shl": lambda a, b: (a << (b & 31)) & M32,
    "shr": lambda a, b: a >> (b & 31),
    "shrs": lambda a, b: (s32(a) >> (b & 31)) & M32,
    "cmpeq": lambda a, b: int(a == b),
    "cmpne": lambda a, b: int(a != b),
    "cmpslt": lambda a, b: int(s32(a) < s32(b)),
    "cmpult": lambda a, b: int(a < b),
    "min": lambda a, b: min(s32(a), s32(b)) & M32,
    "max": lambda a, b: max(s32(a), s32(b)) & M32,
}


@pytest.mark.parametrize("op", sorted(ALU_REF))
def test_alu_register_and_immediate_forms(op):
    a, b = 0xFFFFFFF0, 7  # -16 and 7: sign matters for the signed ops
    imm = {"and": 0xABC, "or": 0xABC, "xor": 0xABC, "shl": 4, "shr": 4, "shrs": 4, "cmpult": 0xFFF}.get(
        op, -3
    )
    sim = run(f"{op} $m3, $m1, $m2\n{op} $m4, $m1, {imm}\n{op} $m5, $m2, $m1", m={1: a, 2: b})
    assert m_of(sim, 3) == ALU_REF[op](a, b)
    assert m_of(sim, 4) == ALU_REF[op](a, imm & M32)
    assert m_of(sim, 5) == ALU_REF[op](b, a)


def test_setzi_and_zero_registers():
    sim = run("setzi $m0, 0xFFFFF\nsetzi $a3, 0x12345\nadd $m1, $mzero, 5\nsetzi $m2, snippet")
    assert m_of(sim, 0) == 0xFFFFF and a_of(sim, 3) == 0x12345 and m_of(sim, 1) == 5
    assert m_of(sim, 2) == sim.label("snippet") and m_of(sim, 15) == 0


def test_ld32_st32_offsets_and_register_files():
    data = np.arange(8, dtype=np.uint32) * 0x01010101
    sim = run(
        f"""setzi $m0, {MEM}
        setzi $m1, 8
        ld32 $m2, $m0, $m1, 1          // EA = MEM + 8 + 4
        setzi $m3, 2
        ld32 $a2, $m0, $m1, $m3        // EA = MEM + 8 + 8
        st32 $m2, $m0, $mzero, 7
        st32 $a2, $m0, $m3, 5          // EA = MEM + 2 + 20: misaligned? no: 22 is -- see below
        """.replace(
            "st32 $a2, $m0, $m3, 5          // EA = MEM + 2 + 20: misaligned? no: 22 is -- see below",
            "st32 $a2, $m0, $mzero, 6",
        ),
        memory={MEM: data},
    )
    assert m_of(sim, 2) == data[3] and a_of(sim, 2) == data[4]
    out = sim.read(MEM, 32, np.uint32)[0]
    assert out[7] == data[3] and out[6] == data[4]


def test_step_forms_post_increment_by_scaled_stride():
    data = np.arange(16, dtype=np.uint32)
    sim = run(
        f"""setzi $m0, {MEM}
        setzi $m1, 12
        ld32step $m2, $m0, $m1+=, -2      // loads word 3, delta -> 12 - 8 = 4
        ld32step $a3, $m0, $m1+=, 3       // loads word 1, delta -> 4 + 12 = 16
        setzi $m4, 0
        setzi $m5, 2
        ld64step $a4:5, $m0, $m4+=, $m5   // loads words 0,1; delta -> 16
        ld64step $a6:7, $m0, $m4+=, 1     // loads words 4,5; delta -> 24
        setzi $m6, 0x100
        st64step $a6:7, $m0, $m6+=, -1    // stores at MEM + 0x100; delta -> 0xF8
        st32step $m2, $m0, $m6+=, 1       // stores at MEM + 0xF8; delta -> 0xFC
        """,
        memory={MEM: data, MEM + 0xF8: np.zeros(4, np.uint32)},
    )
    assert m_of(sim, 2) == 3 and a_of(sim, 3) == 1 and m_of(sim, 1) == 16
    assert a_of(sim, 4) == 0 and a_of(sim, 5) == 1 and a_of(sim, 6) == 4 and a_of(sim, 7) == 5
    assert m_of(sim, 4) == 24 and m_of(sim, 6) == 0xFC
    assert list(sim.read(MEM + 0xF8, 16, np.uint32)[0]) == [3, 0, 4, 5]


def test_ld64_st64_and_ld128():
    data = np.arange(8, dtype=np.uint64) + 0x1111_0000_0000
    sim = run(
        f"""setzi $m0, {IL}
        ld128 $a0:3, $m0, $mzero, 1      // EA = IL + 16
        setzi $m1, {MEM}
        st64 $a2:3, $m1, $mzero, 3
        ld64 $a4:5, $m1, $mzero, 3
        """,
        memory={IL: data, MEM: np.zeros(4, np.uint64)},
    )
    assert a64_of(sim, 0) == data[2] and a64_of(sim, 2) == data[3] and a64_of(sim, 4) == data[3]
    assert sim.read(MEM + 24, 8, np.uint64)[0, 0] == data[3]


def test_tapack_packs_and_unpacks():
    lo, hi = pack_triple([0x61238], [0x8ABC0], [0xE7FF8])
    assert [int(v[0]) for v in unpack_triple(lo, hi)] == [0x61238, 0x8ABC0, 0xE7FF8]
    sim = run("tapack $m0:1, $m4, $m5, $m6", m={4: 0x61238, 5: 0x8ABC0, 6: 0xE7FF8})
    assert (m_of(sim, 0), m_of(sim, 1)) == (int(lo[0]), int(hi[0]))
    assert m_of(sim, 0) & 0x1FFFFF == 0x61238 and m_of(sim, 1) & 0x1FFFFF == 0x8ABC0


def _stride_reg(f0, f1, f2):
    return (f0 & 0x3FF) | (f1 & 0x3FF) << 10 | (f2 & 0x3FF) << 20


def test_pace_loads_and_stores_with_selectors():
    a = np.arange(16, dtype=np.uint64) + 100
    b = np.arange(16, dtype=np.uint64) + 200
    stride = _stride_reg(3, -2, 0)
    sim = run(
        f"""setzi $m4, {MEM + 8}
        setzi $m5, {IL + 64}
        setzi $m6, {MEM2}
        tapack $m0:1, $m4, $m5, $m6
        setzi $m2, {stride & 0xFFFFF}
        setzi $m3, {stride >> 20}
        shl $m3, $m3, 20
        or $m2, $m2, $m3
        ld2x64pace $a0:1, $a2:3, $m0:1+=, $m2, 0b1001    // addr0 += field0 (3 atoms), addr1 += field1 (-2)
        ld2xst64pace $a4:7, $a0:1, $m0:1+=, $m2, 0b110001 // +3 atoms, +1 atom, addr2 += field2 (0)
        ldst64pace $a8:9, $a2:3, $m0:1+=, $m2, 0b0000     // +1 atom each; stores $a2:3 at addr2 (same)
        st64pace $a4:5, $m0:1+=, $m2, 0b10                // store at addr2+8, then -2 atoms
        """,
        memory={MEM: a, IL: b, MEM2 - 16: np.zeros(8, np.uint64)},
    )
    # addr0: MEM+8 -> +24 -> +24 -> +8 ; addr1: IL+64 -> -16 -> +8 ; addr2: MEM2 -> +0 -> +8 -> -16
    assert a64_of(sim, 0) == a[1] and a64_of(sim, 2) == b[8]
    assert a64_of(sim, 4) == a[4] and a64_of(sim, 6) == b[6]
    assert a64_of(sim, 8) == a[7]
    a0, a1, a2 = (int(v[0]) for v in unpack_triple(sim.m[0:1, 0], sim.m[0:1, 1]))
    assert (a0, a1, a2) == (MEM + 8 + 24 + 24 + 8, IL + 64 - 16 + 8, MEM2 + 8 - 16)
    stored = sim.read(MEM2, 16, np.uint64)[0]
    assert stored[0] == b[8]  # ldst64pace overwrote the ld2xst64pace store of $a0:1 at MEM2
    assert stored[1] == a[4]  # st64pace at MEM2 + 8


def test_ld2xst64pace_stores_the_old_register_value():
    """The store source may overlap the load destination: the store reads the register before the load."""
    a = np.arange(4, dtype=np.uint64) + 7
    sim = run(
        f"""setzi $m4, {MEM}
        setzi $m5, {IL}
        setzi $m6, {MEM2}
        tapack $m0:1, $m4, $m5, $m6
        ld64 $a0:1, $m4, $mzero, 3
        ld2xst64pace $a0:3, $a0:1, $m0:1+=, $mzero, 0
        """,
        memory={MEM: a, IL: a + 100, MEM2: np.zeros(1, np.uint64)},
    )
    assert sim.read(MEM2, 8, np.uint64)[0, 0] == a[3]
    assert a64_of(sim, 0) == a[0] and a64_of(sim, 2) == a[0] + 100


def test_branches():
    sim = run(
        """setzi $m0, 3
        setzi $m1, 0
    .Lloop:
        add $m1, $m1, 10
        brnzdec $m0, .Lloop         // 4 passes: 3, 2, 1, 0
        brz $m0, .Lz
        setzi $m2, 111              // skipped
    .Lz:
        brnz $m0, .Lbad             // not taken
        call $m6, .Lsub
        setzi $m4, 7
        bri .Lend
    .Lsub:
        setzi $m3, 5
        br $m6
    .Lbad:
        setzi $m2, 222
    .Lend:
        """
    )
    assert m_of(sim, 1) == 40 and m_of(sim, 0) == 0 and m_of(sim, 2) == 0
    assert m_of(sim, 3) == 5 and m_of(sim, 4) == 7


def test_divergent_branches_split_and_merge_groups():
    # Tile 0 takes the branch, tile 1 falls through; both end at .Ljoin and keep running together.
    sim = run(
        """brz $m0, .Lzero
        setzi $m1, 1
        bri .Ljoin
    .Lzero:
        setzi $m1, 2
    .Ljoin:
        add $m2, $m1, 100
        """,
        m={0: np.array([0] * 6 + [1] * 6)},
    )
    assert m_of(sim, 2, tile=0) == 102 and m_of(sim, 2, tile=1) == 101


@pytest.mark.parametrize("count", [0, 1, 5])
def test_rpt_counts_and_once_only_coissue(count):
    sim = run(
        f"""setzi $m0, {count}
        setzi $m1, 0
        {{ rpt $m0, 1 ; f32add $a1, $a1, $a0 }}   // co-issued: runs once
        {{ add $m1, $m1, 1 ; fnop }}
        {{ add $m1, $m1, 2 ; f32add $a2, $a2, $a0 }}
        setzi $m2, 9
        """,
        a={0: np.float32(1.5), 1: np.float32(0), 2: np.float32(0)},
    )
    assert m_of(sim, 1) == 3 * count and m_of(sim, 2) == 9
    assert np.uint32(a_of(sim, 1)).view(np.float32) == 1.5
    assert np.uint32(a_of(sim, 2)).view(np.float32) == 1.5 * count


def test_rpt_immediate_count_and_cycles():
    sim = run("rpt 4, 0\n{ nop ; fnop }")
    # worker: rpt (+ the nop inserted before it for alignment) + 4 bundles + exitz, 6 cycles each
    wctx = sim.worker_ctx(0, 0)
    assert sim.issued[wctx] == 1 + 1 + 4 * 2 + 1
    start = sim.cycles[sim.NW]  # the supervisor clock is at least the worker's end
    assert sim.cycles[wctx] >= 6 * (1 + 1 + 4 + 1)
    assert start >= sim.cycles[wctx]


def test_bundle_reads_registers_before_either_half_writes():
    data = np.array([5], dtype=np.uint64)
    sim = run(
        f"""setzi $m0, {MEM}
        {{ ld64 $a0:1, $m0, $mzero, 0 ; f32v2add $a2:3, $a0:1, $a0:1 }}
        """,
        memory={MEM: data},
        a={0: f32_bits(1.0), 1: f32_bits(2.0)},
    )
    assert a64_of(sim, 0) == 5  # the load happened
    assert list(np.array([a_of(sim, 2), a_of(sim, 3)], np.uint32).view(np.float32)) == [2.0, 4.0]  # old a0:1


def _f16v4(vals):
    return int(np.array(vals, dtype=np.float16).view(np.uint64)[0])


def _as_f16(u64):
    return np.array([u64], dtype=np.uint64).view(np.float16)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_f16v4_arithmetic_rounds_to_nearest_even(op):
    x = [1.0, 2048.0, 65504.0, -0.5]
    y = [2.0**-11, 1.0, 65504.0, 3.0]  # 1 + 2^-11 is a tie (-> 1.0); 2048 + 1 -> 2048; overflow -> inf
    sim = run(
        f"setzi $m0, {MEM}\nld64 $a0:1, $m0, $mzero, 0\nld64 $a2:3, $m0, $mzero, 1\nf16v4{op} $a4:5, $a0:1, $a2:3",
        memory={MEM: np.array([_f16v4(x), _f16v4(y)], dtype=np.uint64)},
    )
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(all="ignore"):
        ref = fn(np.float64(x), np.float64(y)).astype(np.float16)  # one rounding from the exact result
    got = _as_f16(a64_of(sim, 4))
    np.testing.assert_array_equal(got, ref)
    if op == "add":
        assert list(got[:2]) == [1.0, 2048.0] and np.isinf(got[2])


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_f32v2_and_f32_arithmetic(op):
    x, y = np.float32([1.0, 3e38]), np.float32([2.0**-24, 3e38])
    sim = run(
        f"f32v2{op} $a4:5, $a0:1, $a2:3\nf32{op} $a6, $a1, $a0",
        a={0: f32_bits(x[0]), 1: f32_bits(x[1]), 2: f32_bits(y[0]), 3: f32_bits(y[1])},
    )
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    with np.errstate(all="ignore"):
        ref = fn(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
        ref_s = np.float32(fn(np.float64(x[1]), np.float64(x[0])))
    got = np.array([a_of(sim, 4), a_of(sim, 5)], np.uint32).view(np.float32)
    np.testing.assert_array_equal(got, ref)
    assert np.uint32(a_of(sim, 6)).view(np.float32) == ref_s


def test_f32_f16_conversions():
    vals = np.float32(
        [1.0 + 2.0**-11, 65520.0, -3.25, 1e-8]
    )  # tie -> even, overflow -> inf, exact, underflow
    sim = run(
        """f32tof16 $a4, $a0
        f32tof16 $a5, $a1
        f32v2tof16 $a6, $a2:3
        f16tof32 $a7, $a6
        f16v2tof32 $a8:9, $a6
        """,
        a={i: f32_bits(v) for i, v in enumerate(vals)},
    )
    h = lambda r: np.uint16(a_of(sim, r) & 0xFFFF).view(np.float16)  # noqa: E731
    assert h(4) == np.float16(1.0) and np.isinf(h(5))
    assert a_of(sim, 4) >> 16 == 0
    pair = np.array([a_of(sim, 6)], np.uint32).view(np.float16)
    assert pair[0] == np.float16(-3.25) and pair[1] == np.float16(1e-8)
    assert np.uint32(a_of(sim, 7)).view(np.float32) == np.float32(-3.25)
    assert list(np.array([a_of(sim, 8), a_of(sim, 9)], np.uint32).view(np.float32)) == [
        -3.25,
        np.float32(np.float16(1e-8)),
    ]


def test_fp8_decode_examples_from_poplibs():
    # 8.0 = 0x58 and 7.0 = 0x56 in F143 (S1 inlineAssemblerCast.hpp comments)
    assert fp8.decode(np.uint8([0x58, 0x56]), fp8.F143).tolist() == [8.0, 7.0]
    assert fp8.encode(np.float32([8.0, 7.0]), fp8.F143).tolist() == [0x58, 0x56]
    assert fp8.decode(np.uint8([0x80]), fp8.F143)[0] != fp8.decode(np.uint8([0x80]), fp8.F143)[0]  # NaN


@pytest.mark.parametrize("fmt,scale", [(fp8.F143, 0), (fp8.F143, -4), (fp8.F152, 3), (fp8.F152, -20)])
def test_f8_to_f16_conversions_use_format_and_scale(fmt, scale):
    raw = np.array([0x58, 0x56, 0xD8, 0x01], dtype=np.uint8)
    sim = run(
        f"setzi $a10, {fmt}\nuput $FP_NFMT, $a10\nsetzi $a10, {scale & 0x3F}\nuput $FP_SCL, $a10\n"
        "f8v4tof16 $a4:5, $a0\nf8v2tof16 $a6, $a0",
        a={0: raw.view(np.uint32)[0]},
    )
    dt = ml_dtypes.float8_e4m3fnuz if fmt == fp8.F143 else ml_dtypes.float8_e5m2fnuz
    ref = (raw.view(dt).astype(np.float64) * 2.0**scale).astype(np.float16)
    np.testing.assert_array_equal(_as_f16(a64_of(sim, 4)), ref)
    np.testing.assert_array_equal(np.array([a_of(sim, 6)], np.uint32).view(np.float16), ref[:2])


@pytest.mark.parametrize("nanoo", [False, True])
def test_f16_to_f8_rounding_overflow_and_nan(nanoo):
    # F143 with scale 1: value / 2 is encoded. 14.5/2 = 7.25 is a tie between 7.0 and 7.5 -> 7.0 (even mantissa).
    vals = np.float16([14.5, 16.0, 1000.0, np.nan, -np.inf, -14.0, 0.0, 2.0**-14])
    ctl_word = np.array([FP_CTL_NANOO if nanoo else 0], dtype=np.uint32)
    sim = run(
        f"""setzi $a10, 0
        uput $FP_NFMT, $a10
        setzi $a10, 1
        uput $FP_SCL, $a10
        setzi $m0, {MEM}
        ld32 $a11, $m0, $mzero, 0
        uput $FP_CTL, $a11
        f16v2tof8 $a4, $a0
        f16v8tof8 $a6:7, $a0:3
        """,
        a={i: w for i, w in enumerate(vals.view(np.uint32))},
        memory={MEM: ctl_word},
    )
    got = np.array([a_of(sim, 6), a_of(sim, 7)], np.uint32).view(np.uint8)
    # saturation: +240 is 0x7F and -240 is 0xFF in F143; with NANOO overflow (and infinity) become NaN (0x80)
    expected = [0x56, 0x58, 0x80 if nanoo else 0x7F, 0x80, 0x80 if nanoo else 0xFF, 0xD6, 0x00]
    assert got[:7].tolist() == expected
    # 2^-14 / 2 = 2^-15 is below half the smallest F143 subnormal (2^-10 * 2^-3 / 2): rounds to zero
    assert got[7] == 0
    assert np.array([a_of(sim, 4)], np.uint32).view(np.uint8).tolist() == [0x56, 0x58, 0, 0]


def _amp_weights_supervisor():
    return f"""
    setzi $m0, {MEM}
    put $CCCSLOAD, $m0
""" + "\n".join(f"    ld64putcs {i}" for i in range(64))


def test_amp_pipeline_partials_early_results_late_and_clear():
    """One group: warm-up (zero inputs, partials in), the group, drain (results out); then $FP_CLR."""
    rng = np.random.default_rng(3)
    w = rng.integers(-4, 5, (16, 16)).astype(np.float16)  # small integers: exact in half
    x = rng.integers(-4, 5, 16).astype(np.float16)
    p = rng.integers(-8, 9, 16).astype(np.float16)
    body = [f"setzi $a10, {FP_CLR_ZAACC}", "uput $FP_CLR, $a10", f"setzi $m0, {MEM2}", f"setzi $m1, {IL}"]
    for ph in range(4):  # warm-up: zero x, partials for the group
        body += [
            f"ld64 $a2:3, $m1, $mzero, {ph}",
            f"f16v4hihov4amp $a4:5, $azeros, $a2:3, TAMP_F16V4_E4_P{ph}",
        ]
    for ph in range(4):  # the group: inputs; outputs are the (zero) warm-up results
        body += [
            f"ld64 $a0:1, $m0, $mzero, {ph}",
            f"f16v4hihov4amp $a{6 if ph % 2 else 4}:{7 if ph % 2 else 5}, $a0:1, $azeros, TAMP_F16V4_E4_P{ph}",
            f"st64 $a{6 if ph % 2 else 4}:{7 if ph % 2 else 5}, $m0, $mzero, {8 + ph}",
        ]
    for ph in range(4):  # drain: results of the group come out
        body += [
            f"f16v4hihov4amp $a4:5, $azeros, $azeros, TAMP_F16V4_E4_P{ph}",
            f"st64 $a4:5, $m0, $mzero, {4 + ph}",
        ]
    body += ["uput $FP_CLR, $a10"]
    for ph in range(4):  # after clearing: a drain gives zeros
        body += [
            f"f16v4hihov4amp $a4:5, $azeros, $azeros, TAMP_F16V4_E4_P{ph}",
            f"st64 $a4:5, $m0, $mzero, {12 + ph}",
        ]
    sim = run(
        "\n".join(body),
        supervisor=_amp_weights_supervisor(),
        memory={MEM: w, MEM2: np.concatenate([x, np.zeros(48, np.float16)]), IL: p},
    )
    out = sim.read(MEM2, 128, np.float16)[0].reshape(4, 16)  # rows: x, results, warm-up outputs, after clear
    np.testing.assert_array_equal(out[1], (w.astype(np.float64) @ x + p).astype(np.float16))
    assert not out[2].any() and not out[3].any()


@pytest.mark.parametrize(
    "xfmt,wfmt,scale", [(fp8.F143, fp8.F143, -4), (fp8.F152, fp8.F143, 2), (fp8.F143, fp8.F152, 0)]
)
def test_fp8_amp_scales_by_the_sum_of_scales(xfmt, wfmt, scale):
    rng = np.random.default_rng(5)
    wv = rng.integers(-6, 7, (16, 32)).astype(np.float32) / 2
    xv = rng.integers(-6, 7, 32).astype(np.float32) / 4
    wb = fp8.encode(wv, wfmt)
    xb = fp8.encode(xv, xfmt)
    # CWEI slot = engine * 4 + phase, 8 fp8 weights each: row-major W[e, 8 * phase + k]
    body = [f"setzi $a10, {FP_CLR_ZAACC}", "uput $FP_CLR, $a10", f"setzi $m0, {MEM2}"]
    for ph in range(4):
        body += [f"f8v8hihov4amp $a4:5, $azeros, $azeros, TAMP_F8V8_E4_P{ph}"]
    for ph in range(4):
        body += [f"ld64 $a0:1, $m0, $mzero, {ph}", f"f8v8hihov4amp $a4:5, $a0:1, $azeros, TAMP_F8V8_E4_P{ph}"]
    for ph in range(4):
        body += [
            f"f8v8hihov4amp $a4:5, $azeros, $azeros, TAMP_F8V8_E4_P{ph}",
            f"st64 $a4:5, $m0, $mzero, {4 + ph}",
        ]
    sup = _amp_weights_supervisor() + (
        f"\n    setzi $m3, {(xfmt << 1) | wfmt}\n    put $FP_INFMT, $m3\n    setzi $m3, {scale & 0x7F}\n    put $FP_ISCL, $m3"
    )
    sim = run(
        "\n".join(body), supervisor=sup, memory={MEM: wb, MEM2: np.concatenate([xb, np.zeros(32, np.uint8)])}
    )
    got = sim.read(MEM2 + 32, 32, np.float16)[0]
    ref = (fp8.decode(wb, wfmt).astype(np.float64) @ fp8.decode(xb, xfmt) * 2.0**scale).astype(np.float16)
    np.testing.assert_array_equal(got, ref)


def test_csrs_worker_ids_tile_ids_and_vertex_base():
    sim = run_worker_snippet(
        T,
        "get $m0, $WSR\nor $m1, $mvertex_base, 0",
        workers=6,
        supervisor=f"    get $m5, $TILE_ID\n    setzi $m6, {MEM}\n    st32 $m5, $m6, $mzero, 0",
        memory={MEM: np.zeros(1, np.uint32)},
    )
    for t in range(T.num_tiles):
        for w in range(6):
            assert m_of(sim, 0, w, t) == w
            assert m_of(sim, 1, w, t) == T.sram_base  # runall with offset 0: every worker gets the same base
        assert sim.read(MEM, 4, np.uint32, tiles=t)[0, 0] == t


def test_get_put_supervisor_csrs_and_fp_clr_reads_zero():
    sim = run_worker_snippet(
        T,
        "uget $a0, $FP_CLR\nsetzi $a1, 77\nuput $FP_CTL, $a1\nuget $a2, $FP_CTL",
        supervisor="    setzi $m5, 1234\n    put $CCCSLOAD, $m5\n    get $m6, $CCCSLOAD",
    )
    assert a_of(sim, 0) == 0 and a_of(sim, 2) == 77
    assert int(sim.m[sim.NW, 6]) == 1234
    assert SUPERVISOR_CSRS["CCCSLOAD"] == 0x50


def test_register_offset_forms_scale_the_offset():
    data = np.arange(16, dtype=np.uint64) + 1000
    sim = run(
        f"""setzi $m0, {MEM}
        setzi $m1, 8
        setzi $m2, 3
        ld64 $a0:1, $m0, $m1, $m2          // EA = MEM + 8 + 3 * 8
        setzi $m3, {IL}
        setzi $m4, 1
        ld128 $a4:7, $m3, $mzero, $m4       // EA = IL + 16
        st64 $a0:1, $m0, $mzero, $m4        // EA = MEM + 8
        st32 $m2, $m0, $m1, $m4             // EA = MEM + 8 + 4
        """,
        memory={MEM: data, IL: data + 1},
    )
    assert a64_of(sim, 0) == data[4] and a64_of(sim, 4) == data[2] + 1 and a64_of(sim, 6) == data[3] + 1
    words = sim.read(MEM + 8, 8, np.uint32)[0]
    assert words[0] == data[4] & 0xFFFFFFFF and words[1] == 3


def test_ld128putcs_loads_weights_from_interleaved_memory():
    rng = np.random.default_rng(4)
    w = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    x = rng.integers(-3, 4, 16).astype(np.float16)
    sup = f"    setzi $m0, {IL}\n    put $CCCSLOAD, $m0\n" + "\n".join(
        f"    ld128putcs {2 * i}" for i in range(32)
    )
    body = [f"setzi $a10, {FP_CLR_ZAACC}", "uput $FP_CLR, $a10", f"setzi $m0, {MEM2}"]
    body += [f"f16v4hihov4amp $a4:5, $azeros, $azeros, TAMP_F16V4_E4_P{ph}" for ph in range(4)]
    for ph in range(4):
        body += [
            f"ld64 $a0:1, $m0, $mzero, {ph}",
            f"f16v4hihov4amp $a4:5, $a0:1, $azeros, TAMP_F16V4_E4_P{ph}",
        ]
    for ph in range(4):
        body += [
            f"f16v4hihov4amp $a4:5, $azeros, $azeros, TAMP_F16V4_E4_P{ph}",
            f"st64 $a4:5, $m0, $mzero, {4 + ph}",
        ]
    sim = run(
        "\n".join(body), supervisor=sup, memory={IL: w, MEM2: np.concatenate([x, np.zeros(16, np.float16)])}
    )
    np.testing.assert_array_equal(
        sim.read(MEM2 + 32, 32, np.float16)[0], (w.astype(np.float64) @ x).astype(np.float16)
    )
    from ipu.runtime.simulator import CSR_COLUMN

    assert (
        int(sim.csr[sim.NW, CSR_COLUMN[SUPERVISOR_CSRS["CCCSLOAD"]]]) == IL + 512
    )  # post-incremented 32 x 16


def test_exitnz_delay_and_supervisor_costs():
    sim = run_worker_snippet(T, "setzi $m0, 1\nexitnz $m0\nsetzi $m1, 5", supervisor="    delay 100")
    assert m_of(sim, 1) == 0  # the worker ended before setzi
    sup_clock = int(sim.cycles[sim.NW])
    # delay 100 (+6 stall) + 2 setzi + run (6) + sync (6 stall + sync cost) + br (6) >= 100
    assert sup_clock >= 100 + 6 + 2 + 6 + 6 + 6


def test_step_forms_with_register_strides():
    data = np.arange(8, dtype=np.uint32) + 50
    sim = run(
        f"""setzi $m0, {MEM}
        setzi $m1, 4
        setzi $m2, 0
        sub $m2, $m2, 1                   // stride -1 (in a register: signed)
        ld32step $m3, $m0, $m1+=, $m2     // word 1, delta 4 -> 0
        setzi $m4, 0x100
        setzi $m5, 2
        st32step $a0, $m0, $m4+=, $m5     // MEM + 0x100, delta -> 0x108
        st64step $a2:3, $m0, $m4+=, $m2   // MEM + 0x108, delta -> 0x100
        """,
        memory={MEM: data, MEM + 0x100: np.zeros(4, np.uint32)},
        a={0: 7, 2: 8, 3: 9},
    )
    assert m_of(sim, 3) == 51 and m_of(sim, 1) == 0 and m_of(sim, 4) == 0x100
    assert sim.read(MEM + 0x100, 16, np.uint32)[0].tolist() == [7, 0, 8, 9]
