"""Tiny Qwen2 causal LMs built locally, for tests, examples and benchmarks on a CPU.

:func:`build_tiny_model` writes a randomly initialised :class:`~transformers.Qwen2ForCausalLM` and a
tokenizer trained here (byte-level BPE from the ``tokenizers`` library, digits split into single
tokens, ChatML chat template) into a folder that loads exactly like a Hub model::

    path = build_tiny_model("/tmp/tiny")
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)

:func:`tiny_model_path` returns a cached build keyed by its settings, so tests and examples share it.
Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "CHATML_TEMPLATE",
    "DEFAULT_CORPUS",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "tiny_model_path",
]

#: ChatML, as used by Qwen2 chat models. ``add_generation_prompt`` opens the assistant turn.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _pretokenize_regex(number_digits: int) -> str:
    """Qwen2's pre-tokenisation pattern, with numbers cut into pieces of up to ``number_digits``."""
    numbers = r"\p{N}" if number_digits == 1 else rf"\p{{N}}{{1,{number_digits}}}"
    return (
        rf"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|{numbers}| ?[^\s\p{{L}}\p{{N}}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )


_PRETOKENIZE_REGEX = _pretokenize_regex(1)

#: Built-in training text for the tokenizer: English, digits, arithmetic, LaTeX and ``\boxed{}``.
DEFAULT_CORPUS: tuple[str, ...] = (
    "You are a helpful assistant. Solve the problem step by step.",
    "You are the reasoner. Think about the problem and explain the steps.",
    "You are the actor. Give the final answer in \\boxed{}.",
    "Problem: What is 12 + 35? Answer: 12 + 35 = 47, so the answer is \\boxed{47}.",
    "Compute 7 \\times 8 = 56. The final answer is \\boxed{56}.",
    "Let $x$ be a real number such that $2x + 3 = 11$. Then $x = 4$ and the answer is $\\boxed{4}$.",
    "\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}, \\sqrt{16} = 4, \\pi r^2, x^{2} - y^{2} = (x-y)(x+y)",
    "\\left( a + b \\right)^2 = a^2 + 2ab + b^2 \\quad \\text{for all } a, b \\in \\mathbb{R}",
    "\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}, \\int_0^1 x \\, dx = \\frac{1}{2}, \\le \\ge \\ne \\cdot",
    "The answer is correct. The answer is wrong. Try again. Feedback: check the arithmetic.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14 -5 +7 * / = < > ( ) [ ] { } , . ; : ! ? ' \"",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "Question: A train travels 60 miles in 2 hours. What is its speed? Speed = 60 / 2 = 30 mph.",
    "Step 1: add the numbers. Step 2: multiply. Step 3: simplify the fraction. Therefore the result.",
)


def build_tiny_tokenizer(
    *, vocab_size: int = 384, corpus: Sequence[str] | None = None, number_digits: int = 1
) -> PreTrainedTokenizerFast:
    """Train a small byte-level BPE tokenizer with a ChatML chat template.

    Byte-level BPE covers every string (no unknown token); the Qwen2 pre-tokeniser splits digits
    before BPE, so each digit is one token (arithmetic stays learnable). Special tokens:
    ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos, ends an assistant turn).

    Args:
        vocab_size: Target vocabulary size including the 256 byte tokens and the special tokens.
        corpus: Training text; defaults to :data:`DEFAULT_CORPUS`.
        number_digits: Numbers are cut into pieces of up to this many digits before BPE. 1 (the
            default) splits every digit, as Qwen2 does; 3 cuts as Llama 3 does, and every integer
            from 0 to ``10**number_digits - 1`` is then added to the vocabulary as one token.

    Returns:
        A :class:`~transformers.PreTrainedTokenizerFast` with ``chat_template`` set.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if number_digits not in (1, 2, 3):
        raise ValueError(f"number_digits must be 1, 2 or 3, got {number_digits!r}.")
    if vocab_size < 256 + len(_SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size={vocab_size} is too small for byte-level BPE; use at least "
            f"{256 + len(_SPECIAL_TOKENS)} (256 byte tokens + special tokens)."
        )
    tok = Tokenizer(models.BPE())
    # The same normaliser and pre-tokeniser as Qwen2's tokenizer (``AutoTokenizer`` loads this folder
    # as a Qwen2 tokenizer and rebuilds that pipeline), so the tokenizer trained here and the one
    # loaded back split text identically. ``\p{N}`` alone makes every digit its own piece.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(_pretokenize_regex(number_digits)), behavior="isolated", invert=False
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = list(corpus if corpus is not None else DEFAULT_CORPUS)
    numbers = [str(n) for n in range(10**number_digits)] if number_digits > 1 else []
    # Frequent enough that BPE merges each number into one token before rarer word pieces.
    tok.train_from_iterator(texts + numbers * 100, trainer=trainer)
    vocab = tok.get_vocab()
    missing = [n for n in numbers if n not in vocab]
    if missing:
        raise ValueError(
            f"vocab_size={vocab_size} leaves {len(missing)} of the numbers 0..{len(numbers) - 1} "
            f"split into several tokens (e.g. {missing[0]!r}); raise vocab_size."
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=4096,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(
    output_dir: str | os.PathLike[str],
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int = 384,
    max_position_embeddings: int = 4096,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    corpus: Sequence[str] | None = None,
) -> Path:
    """Build a randomly initialised Qwen2 causal LM and its tokenizer in ``output_dir``.

    The folder holds ``config.json``, ``model.safetensors``, ``generation_config.json`` and the
    tokenizer files, so ``AutoModelForCausalLM.from_pretrained(path)`` and
    ``AutoTokenizer.from_pretrained(path)`` load it like any Hub model. All dropout is 0.

    Args:
        output_dir: Folder to write (created; existing files are overwritten).
        hidden_size: Model width.
        num_layers: Number of decoder layers.
        num_heads: Attention heads; must divide ``hidden_size``.
        num_kv_heads: Key/value heads (grouped-query attention); defaults to ``num_heads``.
        intermediate_size: MLP width; defaults to ``4 * hidden_size``.
        vocab_size: Tokenizer vocabulary target; the model's embedding matches the trained size.
        max_position_embeddings: Longest sequence the rotary embedding is configured for.
        tie_word_embeddings: Share input embedding and LM head (halves embedding parameters).
        seed: Seed of the random weight initialisation.
        corpus: Tokenizer training text; defaults to :data:`DEFAULT_CORPUS`.

    Returns:
        ``Path(output_dir)``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}.")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(vocab_size=vocab_size, corpus=corpus)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        attention_dropout=0.0,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # Seed the global RNG only for the init, and give it back untouched (callers may be mid-run).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _cache_root() -> Path:
    env = os.environ.get("MARFT_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "marft" / "tiny_models"


def tiny_model_path(**settings: object) -> Path:
    """A cached :func:`build_tiny_model` build for the given settings (built on first use).

    The cache lives in ``$MARFT_CACHE`` or ``~/.cache/marft/tiny_models`` (``$XDG_CACHE_HOME``
    respected), one folder per settings hash. Builds are written to a temporary folder and renamed
    into place, so concurrent test processes never see a half-written model.

    Args:
        **settings: Keyword arguments of :func:`build_tiny_model` (except ``output_dir``).

    Returns:
        The folder holding the model and tokenizer.
    """
    import tokenizers
    import transformers

    key_src = json.dumps(
        {
            "settings": settings,
            "tf": transformers.__version__,
            "tok": tokenizers.__version__,
            "v": 1,
        },
        sort_keys=True,
        default=repr,
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    root = _cache_root()
    target = root / f"qwen2-tiny-{key}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        build_tiny_model(tmp, **settings)  # type: ignore[arg-type]
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished the same build first; theirs is identical.
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
