"""The bodies of the larger `linnet` commands (fmt, inspect, init); `cli.py` dispatches to them."""
