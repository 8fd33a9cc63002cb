"""The shipped deep tiny target (12 layers) with the tiny draft: loadable, shaped as documented, small,
trained, and SD / SSD on it reproduce its own greedy output exactly."""

import math

import torch
import torch.nn.functional as F
from exec_helpers import plain_greedy

from saguaro_exec import RunConfig, run
from saguaro_exec.io.assets import tiny_deep_pair_paths, tiny_pair_paths
from saguaro_exec.io.tokenizer import BYTE_TOKENIZER_FILE, ByteTokenizer, load_tokenizer
from saguaro_exec.model import load_model
from saguaro_sim import SpecConfig

SNIPPET = '''
def _check_name(self, name):
    """Raise ValueError if *name* is not a valid identifier."""
    if not isinstance(name, str):
        raise TypeError(f"expected str, got {type(name).__name__}")
    for part in name.split("."):
        if not part.isidentifier():
            raise ValueError(f"invalid name: {name!r}")
    return name
'''


def test_deep_pair_shape_size_and_tokenizer():
    target_dir, draft_dir = tiny_deep_pair_paths()
    assert draft_dir == tiny_pair_paths()[1]  # the same draft as the shipped pair
    target, draft = load_model(target_dir), load_model(draft_dir)
    c = target.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads) == (12, 128, 4, 2)
    assert c.vocab_size == draft.config.vocab_size == 272 and c.architecture == "llama"
    assert c.num_params() > 25 * draft.config.num_params()
    assert sum(f.stat().st_size for f in target_dir.iterdir()) < 12 * 2**20
    assert (target_dir / BYTE_TOKENIZER_FILE).is_file()
    tok = load_tokenizer(target_dir)
    assert isinstance(tok, ByteTokenizer) and (tok.bos_id, tok.eos_id) == (c.bos_token_id, c.eos_token_id)


def test_deep_target_is_trained():
    """Per-byte perplexity on a Python snippet: deep target well below the draft and uniform (272)."""
    ids = torch.tensor([ByteTokenizer().encode(SNIPPET)])
    ppl = {}
    for name, d in zip(("target", "draft"), tiny_deep_pair_paths()):
        with torch.no_grad():
            logits = load_model(d)(ids[:, :-1])
        ppl[name] = math.exp(F.cross_entropy(logits[0], ids[0, 1:]).item())
    assert ppl["target"] < ppl["draft"] and ppl["target"] < 4, ppl


def test_sd_and_ssd_on_the_deep_pair_are_greedy_lossless():
    """T = 0: SD (in process) and SSD (draft in its own process) give the target's plain greedy tokens."""
    target_dir, draft_dir = tiny_deep_pair_paths()
    target, draft = load_model(target_dir), load_model(draft_dir)
    prompts = [list(b"def main(args):\n    "), list(b"import os\n")]
    n_new = 20
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 intra-op threads on a busy 2-core box run ~50x slower (spinning)
    try:
        greedy = [plain_greedy(target, p, n_new) for p in prompts]
    finally:
        torch.set_num_threads(threads)
    specs = [SpecConfig(mode="sd", k=3, batch_size=2),
             SpecConfig(mode="ssd", k=3, batch_size=1, fanout=(3, 2, 2, 1), backup="neural")]
    for spec in specs:
        rep = run(RunConfig(spec=spec, target=target, draft=draft, prompts=prompts, max_new_tokens=n_new))
        assert rep.token_ids == greedy, spec.mode
        assert rep.summary()["mean_tokens_per_round"] > 1.5, spec.mode  # the draft is really accepted
