"""The ISA table, operand checks, layout, text printing/parsing and the binary encoding: every form."""

import pytest

from ipu.backend import isa
from ipu.backend.asm_text import AsmSyntaxError, parse_kernels, parse_program, print_kernels, print_program
from ipu.backend.encoding import EncodingError, decode_instr, decode_program, encode_instr, encode_program
from ipu.backend.isa import FORMS, Ctx, Instr, Kind, OperandError, make
from ipu.backend.isa_program import Bundle, Kernel, Label, layout
from ipu.runtime import semantics

BASE = 0x4C000


def sample_ops(form: isa.InstrForm) -> tuple:
    """Valid, non-trivial operand values for a form."""
    vals = []
    for op in form.operands:
        if op.kind == Kind.M:
            vals.append(3 if op.is_def else 15 if op.name == "s0" else 4)
        elif op.kind == Kind.MP:
            vals.append(2)
        elif op.kind == Kind.A:
            vals.append(5)
        elif op.kind == Kind.AP:
            vals.append({"d": 4, "d0": 4, "d1": 6, "x": 0, "p": 2}.get(op.name, 6))
        elif op.kind == Kind.AQ:
            vals.append(8)
        elif op.kind == Kind.IMM:
            lo, hi = op.imm_range()
            vals.append(lo if op.signed else hi)
        elif op.kind == Kind.LABEL:
            vals.append("target")
        elif op.kind == Kind.CSR:
            if form.mnemonic in ("uget", "uput"):
                vals.append(isa.WORKER_CSRS["FP_CTL"])
            else:
                vals.append(isa.SUPERVISOR_CSRS["CCCSLOAD"] if form.ctx != Ctx.WORKER else 0x60)
        elif op.kind == Kind.FLAGS:
            vals.append(0b1001)
    return tuple(vals)


def all_forms_kernels() -> list[Kernel]:
    sup = Kernel("sup", True, [Label("target")])
    wrk = Kernel("wrk", False)
    for f in FORMS:
        ins = Instr(f, sample_ops(f))
        if f.ctx in (Ctx.SUPERVISOR, Ctx.BOTH):
            sup.items.append(ins)
        if f.ctx in (Ctx.WORKER, Ctx.BOTH):
            wrk.items.append(ins)
    wrk.items.append(
        Bundle(make("ld64", "$a0:1", "$m0", "$m1", 2), make("f16v4add", "$a2:3", "$a2:3", "$a0:1"))
    )
    return [sup, wrk]


def test_table_is_consistent():
    assert len({f.key for f in FORMS}) == len(FORMS)
    assert [f.opcode for f in FORMS] == list(range(len(FORMS)))
    for f in FORMS:
        assert hasattr(semantics, f.sem_name), f.key
        assert f.category in isa.CATEGORIES, f.key
        assert f.cycles >= 1 and f.supervisor_cycles >= 1
        if any(o.kind in (Kind.A, Kind.AP, Kind.AQ) for o in f.operands):
            assert f.ctx == Ctx.WORKER, f"{f.key}: the supervisor has no ARF"
        if f.slot == isa.Slot.AUX:
            assert f.ctx == Ctx.WORKER
    for mnemonic in (
        "ld32",
        "ld64",
        "ld64step",
        "ld128",
        "ld2x64pace",
        "ld2xst64pace",
        "ldst64pace",
        "st32",
        "st64",
        "st64pace",
        "tapack",
        "setzi",
        "br",
        "brz",
        "brnz",
        "brnzdec",
        "call",
        "rpt",
        "f16v4hihov4amp",
        "f8v8hihov4amp",
        "ld64putcs",
        "ld128putcs",
        "run",
        "runall",
        "sync",
        "get",
        "put",
        "uput",
        "send",
        "f16v2tof8",
        "f8v4tof16",
        "f32v2tof16",
        "f16v2tof32",
    ):
        assert mnemonic in isa.FORMS_BY_MNEMONIC, mnemonic


def test_text_round_trip_of_every_form():
    kernels = all_forms_kernels()
    text = print_kernels(kernels)
    assert parse_kernels(text) == kernels
    assert "{ ld64 $a0:1, $m0, $m1, 2 ; f16v4add $a2:3, $a2:3, $a0:1 }" in text


def test_encoding_round_trip_of_every_form():
    program = layout(all_forms_kernels(), BASE)
    for u in program.units:
        for k, ins in enumerate(u.instrs):
            word = encode_instr(ins, coissue=len(u.instrs) == 2 and k == 0)
            back, co = decode_instr(word)
            assert back == ins and co == (len(u.instrs) == 2 and k == 0)
            assert 0 <= word < 1 << 32
    image = encode_program(program)
    assert len(image) == program.end - program.base
    decoded = decode_program(image, BASE, program.kernels)
    assert decoded.same_code(program)


def test_ir_text_and_binary_give_the_same_program():
    from ipu.dialects.asm import kernels_to_module, module_to_kernels

    kernels = all_forms_kernels()
    from_text = parse_program(print_kernels(kernels), BASE)
    from_ir = layout(module_to_kernels(kernels_to_module(kernels)), BASE)
    from_binary = decode_program(encode_program(from_text), BASE, from_text.kernels)
    assert from_text.same_code(from_ir) and from_text.same_code(from_binary)
    # and printing the laid-out program parses back to it (layout is idempotent)
    assert parse_program(print_program(from_text), BASE).same_code(from_text)


@pytest.mark.parametrize(
    "args,message",
    [
        (("ld64", "$m0:1", "$m0", "$m1", 0), "operand 'd' must be a $a register"),
        (("ld64", "$a1:2", "$m0", "$m1", 0), "operand 'd': $a1:2 is not aligned to 2"),
        (("ld64", "$a0", "$m0", "$m1", 0), "operand 'd' must be a register pair"),
        (("ld128", "$a2:5", "$m0", "$m1", 0), "operand 'd': $a2:5 is not aligned to 4"),
        (("ld2xst64pace", "$a0:1", "$a4:5", "$m2:3+=", "$m0", 0), "operand 'd' must be a register quad"),
        (
            ("ld2xst64pace", "$a0:3", "$a4:5", "$m2:3", "$m0", 0),
            "operand 'addr' must be a $m register with +=",
        ),
        (("add", "$m0", "$m1", 40000), "operand 's1': immediate 40000 out of range [-32768, 32767]"),
        (("setzi", "$m0", 1 << 20), "operand 'imm': immediate 1048576 out of range"),
        (("rpt", 4096, 0), "operand 'count': immediate 4096 out of range [0, 4095]"),
        (
            ("ld2xst64pace", "$a0:3", "$a4:5", "$m2:3+=", "$m0", 64),
            "operand 'sel': immediate 64 out of range",
        ),
        (("add", "$m15", "$m1", 1), "operand 'd': $m15 is read-only"),
        (("setzi", "$a15", 1), "operand 'd': $a15 is read-only"),
        (("f16v4add", "$a0:1", "$m0", "$a2:3"), "operand 's0' must be a $a register"),
        (("uput", "$COUNT_L", "$a0"), "needs a upper (>= 0x100) CSR"),
        (("frobnicate", "$m0"), "unknown instruction 'frobnicate'"),
        (("add", "$m0", "$m1"), "add: expected 3 operands, got 2"),
    ],
)
def test_operand_checks_name_the_op_and_operand(args, message):
    with pytest.raises(OperandError) as e:
        make(*args)
    assert message in str(e.value)


def test_context_checks():
    with pytest.raises(OperandError, match="worker-only instruction used in supervisor code"):
        make("f16v4add", "$a0:1", "$a0:1", "$a0:1", supervisor=True)
    with pytest.raises(OperandError, match="supervisor-only instruction used in worker code"):
        make("runall", "$m0", "$m1", 0, supervisor=False)
    with pytest.raises(OperandError, match="cannot co-issue"):
        Kernel("k", True, [Bundle(make("nop"), make("fnop"))]).verify()
    with pytest.raises(OperandError, match="must issue on the AUX pipeline"):
        Bundle(make("nop"), make("nop"))


def test_verified_instructions_are_remembered_per_context_and_bounded(monkeypatch):
    """`Kernel.verify` checks each (instruction, context) once: an instruction a worker kernel passed is still
    refused in supervisor code, and the memory of passed instructions stays within its bound."""
    from ipu.backend import isa_program

    add = make("f16v4add", "$a0:1", "$a0:1", "$a2:3")
    Kernel("w", False, [add]).verify()
    with pytest.raises(OperandError, match="worker-only instruction used in supervisor code"):
        Kernel("s", True, [add]).verify()
    monkeypatch.setattr(isa_program, "_VERIFIED", set())
    monkeypatch.setattr(isa_program, "_VERIFIED_MAX", 3)
    Kernel("w", False, [make("add", "$m0", "$m1", i) for i in range(10)]).verify()
    assert 0 < len(isa_program._VERIFIED) <= 3


def test_worker_code_keeps_azeros_zero():
    """$a14 is the low half of $azeros: a worker kernel writing it (attn_merge4 once kept a merge weight there)
    made later `st64 $azeros` store garbage into zero padding. Every kernel library passes the check."""
    from ipu.backend.kernels import copy, elementwise, gemm, ksum, pack, rowwise

    for ins in (make("f32mul", "$a14", "$a1", "$a0"), make("ld32", "$a14", "$m0", "$mzero", 0)):
        with pytest.raises(OperandError, match=r"writes \$a14, the low half of \$azeros"):
            Kernel("k", False, [ins]).verify()
    Kernel("k", False, [make("f32mul", "$a13", "$a14", "$a0")]).verify()  # reading it is fine
    for lib in (
        rowwise.library_asm(), pack.library_asm(), elementwise.library_asm(), gemm.library_asm(BASE),
        copy.library_asm(), ksum.library_asm(),
    ):  # fmt: skip
        for k in parse_kernels(lib):
            k.verify()


def test_layout_aligns_bundles_and_rpt_bodies():
    k = Kernel(
        "w",
        False,
        [
            make("setzi", "$m0", 2),
            make("rpt", "$m0", 1),  # at 0x4: already leaves the body 8-aligned
            make("ld64", "$a0:1", "$m1", "$m2", 0),  # solo in the body: paired with fnop
            make("f16v4add", "$a2:3", "$a2:3", "$a0:1"),  # solo AUX in the body: paired with nop
            make("setzi", "$m1", 1),
            make("rpt", "$m0", 0),  # at 0x1c -> body at 0x20, aligned
            Bundle(make("nop"), make("fnop")),
            make("rpt", "$m0", 0),  # at 0x28 -> a nop is inserted before it
            Bundle(make("nop"), make("fnop")),
        ],
    )
    p = layout([k], BASE)
    got = [(u.addr - BASE, u.text()) for u in p.units]
    assert got == [
        (0x00, "setzi $m0, 2"),
        (0x04, "rpt $m0, 1"),
        (0x08, "{ ld64 $a0:1, $m1, $m2, 0 ; fnop }"),
        (0x10, "{ nop ; f16v4add $a2:3, $a2:3, $a0:1 }"),
        (0x18, "setzi $m1, 1"),
        (0x1C, "rpt $m0, 0"),
        (0x20, "{ nop ; fnop }"),
        (0x28, "nop"),
        (0x2C, "rpt $m0, 0"),
        (0x30, "{ nop ; fnop }"),
    ]


def test_labels_resolve_to_word_and_byte_addresses():
    k = Kernel("w", False, [Label("top"), make("setzi", "$m0", "top"), make("brnzdec", "$m1", "top")])
    p = layout([Kernel("s", True, [make("nop")]), k], BASE)
    top = p.labels["top"]
    assert top == BASE + 8  # kernels are 8-byte aligned
    assert p.units[1].text() == "nop"  # pads the supervisor kernel so the next one starts 8-aligned
    assert p.units[2].instrs[0].ops == (0, top) and p.units[2].instrs[0].form.key == "setzi_ml"
    assert p.units[3].instrs[0].ops == (1, top // 4)
    with pytest.raises(OperandError, match="undefined label 'nowhere'"):
        layout([Kernel("w", False, [make("bri", "nowhere")])], BASE)
    with pytest.raises(OperandError, match="label 'w' defined twice"):
        layout([Kernel("w", False, [Label("w")])], BASE)


def test_text_syntax_errors_name_the_line():
    with pytest.raises(AsmSyntaxError, match="line 3"):
        parse_kernels(".globl w\nw:\n    add $m0, $m1, 99999\n")
    with pytest.raises(AsmSyntaxError, match="line 2"):
        parse_kernels(".globl w\n    add $m0 $m1\n")
    with pytest.raises(AsmSyntaxError, match="must issue on the MAIN pipeline"):
        parse_kernels(".globl w\nw:\n { f16v4add $a0:1, $a0:1, $a0:1 ; nop }\n")


def test_text_accepts_aliases_comments_and_names():
    ks = parse_kernels(
        """
        .section .text.w
        .globl w
        .type w, @function
        .worker
        w:                       # a comment
            add $m0, $mzero, 0x10    // another
            st64 $azeros, $sp, $lr, 0b11
            sync_is_not_here:
        """
    )
    items = ks[0].items
    assert items[0].ops == (0, 15, 16)
    assert items[1].ops == (14, 11, 10, 3)
    assert items[2] == Label("sync_is_not_here")


def test_encoding_rejects_bad_words():
    with pytest.raises(EncodingError, match="illegal opcode"):
        decode_instr((0x7F << 24) | (0xFF << 16))
    with pytest.raises(EncodingError, match="unresolved"):
        encode_instr(make("bri", "somewhere"))
    nop = encode_instr(make("nop"))
    with pytest.raises(EncodingError, match="unused operand bits"):
        decode_instr(nop | 1)


def test_encoding_doc_is_in_sync_with_the_table():
    from pathlib import Path

    from ipu.backend.encoding import encoding_table_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "asm-encoding.md").read_text()
    assert encoding_table_markdown() in doc
    assert "project's own" in doc


def test_ipu_asm_target_output_parses_back_to_the_same_module():
    import io

    from xdsl.context import Context

    from ipu.backend.asm_target import IpuAsmTarget
    from ipu.backend.asm_text import parse_to_module
    from ipu.dialects.asm import kernels_to_module, module_to_kernels

    kernels = all_forms_kernels()
    module = kernels_to_module(kernels)
    module.verify()
    out = io.StringIO()
    IpuAsmTarget().emit(Context(), module, out)
    back = parse_to_module(out.getvalue())
    back.verify()
    assert module_to_kernels(back) == kernels
    laid = io.StringIO()
    IpuAsmTarget(layout=True).emit(Context(), module, laid)
    assert parse_program(laid.getvalue(), BASE).same_code(layout(kernels, BASE))


def test_extended_opcodes_round_trip():
    """Forms past index 126 use primary opcode 127 and an 8-bit extended opcode with a 16-bit payload."""
    from ipu.backend import encoding

    form = isa.InstrForm("x_test", "x", isa._ops("d:m! s:m imm:zimm8"), isa.Slot.MAIN, Ctx.BOTH, "alu")
    object.__setattr__(form, "opcode", 130)
    layout_ = encoding._layout_of(form)
    assert sum(w for _, w, _ in layout_) == 16
    encoding._LAYOUTS.extend([None] * (131 - len(encoding._LAYOUTS)))
    saved = list(isa.FORMS)
    try:
        encoding._LAYOUTS[130] = layout_
        while len(isa.FORMS) < 131:
            isa.FORMS.append(form)
        isa.FORMS[130] = form
        word = encode_instr(Instr(form, (3, 4, 200)))
        assert word >> 24 == 127 and (word >> 16) & 0xFF == 3
        assert decode_instr(word)[0] == Instr(form, (3, 4, 200))
    finally:
        isa.FORMS[:] = saved
        del encoding._LAYOUTS[len(saved) :]
    too_big = isa.InstrForm("y_test", "y", isa._ops("d:m! imm:zimm20"), isa.Slot.MAIN, Ctx.BOTH, "alu")
    object.__setattr__(too_big, "opcode", 200)
    with pytest.raises(AssertionError, match="more than 16"):
        encoding._layout_of(too_big)
