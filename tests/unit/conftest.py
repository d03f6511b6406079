"""pytest configuration of the unit tests."""

import os

# `ipu-run --threads auto` takes one simulator thread per idle core: in the test processes one thread, so that the
# parallel kernels compile and run only where a test asks for them (tests/unit/test_sim_threads.py). The bits do
# not depend on it.
os.environ.setdefault("IPU_SIM_THREADS", "1")
