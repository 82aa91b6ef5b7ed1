"""The policy's OpenAI-compatible endpoint: useful tokens/s beside the engine's own.

One random checkpoint of the ~50M shape (the quickstart's tokenizer, so its vocabulary),
served by ``rlax serve policy``'s server on a free port; the same requests — prompts of
32 token ids, each sampled to 64 new tokens or its stop token, one seed each — go
through the official ``openai`` client, one thread per request so the engine batches
them, whole and streamed, and straight into the same engine shape
(:class:`rlax_core.generate.paged.Engine`, what a worker runs). Both compile every shape
and run a warm round first; the engine alone runs before and after the endpoint, and
the faster of its two runs is the baseline. The ratio is what HTTP, JSON and the
service's per-step bookkeeping cost.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.generate import CONFIGS
from rlax_core.bench import Bench
from rlax_core.generate import SamplingParams
from rlax_core.generate.paged import Engine, Request
from rlax_core.generate.sampler import completion_seeds
from rlax_core.models import init_model, load_pretrained, save_pretrained
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.components import stop_token_ids

TOKENIZER = Path(__file__).resolve().parents[1] / "examples" / "quickstart" / "tokenizer"
PROMPT_TOKENS, NEW_TOKENS, SLOTS = 32, 64, 16


def _engine(model, shape) -> Engine:
    engine = Engine(model, slots=shape.slots, block_size=shape.block_size,
                    max_sequence_tokens=shape.max_sequence_tokens,
                    prefill_chunk=shape.prefill_chunk, pad_token_id=0)  # fmt: skip
    engine.warm_up()
    return engine


def _engine_alone(engine: Engine, prompts, stops) -> tuple[float, int]:
    """(seconds, tokens) of the requests straight into the engine."""
    params = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0)
    requests = [Request(i, tuple(p), tuple(int(s) for s in completion_seeds(i, 1)), NEW_TOKENS,
                        frozenset(stops)) for i, p in enumerate(prompts)]  # fmt: skip
    start = time.perf_counter()
    engine.submit(requests, params)
    done = {}
    while len(done) < len(requests):
        done.update((r.request_id, s) for r, s in engine.step())
    seconds = time.perf_counter() - start
    return seconds, sum(len(s.tokens) for samples in done.values() for s in samples)


def _through_the_endpoint(url: str, prompts, *, stream: bool) -> tuple[float, int]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)

    def ask(i: int) -> int:
        request = dict(model="policy", prompt=list(prompts[i]), max_tokens=NEW_TOKENS, seed=i,
                       temperature=1.0)  # fmt: skip
        if not stream:
            response = client.completions.create(**request)
            return len(response.choices[0].model_extra["token_ids"])
        chunks = client.completions.create(**request, stream=True)
        return sum(len(c.choices[0].model_extra["token_ids"]) for c in chunks if c.choices)

    with ThreadPoolExecutor(len(prompts)) as pool:
        start = time.perf_counter()
        tokens = sum(pool.map(ask, range(len(prompts))))
        return time.perf_counter() - start, tokens


def run(bench: Bench) -> None:
    """Runs the serve suite."""
    from rlax_core.serve.policy_server import EngineShape, PolicyServer

    tokenizer = Tokenizer.from_dir(TOKENIZER)
    base = CONFIGS["tiny" if bench.quick else "50M"]
    config = dataclasses.replace(base, vocab_size=tokenizer.vocab_size)
    count = 8 if bench.quick else 64
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, tokenizer.vocab_size - 3, PROMPT_TOKENS).tolist()
               for _ in range(count)]  # fmt: skip
    shape = EngineShape(slots=SLOTS, max_sequence_tokens=256, top_logprobs=0)
    bench.notes.update(params=config.num_params(), prompts=count, new_tokens=NEW_TOKENS,
                       slots=SLOTS, prompt_tokens=PROMPT_TOKENS)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy"
        save_pretrained(init_model(config, seed=0), path)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TOKENIZER / name, path / name)
        stops = stop_token_ids(tokenizer)
        engine = _engine(load_pretrained(path), shape)
        _engine_alone(engine, prompts[:SLOTS], stops)  # the warm round
        alone = [_engine_alone(engine, prompts, stops)]
        server = PolicyServer(path, port=0, model_name="policy", shape=shape)
        server.service.engine.warm_up()
        server.start()
        try:
            _through_the_endpoint(server.url, prompts[:SLOTS], stream=False)  # warm the path
            served = {("streamed" if stream else "whole responses"):
                      _through_the_endpoint(server.url, prompts, stream=stream)
                      for stream in (False, True)}  # fmt: skip
        finally:
            server.stop()
        alone.append(_engine_alone(engine, prompts, stops))
        alone_s, alone_tokens = min(alone)
    bench.notes["engine alone"] = {"seconds": alone_s, "tokens": alone_tokens,
                                   "runs_s": [s for s, _ in alone]}  # fmt: skip
    for label, (seconds, tokens) in served.items():
        bench.notes[label] = {"seconds": seconds, "tokens": tokens}
        bench.record(
            f"endpoint useful tokens/s, {label}", subject=tokens / seconds,
            baseline=alone_tokens / alone_s, unit="tokens/s", higher_is_better=True,
            subject_label=f"openai client → rlax serve policy ({count} requests at once)",
            baseline_label=f"the same requests straight into the engine ({SLOTS} slots)",
        )  # fmt: skip
