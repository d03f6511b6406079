"""lit configuration: `lit tests/` runs every FileCheck test of the project.

Tools (`ipu-opt`, `filecheck`) are taken from the directory of the running Python (the project's venv), then
from PATH.
"""

import os
import sys

import lit.formats

config.name = "ipu"  # noqa: F821 (lit injects `config`)
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".mlir", ".s"]  # noqa: F821
# The suite's root is the repository; tests live under tests/ (lit matches excludes by base name).
config.excludes = ["unit", "__pycache__", ".venv", ".git", "build", "bench", "docs", "Output"]  # noqa: F821

bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])  # noqa: F821
for var in ("HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]  # noqa: F821

# Round trips through the custom and the generic form, as xDSL's own tests do.
config.substitutions.append(  # noqa: F821
    ("%roundtrip-generic", "ipu-opt %s --split-input-file --print-op-generic | ipu-opt --split-input-file")
)
config.substitutions.append(("%roundtrip", "ipu-opt %s --split-input-file | ipu-opt --split-input-file"))  # noqa: F821
