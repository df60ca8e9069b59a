"""bench_serving's random-ids prompts as a prompts file for specdash's benchmark client:
`VENV/bin/python simhost/tools/bench_serving_random_ids.py TOKENIZER SEED COUNT LENGTH > prompts.jsonl`.

The very prompts `bench_serving --dataset-name random-ids --random-range-ratio 1.0 --random-input-len LENGTH
--random-output-len LENGTH --num-prompts COUNT --seed SEED` sends: drawn by its own sampler, seeded as its main()
seeds it, as the text it sends (the decoded ids). Each line is also a prompt set's item (`"prompt"`), so the file
uploads as one. With these prompts both clients ask the server for the same work, which their own random ids do
not (workers/benchclient draws ids uniformly and sends them as ids; bench_serving sends the text of consecutive ids
from a random offset), and a speculative server accepts drafts by prompt. Runs on the venv's Python (numpy,
transformers, sglang), never the project's.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys


def main() -> None:
    import numpy as np
    from transformers import AutoTokenizer

    try:
        from sglang.benchmark.datasets.random import sample_random_requests
    except ImportError:  # before the client moved to sglang.benchmark (0.5.9)
        from sglang.bench_serving import sample_random_requests

    tokenizer, seed, count, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    random.seed(seed)
    np.random.seed(seed)
    with contextlib.redirect_stdout(sys.stderr):  # the sampler prints its token totals; stdout is the file
        rows = sample_random_requests(
            input_len=length,
            output_len=length,
            num_prompts=count,
            range_ratio=1.0,
            tokenizer=AutoTokenizer.from_pretrained(tokenizer),
            dataset_path="",
            random_sample=False,
            return_text=True,
        )
    for index, row in enumerate(rows):
        item = {
            "index": index,
            "text": row.prompt,
            "prompt": row.prompt,  # the same file uploads as a prompt set (experiments/formats/prompt_sampling.py)
            "category": "random-ids",
            "input_len": int(row.prompt_len),
            "output_len": int(row.output_len),
        }
        print(json.dumps(item))


if __name__ == "__main__":
    main()
