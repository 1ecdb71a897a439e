"""The ONNX importer: an ONNX graph back to checked, formatted Linnet source (`import_onnx`)."""
