"""The ONNX Runtime side: `load_model` / `OnnxModel`, sessions, state kept on the device."""
