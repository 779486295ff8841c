"""Evaluation: the uniform MTEB harness. (GLUE, which fine-tunes, is a job of its own: `neoembed.glue`.)

`models` loads any embedder under one protocol, `model_meta` reads the mteb ModelMeta an export
carries, `local_tasks` builds offline WordNet and FOLDOC tasks (from `wordnet_sets`, which needs no mteb), `tasks` selects tasks, `runner` runs them
resumably, `significance` tests paired differences between models, `summary` aggregates the results, and
`benchmark_texts` collects a benchmark's evaluation texts for the data build's leakage guard. mteb is
imported through `neoembed.mteb_setup`, which points its result cache under neoembed's cache first.
"""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from .benchmark_texts import benchmark_texts as benchmark_texts
    from .local_tasks import (
        LOCAL_BENCHMARK_TASKS as LOCAL_BENCHMARK_TASKS,
        LOCAL_TASKS as LOCAL_TASKS,
        your_task as your_task,
    )
    from .model_meta import (
        META_FILE as META_FILE,
        read_model_meta as read_model_meta,
    )
    from .models import (
        EvalSettings as EvalSettings,
        load_model as load_model,
        resolve_model as resolve_model,
    )
    from .runner import (
        resolve_models as resolve_models,
        run_evaluation as run_evaluation,
        saved_row_inputs as saved_row_inputs,
    )
    from .settings import MtebEvalSettings as MtebEvalSettings
    from .significance import (
        Difference as Difference,
        RowInput as RowInput,
        compare_pair as compare_pair,
        mean_of as mean_of,
    )
    from .summary import to_markdown as to_markdown
    from .tasks import (
        LOCAL_BENCHMARK as LOCAL_BENCHMARK,
        select_tasks as select_tasks,
        task_types as task_types,
        use_local_datasets as use_local_datasets,
    )
    from .wordnet_sets import (
        heldout_synsets as heldout_synsets,
        wordnet_example_retrieval as wordnet_example_retrieval,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
