"""Export an index directory's ids, texts, metadata and vectors to parquet for a vector database to ingest.

One row per document: `id` (string), `text` (string), `metadata` (JSON string), `vector`
(fixed-size list of float32). The manifest travels in the file's schema metadata under `neoembed.manifest`.
Milvus bulk-inserts such files directly; Qdrant and others read them with their clients (docs/index.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from neoembed.index.manifest import STORE_FILE, VECTORS_FILE, Manifest
from neoembed.index.settings import ExportSettings
from neoembed.index.store import DocStore
from neoembed.vector_file import read_vectors

BATCH = 50_000


def export_index(
    index_dir: str | Path, out: str | Path, settings: ExportSettings | None = None, /, **fields
) -> Path:
    """Write every document of the index at `index_dir` to `out` and return its path; `settings` or
    `fields` as in `ExportSettings` (parquet is the one format so far, and the one this function writes)."""
    ExportSettings.of(settings, **fields)  # checks the format before any work
    directory, out = Path(index_dir), Path(out)
    manifest = Manifest.load(directory)
    manifest.verify(directory)
    vectors = read_vectors(directory / VECTORS_FILE, manifest.dimension, manifest.ntotal)
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("text", pa.string()),
            ("metadata", pa.string()),
            ("vector", pa.list_(pa.float32(), manifest.dimension)),
        ],
        metadata={"neoembed.manifest": manifest.model_dump_json()},
    )
    store = DocStore(directory / STORE_FILE, readonly=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    written = 0
    with (
        pq.ParquetWriter(tmp, schema) as writer,
        tqdm(total=manifest.ntotal, unit="doc", desc="exporting") as bar,
    ):
        for docs in store.iter_batches(BATCH):
            docs = docs[: manifest.ntotal - written]  # rows past the manifest belong to an unfinished add
            if not docs:
                break
            flat = pa.array(vectors[written : written + len(docs)].reshape(-1), type=pa.float32())
            writer.write_table(
                pa.table(
                    {
                        "id": [d.id for d in docs],
                        "text": [d.text for d in docs],
                        "metadata": [json.dumps(d.metadata) for d in docs],
                        "vector": pa.FixedSizeListArray.from_arrays(flat, manifest.dimension),
                    },
                    schema=schema,
                )
            )
            written += len(docs)
            bar.update(len(docs))
    store.close()
    tmp.replace(out)
    return out
