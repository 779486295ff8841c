"""The README's main job: the toolkit end to end on the embedded default, as resumable steps."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .pipeline import (
        DEFAULT as DEFAULT,
        SMOKE as SMOKE,
        QuickstartSettings as QuickstartSettings,
        Sizes as Sizes,
        run_quickstart as run_quickstart,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
