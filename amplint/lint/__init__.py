"""Linting one file: the pre-check (catalogue, evidence), the syntax verdict, one LibCST parse,
the semantic model, every rule (`Rule`), `# noqa`, positions, and fixes.
"""
