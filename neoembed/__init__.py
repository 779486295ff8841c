"""neoembed: build text-embedding models around NeoBERT.

Importing the package registers NeoBERT (model_type `neobert`) with the transformers Auto classes, so
`AutoModel.from_pretrained(dir)` and `SentenceTransformer(dir)` load NeoBERT directories without remote code.
The registration waits for transformers' Auto modules to load, so importing neoembed imports neither torch nor
transformers (`neoembed --help` starts in a fraction of a second).
"""

from importlib.metadata import version as _version

from neoembed.pretrain.neobert import register_auto_classes_on_load as _register_auto_classes_on_load

__version__ = _version("neoembed")  # pyproject.toml's, the one place it is written

_register_auto_classes_on_load()
