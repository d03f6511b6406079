"""ipu: an xDSL compiler from Vision Transformers to the Graphcore IPU.

Subpackages map onto the repository's top-level folders:
``ipu.dialects`` (dialects/), ``ipu.passes`` (passes/), ``ipu.backend`` (backend/),
``ipu.runtime`` (runtime/), ``ipu.frontend`` (frontend/: builders, importer, reference
evaluator) and ``ipu.tools`` (tools/: the ``ipu-opt`` and ``ipu-run`` drivers).
"""
