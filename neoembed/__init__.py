"""neoembed: build text-embedding models around NeoBERT."""

__version__ = "0.1.0"
