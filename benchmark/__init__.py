"""emergence-bench: when does a token mixer discover a sparse attention pattern?"""

__version__ = "0.1.0"
