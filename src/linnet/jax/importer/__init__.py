"""The JAX importer: StableHLO text or a JAX function back to checked, readable Linnet.

`mlir` reads the module with jaxlib's MLIR bindings, `walk` and `ops` map its
ops onto the importer graph's (ONNX) vocabulary, and `api` hands the graph to
the importers' shared back half (`linnet.sourcegen.finish`):
`import_stablehlo(text, params, output=...)` and
`export_linnet(fn, params, example_inputs, output=...)`.
"""
