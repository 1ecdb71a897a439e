"""Importers' shared back half: importer graph -> recovered patterns -> Linnet source.

Framework-neutral (no onnx, torch or jax imports): the ONNX importer uses it
today, the torch.export and JAX importers will reuse it (architecture.md
"Importers"). The importer graph's operator vocabulary is ONNX's (domain
`""`); other importers map their operators onto it.

In pipeline order:

- `graph`: the importer graph (`Graph`, `Node`, `TensorInfo`).
- `patterns`: pattern recovery (RMS norm, SiLU, GELU, softmax, attention,
  rotary embeddings) into `linnet` domain nodes, with the chain kept as a
  fallback.
- `layout`: blocks and sub arrays from dotted parameter names.
- `translate`: the translator interface (`Context`, `Registry`,
  `Unsupported`, `Value`) and the driver; `fold` folds shape subgraphs to
  dimension expressions; `build` builds syntax trees; `names` makes
  identifiers.
- `outline`: identical layers become a method and a `static for`.
- `module`: the file (blocks, entry, `where` facts), formatted.
- `weights`: SafeTensors written by copying file ranges.

Named `sourcegen` rather than `source` because `linnet.source` is the module
holding `SourceFile` and `Span`, and a package of that name would shadow it.
"""
