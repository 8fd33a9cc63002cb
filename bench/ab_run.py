"""One AR / SD / SSD run each on the deep pair (batch 1, T = 0, 4 prompts x 96 tokens): the unit that
bench/ab_versions.sh alternates between two checkouts (run from the checkout under test). Prints
{mode: tokens/s} as JSON. Uses only the public API both old and new checkouts have."""

import json
import sys

sys.path.insert(0, ".")

from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

TARGET, DRAFT = "saguaro_exec/assets/tiny/target-deep", "saguaro_exec/assets/tiny/draft"
SPECS = {"ar": SpecConfig(mode="ar", k=0, budget=0), "sd": SpecConfig(mode="sd", k=4),
         "ssd": SpecConfig(mode="ssd", k=3, fanout=(5, 4, 3, 2), budget=None)}
PROMPTS = ["The quick brown fox jumps over", "In the beginning the", "import numpy as np\n", "Once upon a time"]

if __name__ == "__main__":
    out = {m: run(RunConfig(spec=s, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=96,
                            threads=1)).tokens_per_s for m, s in SPECS.items()}
    print(json.dumps(out))
