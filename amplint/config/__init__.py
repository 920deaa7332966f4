"""What applies to a run and to each file: the configuration files and the command line,
the rules selected, per-file ignores, the Python and torch the project targets.
"""
