"""The README's main job: the toolkit end to end on the embedded default, as resumable steps."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={"pipeline": ["DEFAULT", "SMOKE", "QuickstartSettings", "Sizes", "run_quickstart"]},
)
