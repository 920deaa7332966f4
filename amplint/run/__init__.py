"""Running amplint over files: which files (discovery, git's ignore rules), how they are read
(source, notebooks), which process lints which file within what budget (driver), what the
cache already knows, progress, and writing fixed files back.
"""
