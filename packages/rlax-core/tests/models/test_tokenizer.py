"""Our tokenizer and transformers' give the same ids on the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlax_core.models.tokenizer import Tokenizer
from rlax_core.models.tokenizer_build import build_qwen_tokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog. What is 12 + 30? The answer is 42.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # 5",
    "Ünïcödé text, emoji 🚀 and CJK 数学 are byte-level encoded.",
] * 20

STRINGS = [
    "What is 7 * 6?",
    "The answer is \\boxed{42}.",
    "  leading spaces, trailing spaces  ",
    "line one\nline two\r\n\ttabbed",
    "def f(x):\n    return x ** 2",
    "emoji 🚀🔥 and 数学 and Ünïcödé",
    "special tokens inline: <|im_start|>user\nhi<|im_end|>",
    "",
    "123456789 3.14159 -0.5 1e-9",
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    build_qwen_tokenizer(CORPUS, vocab_size=320, path=path)
    return path


@pytest.fixture(scope="module")
def transformers_view(tokenizer_dir: Path, run_reference, tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("hf-tok")
    (work / "strings.json").write_text(json.dumps(STRINGS))
    run_reference("tokenize", tokenizer_dir, work / "strings.json", work / "out.json")
    return json.loads((work / "out.json").read_text())


def test_encode_and_decode_match_transformers(tokenizer_dir: Path, transformers_view: dict) -> None:
    tokenizer = Tokenizer.from_dir(tokenizer_dir)
    assert [tokenizer.encode(s) for s in STRINGS] == transformers_view["encode"]
    assert [tokenizer.encode(s) for s in STRINGS] == transformers_view["encode_default"]
    assert [tokenizer.decode(tokenizer.encode(s)) for s in STRINGS] == transformers_view["decode"]
    assert [tokenizer.decode(tokenizer.encode(s)) for s in STRINGS] == STRINGS


def test_chat_template_matches_transformers(tokenizer_dir: Path, transformers_view: dict) -> None:
    tokenizer = Tokenizer.from_dir(tokenizer_dir)
    messages = [
        {"role": "user", "content": STRINGS[0]},
        {"role": "assistant", "content": STRINGS[1]},
        {"role": "user", "content": STRINGS[2]},
    ]
    assert tokenizer.apply_chat_template(messages) == transformers_view["chat"]
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert (
        tokenizer.render_chat(system, add_generation_prompt=False)
        == transformers_view["chat_system"]
    )
    assert transformers_view["chat_system"].startswith("<|im_start|>system\nBe brief.<|im_end|>\n")


def test_special_tokens(tokenizer_dir: Path, transformers_view: dict) -> None:
    tokenizer = Tokenizer.from_dir(tokenizer_dir)
    assert tokenizer.eos_token_id == transformers_view["eos_token_id"]
    assert tokenizer.pad_token_id == transformers_view["pad_token_id"]
    assert tokenizer.encode("<|im_end|>") == [tokenizer.token_id("<|im_end|>")]
    assert tokenizer.vocab_size <= 320


def test_a_missing_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    from rlax_core.models import CheckpointError

    with pytest.raises(CheckpointError, match=r"tokenizer\.json: cannot load"):
        Tokenizer.from_dir(tmp_path)
