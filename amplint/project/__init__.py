"""What spans the files of a project: which linted file an import names, what packages
re-export, and linting files with the summaries of the modules they import.
"""
