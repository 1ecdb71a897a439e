"""Syntax: tokens, lexer, AST, parser and formatter (sections 2, 3 and 17)."""
