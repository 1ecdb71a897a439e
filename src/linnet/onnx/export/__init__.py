"""The ONNX exporter: Core IR functions to ONNX models (opset 20), their text form and files."""
