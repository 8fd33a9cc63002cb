import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # the test process's own torch work (references, plain greedy, expected values) on one intra-op thread:
    import torch  # tiny shapes gain nothing from a second one, and on a busy 2-core box its spinning makes
except ImportError:  # every forward several times slower; runs set their own (RunConfig.threads, default 1)
    torch = None
else:
    torch.set_num_threads(1)
