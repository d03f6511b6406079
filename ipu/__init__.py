"""ipu: an xDSL compiler from Vision Transformers to the Graphcore IPU.

The Python API (`ipu.api`, imported on first use so that `import ipu.dialects` and the tools stay light):

    import ipu
    pkg = ipu.compile("siglip-tiny", tiles=16)      # a preset, a config, a config.json path or nn IR
    session = ipu.Session(pkg)                      # uploads the parameters once
    outputs = session.run(pixel_values)             # {"last_hidden_state": ..., "pooler_output": ...}

Subpackages map onto the repository's top-level folders:
``ipu.dialects`` (dialects/), ``ipu.passes`` (passes/), ``ipu.backend`` (backend/),
``ipu.runtime`` (runtime/), ``ipu.frontend`` (frontend/: builders, importer, reference
evaluator) and ``ipu.tools`` (tools/: the ``ipu-opt``, ``ipu-run`` and ``ipu-report`` drivers).
"""

__all__ = ["compile", "load", "Session", "target"]


def __getattr__(name: str):
    if name in __all__:
        from ipu import api

        return getattr(api, name)
    raise AttributeError(f"module 'ipu' has no attribute {name!r}")
