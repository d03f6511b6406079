"""The README's commands run as written (from a fresh directory, with the recipes the README gives for their
inputs), each checked for its exit status and the files it says it writes. Left out: `make setup run` (the
checkout's own setup) and `--per-op` (an unrolled build; tests/unit/test_per_op.py covers it)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SKIP = ("make ", "--per-op")


def commands(section: str) -> list[str]:
    """The shell lines of the ```sh blocks of a README section, comments and skipped lines dropped."""
    text = (ROOT / "README.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.split(r"\s+# ", line)[0].strip()
            if line and not line.startswith("#") and not any(s in line for s in SKIP):
                out.append(line)
    return out


def run(lines: list[str], cwd: Path, after=None) -> list[str]:
    """Runs each line with bash in cwd; `after(i, line)` after each."""
    outputs = []
    for i, line in enumerate(lines):
        cmd = line.replace(".venv/bin/", f"{BIN}/")
        p = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True)
        assert p.returncode == 0, f"README command failed: {line}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        outputs.append(p.stdout)
        if after is not None:
            after(i, line)
    return outputs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("readme")


def test_running_models(workdir):
    lines = commands("Running models")
    assert any("--save-outputs" in line for line in lines) and any("--memory-map" in line for line in lines)
    out = run(lines, workdir)
    assert "cosine" in out[0]
    for path in ("tiny.ipupkg", "ckpt/config.json", "x.npy", "out/pooler_output.npy", "prof/profile.html",
                 "prof/profile.trace.json", "map/placement.html"):  # fmt: skip
        assert (workdir / path).is_file(), path


def test_using_ipu_opt(workdir):
    lines = commands("Using `ipu-opt`")
    assert lines[0].startswith(".venv/bin/ipu-run --model siglip-tiny --emit-nn model.mlir")
    packages = []  # a.ipupkg as each command writing it left it: from nn IR, from placed IR, from the asm.program

    def after(i, line):
        if "-o a.ipupkg" in line:
            packages.append((workdir / "a.ipupkg").read_bytes())

    out = run(lines, workdir, after)
    assert len(packages) == 3 and packages[0] == packages[1] == packages[2]  # "(the same bytes)"
    assert "asm.program @main" in (workdir / "program.mlir").read_text()
    assert (workdir / "edited.ipupkg").is_file()
    assert any("main:" in o for o in out)  # -t ipu-asm printed the supervisor program
