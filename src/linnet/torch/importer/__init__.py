"""The torch importer: a `torch.nn.Module` back to checked, readable Linnet (`export_linnet`).

`capture` runs `torch.export` and folds constant subgraphs, `aten` maps the
ATen graph onto the importer graph's (ONNX) vocabulary, and `api` hands it to
the importers' shared back half (`linnet.sourcegen.finish`).
"""
