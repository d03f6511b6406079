"""Static reports a person opens from disk: the memory map (`placement`) and the cycle profile (`profile`: planning
estimates; `profile_sim`: measured on the simulator).

Each report is a JSON file (the data, stable enough for scripts and tests) and a self-contained HTML file (inline
JS/CSS, the JSON embedded, no server and no network) that renders only what is in view, so the full 1472-tile
So400m reports stay responsive. `docs/reports.md` describes the formats and the viewers.
"""

from ipu.runtime.reports.placement import (
    PlacementModel,
    model_from_function,
    model_from_problem,
    placement_json,
    write_placement_report,
)
from ipu.runtime.reports.profile import profile_from_function, write_profile_report
from ipu.runtime.reports.profile_sim import profile_from_run, profile_from_trace

__all__ = [
    "PlacementModel",
    "model_from_function",
    "model_from_problem",
    "placement_json",
    "write_placement_report",
    "profile_from_function",
    "profile_from_run",
    "profile_from_trace",
    "write_profile_report",
]
