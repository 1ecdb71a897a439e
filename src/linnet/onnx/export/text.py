"""The ONNX text form of an exported model (what `linnet onnx` prints).

Stage: after export. In: a `ModelProto`; out: text in the syntax of
`onnx.printer` / `onnx.parser` (the "ONNX textual syntax"), and back.

`onnx.printer.to_text` writes what the exporter produces in a form that
`onnx.parser.parse_model` reads back to an equal model, except for what the
printer leaves out: doc strings and node names are not printed, and a
constant's elements are printed in full. The exporter sets neither doc
strings nor node names; `model_to_text` refuses a model whose text would not
read back (one tensor stored outside the message, `external_data`, has no
text form), so a printed model is always a parseable one. The round trip is
tested on every construct the exporter emits (Loop and If bodies, metadata,
initializers, every dtype's constants).
"""

from __future__ import annotations

import onnx
import onnx.parser
import onnx.printer

from linnet.errors import LinnetError


def model_to_text(model: onnx.ModelProto) -> str:
    """The text form of `model`; ends with a newline."""
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise LinnetError(
                f"initializer `{tensor.name}` is stored in an external file and has no text "
                "form; print the model without weights"
            )
    text = onnx.printer.to_text(model)
    return text if text.endswith("\n") else text + "\n"


def model_from_text(text: str) -> onnx.ModelProto:
    """Parse the text form back into a `ModelProto` (a `LinnetError` names the problem)."""
    try:
        return onnx.parser.parse_model(text)
    except onnx.parser.ParseError as exc:
        raise LinnetError(f"the ONNX text does not parse: {exc}") from None
