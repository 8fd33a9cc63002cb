"""On a CUDA device: AR, SD and SSD (draft process on the same or a second GPU) give the same greedy
tokens with the shipped tiny pair, at batch 1 and 3. Skipped without CUDA."""

import pytest
import torch

from saguaro_exec import RunConfig, run
from saguaro_exec.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("batch", [1, 3])
def test_cuda_greedy_tokens_agree(batch):
    prompts = list(BUILTIN_PROMPTS[:3])
    base = dict(prompts=prompts, max_new_tokens=48, device="cuda")
    ar = run(RunConfig(spec=SpecConfig(mode="ar", batch_size=batch), **base)).token_ids
    sd = run(RunConfig(spec=SpecConfig(mode="sd", k=3, batch_size=batch), **base)).token_ids
    ssd = run(RunConfig(spec=SpecConfig(mode="ssd", k=3, fanout=(3, 2, 2, 1), batch_size=batch), **base))
    assert sd == ar
    assert ssd.token_ids == ar
    assert ssd.measurements.meta["device"] == "cuda"
    t07 = run(RunConfig(spec=SpecConfig(mode="ssd", k=3, fanout=(3, 2, 2, 1), batch_size=batch,
                                        temperature=0.7, sampler_c=0.5), **base))
    assert [len(t) for t in t07.token_ids] == [48] * 3
