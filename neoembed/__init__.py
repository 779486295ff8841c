"""neoembed: build text-embedding models around NeoBERT.

Importing the package registers NeoBERT (model_type `neobert`) with the transformers Auto classes, so
`AutoModel.from_pretrained(dir)` and `SentenceTransformer(dir)` load NeoBERT directories without remote code.
"""

__version__ = "0.1.0"

from neoembed.pretrain.neobert import register_auto_classes as _register_auto_classes

_register_auto_classes()
