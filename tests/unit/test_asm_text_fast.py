"""The assembly parser's fast path reads exactly what the lark grammar reads, or hands the text to the grammar.

`asm_text._fast_items` reads the text this project writes with a regex per item; the grammar (`_grammar_items`)
stays the definition. On the kernel library and on random texts mixing the project's form with the grammar's
corner cases (comments, `;` separators, bundles, directives whose arguments hold `//`, labels glued to
instructions, CR line ends), the fast path either gives the grammar's items or declines.
"""

import random

import pytest

from ipu.backend import asm_text
from ipu.backend.asm_text import AsmSyntaxError, _fast_items, _grammar_items, _NotCanonical, parse_kernels
from ipu.backend.lower.program import library_text
from ipu.passes.tile_plan import target_for


def _agree(text: str) -> str:
    """'fast' when the fast path read the text as the grammar does, 'declined' when it left it to the grammar."""
    try:
        grammar = _grammar_items(text)
    except AsmSyntaxError:
        grammar = None
    try:
        fast = _fast_items(text)
    except _NotCanonical:
        return "declined"
    assert grammar is not None, f"the fast path read text the grammar refuses:\n{text}"
    assert fast == grammar, f"the fast path read differently:\n{text}"
    return "fast"


@pytest.mark.parametrize(
    "tiles, library",
    [(4, {}), (1472, {"gemm": ["f16", "fp8"], "ksum": [[2, 1, 0]], "panels_gap_f16": [4, 8]})],
)
def test_the_kernel_library_is_read_by_the_fast_path_as_by_the_grammar(tiles, library):
    text = library_text(target_for(tiles, 624), library)
    assert _agree(text) == "fast"


_PIECES = [
    ".globl k{n}",
    ".global k{n}",
    ".supervisor",
    ".worker",
    ".align 8",
    ".type k{n}, @function",
    ".section .text.k{n}",
    ".align 8 // eight",
    ".align 8 # eight",
    ".globl k{n} ; .worker",
    ".globlk{n}",
    ".Lloop{n}:",
    "k{n}:",
    "k{n}: nop",
    "k{n}:nop",
    "add:$m0",
    "setzi $m0, 0x4C000",
    "setzi $m0,0x4C000",
    "add $m1, $m1, -4",
    "add$m1, $m1, 4",
    "ld64step $a0:1, $m0, $m1+=, 1",
    "ld64step $a0:1, $m0, $m1 +=, 1",
    "brnzdec $m2, .Lloop{n}",
    "br $lr",
    "nop",
    "NOP",
    "add $m0,, $m1",
    "add $m0, $m1,",
    "{ ld64step $a0:1, $m0, $m1+=, 1 ; f16v4add $a2:3, $a2:3, $a0:1 }",
    "{ nop ;; fnop }",
    "{ nop ; fnop ; nop }",
    "{nop;fnop}",
    "{ nop",
    "fnop }",
    "}",
    "nop ; fnop",
    "nop ; ; br $lr",
    "nop # a comment",
    "nop // a comment",
    "// only a comment",
    "# only a comment",
    "",
    "   ",
    "\t",
    "nop\r",
    "ld32 $m0, $m1, $mzero, 0 ; add $m0, $m0, 1",
]


@pytest.mark.parametrize("seed", range(6))
def test_random_texts_read_alike_or_declined(seed):
    rng = random.Random(seed)
    outcomes = {"fast": 0, "declined": 0}
    for _ in range(300):
        lines = [
            rng.choice(_PIECES).replace("{n}", str(rng.randrange(3))) for _ in range(rng.randrange(1, 9))
        ]
        indent = [rng.choice(["", "    ", "\t", " "]) for _ in lines]
        outcomes[_agree("\n".join(i + line for i, line in zip(indent, lines)))] += 1
    # Both paths are exercised by every seed.
    assert outcomes["fast"] > 20 and outcomes["declined"] > 20, outcomes


def test_declined_text_keeps_the_grammars_diagnostic():
    with pytest.raises(AsmSyntaxError, match=r"line 3, column \d+: syntax error"):
        parse_kernels(".globl k\nk:\n    add $m0,, $m1\n")
    with pytest.raises(AsmSyntaxError, match=r"line 2: add: expected"):
        parse_kernels(".globl k\n  add $m0\n")


def test_an_instruction_is_selected_once_and_shared(monkeypatch):
    asm_text._select_form.cache_clear()
    text = ".globl k\n.worker\nk:\n" + "    add $m0, $m0, 1\n" * 50 + "    br $m10\n"
    kernels = parse_kernels(text)
    assert asm_text._select_form.cache_info().misses == 2
    assert all(it is kernels[0].items[0] for it in kernels[0].items[:50])
