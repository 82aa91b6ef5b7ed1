"""Building a small Qwen-style tokenizer from text (no hub needed).

The result has the Qwen2 layout — NFC normalisation, Qwen2's pre-tokenisation regex,
byte-level BPE, the ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>`` special tokens
and the ChatML chat template — at a vocabulary small enough for tiny models. Tests use
it to check tokenizer parity with ``transformers``; the quickstart uses it for its model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from rlax_core.models.tokenizer import TOKENIZER_CONFIG_FILE, TOKENIZER_FILE, Tokenizer

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Qwen2's pre-tokenisation pattern (from its tokenizer.json).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The chat template of the Qwen2.5 family, tool-calling branches included: tools listed
# in the system prompt, calls as <tool_call> blocks, results as <tool_response> blocks.
QWEN_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}"
    "{%- else %}"
    "{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}"
    "{%- endif %}"
    '{{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user '
    "query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    '\\n<tools>" }}'
    "{%- for tool in tools %}"
    '{{- "\\n" }}'
    "{{- tool | tojson }}"
    "{%- endfor %}"
    '{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name '
    'and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": '
    '<function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}'
    "{%- else %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}"
    "{{- '\\n' + message.content }}"
    "{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}"
    "{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}'
    "{{- tool_call.name }}"
    '{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}"
    "{{- '<|im_start|>user' }}"
    "{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}"
    "{{- message.content }}"
    "{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def build_qwen_tokenizer(
    corpus: Iterable[str],
    vocab_size: int,
    path: str | Path,
    *,
    chat_template: str = QWEN_CHAT_TEMPLATE,
) -> Tokenizer:
    """Trains a byte-level BPE on ``corpus`` and writes Qwen-style tokenizer files.

    Args:
        corpus: training text.
        vocab_size: ids in total, special tokens included (≥ 256 + 3).
        path: directory for ``tokenizer.json`` and ``tokenizer_config.json``.
        chat_template: the Jinja chat template (Qwen2.5's by default).

    Returns:
        The tokenizer, loaded back from the files written.
    """
    backend = tokenizers.Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tokenizers.Regex(QWEN2_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    backend.save(str(path / TOKENIZER_FILE))
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(backend.token_to_id(t)): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIAL_TOKENS
        },
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (path / TOKENIZER_CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return Tokenizer.from_dir(path)
