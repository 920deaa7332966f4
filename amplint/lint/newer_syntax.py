"""Where a file uses syntax newer than the running interpreter: LibCST's view, for
`amplint.lint.syntax` to forgive what only an older parser rejects. Imported only then, so that a
syntax verdict does not import LibCST."""

from __future__ import annotations

import ast
import sys
import warnings
from typing import List, Tuple

import libcst as cst

# As amplint.lint.syntax has them; imported from there, this module would close an import cycle
# (amplint.lint.syntax imports this one only when it needs LibCST).
PythonVersion = Tuple[int, int]
RUNNING: PythonVersion = sys.version_info[:2]


class NewerSyntax(cst.CSTVisitor):
    """Rows of syntax newer than the running interpreter (up to `grammar`), and whether every
    plain string literal is one CPython accepts."""

    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self, grammar: PythonVersion) -> None:
        super().__init__()
        self.grammar = grammar
        self.rows: List[Tuple[int, int]] = []
        self.literals_valid = True

    def _newer(self, node: cst.CSTNode, since: PythonVersion) -> None:
        if RUNNING < since <= self.grammar:
            span = self.get_metadata(cst.metadata.PositionProvider, node)
            self.rows.append((span.start.line, span.end.line))

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        try:
            with warnings.catch_warnings():  # no SyntaxWarning for the user's invalid escapes
                warnings.simplefilter("ignore")
                ast.literal_eval(node.value)
        except (SyntaxError, ValueError):
            self.literals_valid = False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._newer(node, (3, 8))

    def visit_ParamSlash(self, node: cst.ParamSlash) -> None:
        self._newer(node, (3, 8))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self._newer(node, (3, 9))  # any expression as a decorator

    def visit_Match(self, node: cst.Match) -> None:
        self._newer(node, (3, 10))

    def visit_With(self, node: cst.With) -> None:
        if isinstance(node.lpar, cst.LeftParen):
            self._newer(node, (3, 10))

    def visit_TryStar(self, node: cst.TryStar) -> None:
        self._newer(node, (3, 11))

    def visit_Index(self, node: cst.Index) -> None:
        if node.star:
            self._newer(node, (3, 11))

    def visit_TypeAlias(self, node: cst.TypeAlias) -> None:
        self._newer(node, (3, 12))

    def visit_TypeParameters(self, node: cst.TypeParameters) -> None:
        self._newer(node, (3, 12))
        if any(param.default is not None for param in node.params):
            self._newer(node, (3, 13))

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        self._newer(node, (3, 12))  # PEP 701: quotes, backslashes and comments inside

    def visit_TemplatedString(self, node: cst.TemplatedString) -> None:
        self._newer(node, (3, 14))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if isinstance(node.type, cst.Tuple) and not node.type.lpar:
            self._newer(node, (3, 14))  # PEP 758: `except A, B:`
