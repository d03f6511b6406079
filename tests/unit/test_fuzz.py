"""The seeded fuzzer (issue 24, `ipu.tools.fuzz`), a few cases of every input class: no traceback, no hang, no
mutant accepted that is unusable by construction. The long run is `python -m bench.bench_fuzz`."""

from collections import Counter

import pytest

from ipu.tools import fuzz

COUNTS = {
    "lit": 40,
    "ir-nn": 14,
    "ir-exchange": 16,
    "ir-memory": 12,
    "options": 24,
    "report": 5,
    "checkpoint": 24,
    "config": 16,
    "input": 8,
    "package": 8,
    "flags": 10,
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return list(fuzz.run(24, COUNTS, tmp_path_factory.mktemp("fuzz")))


def test_every_class_ran(outcomes):
    ran = Counter(cls for cls, *_ in outcomes)
    assert ran == Counter(COUNTS)


@pytest.mark.parametrize("cls", sorted(COUNTS))
def test_no_traceback_hang_or_wrong(outcomes, cls):
    bad = [
        (case.what, outcome, err)
        for c, case, outcome, err in outcomes
        if c == cls and outcome in ("traceback", "hang", "wrong")
    ]
    assert not bad, bad


def test_mutants_are_mostly_refused_cleanly(outcomes):
    # The mutators make real damage: most cases end in a clean error (a fuzzer whose mutants all pass tests nothing).
    kinds = Counter(outcome for _, _, outcome, _ in outcomes)
    assert kinds["clean"] > kinds["accepted"], kinds


def test_the_judge_catches_an_accepted_must_refuse_case(tmp_path):
    good = tmp_path / "ok.mlir"
    good.write_text("func.func @f() {\n  func.return\n}\n")
    case = fuzz.Case("ipu-opt", [str(good)], must_refuse=True)
    kind, rc, out, err = fuzz.call(case.tool, case.argv)
    assert (kind, rc) == ("accepted", 0)
    assert fuzz.judge(case, kind, out) == "wrong"
    assert fuzz.judge(fuzz.Case("ipu-opt", [str(good)], check_roundtrip=True), kind, out) == "accepted"


def test_call_classifies_an_escaping_exception_as_traceback(monkeypatch):
    def boom(argv):
        raise TypeError("boom")

    monkeypatch.setattr(fuzz, "_mains", lambda: {"x": boom})
    kind, rc, out, err = fuzz.call("x", [])
    assert kind == "traceback" and "TypeError: boom" in err


def test_call_leaves_no_cached_tables_behind(tmp_path):
    # The harness runs thousands of hostile inputs in one process: the layout-table caches must not keep what a
    # refused input built (the long runs grew until the OOM killer ended them).
    from ipu.dialects import tile as tl

    p = tmp_path / "l.mlir"
    p.write_text(
        '%0 = "test.op"() {tile.layout = #tile.layout<shape = [16, 65536], block = [1, 1], replicas = 1, '
        'tiles = #tile.affine<0, 1, 0>, order = "row_major", dtype = f32>} : () -> tensor<16x65536xf32>\n'
    )
    kind, rc, out, err = fuzz.call("ipu-opt", [str(p), "--allow-unregistered-dialect"])
    assert kind == "clean" and "outside the target's tiles" in err, err
    assert tl._table.cache_info().currsize == 0 and tl._geometry.cache_info().currsize == 0
