"""Write a user's pairs file from GCIDE: headword -> its definition, as JSON lines with sentence-transformers'
column names (`anchor`, `positive`).

The held-out domain of docs/benchmarks/your-data.md, chosen before any score was seen: the GNU Collaborative
International Dictionary of English (Debian's dict-gcide: Webster's 1913 with later additions), general
English of a century ago, a source no neoembed code reads. It stands for what a user brings to `neoembed
contrastive --data.path FILE`: a glossary of their own field, a term a line and what it means.

    python scripts/gcide_pairs.py gcide.jsonl            # 6,000 entries, a fixed random sample (seed 0)

An entry's text is `Headword \\pron\\, pos. [etymology] (Domain)`, the definition on the lines below it, then
its source in brackets (`[1913 Webster]`). The anchor is the headword; the positive is the definition with the
bracketed sources and cross-reference braces removed, cut to 64 words; entries of fewer than 6 words (mostly
"See X.") are left out, and a headword is taken once.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

from neoembed.data import dictd

SOURCE = re.compile(r"\[[^\]]*\]")  # [1913 Webster], [Webster 1913 Suppl.], [etymology]
HEADWORD = re.compile(r"^(.+?)\s*\\")  # the headword, up to its pronunciation


def pairs(texts: list[str]) -> list[dict[str, str]]:
    found: dict[str, str] = {}
    for text in texts:
        # Brackets first: an etymology opened on the headword line may close on a line below it.
        first, _, body = SOURCE.sub(" ", text).partition("\n")
        headword = HEADWORD.match(first)
        if headword is None:
            continue
        definition = " ".join(body.replace("{", "").replace("}", "").split()[: dictd.MAX_WORDS])
        anchor = headword.group(1).strip()
        if len(definition.split()) >= dictd.MIN_WORDS and anchor.casefold() not in found:
            found[anchor.casefold()] = json.dumps({"anchor": anchor, "positive": definition})
    return [json.loads(row) for row in found.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    directory = dictd.database_dir("dict-gcide", "gcide", "NEOEMBED_GCIDE_DIR")
    rows = pairs(dictd.entry_texts(directory, "gcide"))
    sample = random.Random(args.seed).sample(rows, min(args.rows, len(rows)))
    args.out.write_text("".join(json.dumps(row) + "\n" for row in sample), encoding="utf-8")
    print(f"{args.out}: {len(sample):,} pairs of {len(rows):,} GCIDE entries with a definition")


if __name__ == "__main__":
    main()
