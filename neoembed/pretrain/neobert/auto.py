"""Registration of NeoBERT with the transformers Auto classes (run on `import neoembed`).

Registering needs NeoBERT's classes, so torch and transformers (seconds to import); `import neoembed` should
not pay that where nothing loads a model (`neoembed --help`). `register_auto_classes_on_load` therefore
registers each Auto mapping when transformers loads the module that defines it, or at once where it already
has: whoever can reach `AutoConfig`/`AutoModel` finds `model_type: neobert` there.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable

CONFIG_AUTO = "transformers.models.auto.configuration_auto"  # defines AutoConfig
MODELING_AUTO = "transformers.models.auto.modeling_auto"  # defines AutoModel and AutoModelFor*


def register_config() -> None:
    from transformers import AutoConfig

    from .config import NeoBERTConfig

    AutoConfig.register("neobert", NeoBERTConfig, exist_ok=True)


def register_models() -> None:
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

    from .config import NeoBERTConfig
    from .modeling import NeoBERTForMaskedLM, NeoBERTForSequenceClassification, NeoBERTModel

    AutoModel.register(NeoBERTConfig, NeoBERTModel, exist_ok=True)
    AutoModelForMaskedLM.register(NeoBERTConfig, NeoBERTForMaskedLM, exist_ok=True)
    AutoModelForSequenceClassification.register(
        NeoBERTConfig, NeoBERTForSequenceClassification, exist_ok=True
    )


def register_auto_classes() -> None:
    """Make `model_type: neobert` loadable by AutoConfig/AutoModel/AutoModelFor{MaskedLM,SequenceClassification}
    (and so by sentence-transformers' Transformer module) without remote code, now. Idempotent."""
    register_config()
    register_models()


def register_auto_classes_on_load() -> None:
    """`register_auto_classes`, each half once transformers has loaded the Auto module it registers with and
    no NeoBERT module it imports is half-executed (NeoBERT's own modules import transformers' Auto modules)."""
    config, modeling = f"{__package__}.config", f"{__package__}.modeling"
    _Registration(register_config, CONFIG_AUTO, (config,)).arm()
    _Registration(register_models, MODELING_AUTO, (config, modeling)).arm()


_EXECUTING: set[str] = set()  # modules whose code a _ThenLoader is running now


class _Registration:
    """Runs `register` when `auto_module` is loaded and none of `own_modules` is executing; `register`
    imports those itself where they are not loaded yet."""

    def __init__(self, register: Callable[[], None], auto_module: str, own_modules: tuple[str, ...]):
        self.register, self.auto_module, self.own_modules = register, auto_module, own_modules

    def arm(self) -> None:
        for module in (self.auto_module, *self.own_modules):
            if module not in sys.modules:
                sys.meta_path.insert(0, _AfterLoad(module, self.try_register))
        self.try_register()

    def try_register(self) -> None:
        loaded = self.auto_module in sys.modules
        if loaded and not _EXECUTING & {self.auto_module, *self.own_modules}:
            self.register()


class _AfterLoad(importlib.abc.MetaPathFinder):
    """Finds `module` as the other finders would, and calls `then` once its code has run."""

    def __init__(self, module: str, then: Callable[[], None]):
        self.module, self.then = module, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)  # one module, once; and the search below must not find this finder
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, then: Callable[[], None]):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        _EXECUTING.add(module.__name__)
        try:
            self.loader.exec_module(module)
        finally:
            _EXECUTING.discard(module.__name__)
        self.then()

    def __getattr__(self, name):  # resource readers and the like: the wrapped loader's
        return getattr(self.loader, name)
