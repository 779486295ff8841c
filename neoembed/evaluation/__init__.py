"""Evaluation: the uniform MTEB harness (the modules here) and the GLUE fine-tuning harness (`glue/`).

MTEB: `models` loads any embedder under one protocol, `model_meta` reads the mteb ModelMeta an export
carries, `local_tasks` builds offline WordNet and FOLDOC tasks (from `wordnet_sets`, which needs no mteb), `tasks` selects tasks, `runner` runs them
resumably, `significance` tests paired differences between models, `summary` aggregates the results, and
`benchmark_texts` collects a benchmark's evaluation texts for the data build's leakage guard. mteb is
imported through `neoembed.mteb_setup`, which points its result cache under neoembed's cache first.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "benchmark_texts": ["benchmark_texts"],
        "local_tasks": ["LOCAL_TASKS"],
        "model_meta": ["META_FILE", "read_model_meta"],
        "models": ["EvalSettings", "load_model", "resolve_model"],
        "runner": ["resolve_models", "run_evaluation", "saved_row_inputs"],
        "significance": ["compare_pair", "mean_of"],
        "settings": ["MtebEvalSettings"],
        "summary": ["to_markdown"],
        "tasks": ["select_tasks", "task_types", "use_local_datasets"],
        "wordnet_sets": ["heldout_synsets", "wordnet_example_retrieval"],
    },
)
