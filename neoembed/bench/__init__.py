"""Throughput and quality benchmarks behind `neoembed bench`: one module per bench, each with `run(settings)`
over its settings in `settings`."""

from typing import TYPE_CHECKING

from neoembed.faces import attach_face

if TYPE_CHECKING:  # the public names, written once; attach_face loads each on first use
    from . import (
        adapt as adapt,
        backends as backends,
        build_data as build_data,
        contrastive as contrastive,
        contrastive_speed as contrastive_speed,
        encode as encode,
        index as index,
        mteb as mteb,
        pretrain as pretrain,
        scale as scale,
        serve as serve,
    )
    from .mfu import Mfu as Mfu
    from .report import (
        Report as Report,
        Row as Row,
        Table as Table,
        WrittenReport as WrittenReport,
        markdown_table as markdown_table,
        write_report as write_report,
    )
    from .settings import (
        AdaptBench as AdaptBench,
        BuildDataBench as BuildDataBench,
        ContrastiveBench as ContrastiveBench,
        EncodeBench as EncodeBench,
        IndexBench as IndexBench,
        MtebBench as MtebBench,
        PretrainBench as PretrainBench,
        ScaleBench as ScaleBench,
        ServeBench as ServeBench,
    )

__getattr__, __dir__, __all__ = attach_face(__name__, __file__)
