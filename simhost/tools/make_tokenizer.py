"""Build the tiny offline tokenizer shipped in simhost/models/kimi-k2.5-sim/tokenizer/.

A WordLevel tokenizer over simhost's output words, split on whitespace: `transformers.AutoTokenizer` loads it
offline, and one word is one token on both sides (simhost counts whitespace-separated words as prompt tokens),
so `sglang.bench_serving --tokenizer simhost/models/kimi-k2.5-sim/tokenizer` counts what simhost counts. Needs
the `tokenizers` package (not a simhost dependency): `python simhost/tools/make_tokenizer.py` from a venv with it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parents[1] / "models" / "kimi-k2.5-sim"
OUT = MODEL / "tokenizer"  # a directory of its own: AutoTokenizer on the model dir would read config.json


def main() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    sys.path.insert(0, str(MODEL.parents[2]))  # the repo root
    from simhost.engine import WORDS

    specials = ["[UNK]", "[BOS]", "[EOS]"]
    vocab = {token: i for i, token in enumerate([*specials, *dict.fromkeys(WORDS)])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(specials)
    OUT.mkdir(exist_ok=True)
    tokenizer.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "[BOS]",
        "eos_token": "[EOS]",
        "unk_token": "[UNK]",
        "model_max_length": 262144,
        "clean_up_tokenization_spaces": False,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
