"""The plan JSON (language.md section 19): a checked program as a language-neutral document.

`build_plan` and `plan_json` live in `linnet.plan.document`; the encoders of values,
bodies, compile-time values and expressions, and the optimiser, have a module each.
"""

from linnet.plan.document import PLAN_VERSION, build_plan, plan_file, plan_json

__all__ = ["PLAN_VERSION", "build_plan", "plan_file", "plan_json"]
