"""The README's main job: the toolkit end to end on the embedded default, as resumable steps."""

from neoembed.quickstart.pipeline import DEFAULT, SMOKE, QuickstartSettings, Sizes, run_quickstart

__all__ = ["DEFAULT", "SMOKE", "QuickstartSettings", "Sizes", "run_quickstart"]
