"""The converted tokenizer adds what the GGUF says llama.cpp adds
(module_utils/weights/gguf_tokens.py): read from the lab's real GGUFs (the bundle
`make test` fetches), carried into a tokenizer.json's post-processor."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible.module_utils.weights.gguf_tokens import special_token_flags, with_special_tokens

BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle" / "models"
GEMMA = BUNDLE / "gemma3-270m-q4-k-m" / "gemma-3-270m-q4_k_m.gguf"
SMOLLM = BUNDLE / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# the shape transformers' GGUF conversion writes: its special tokens listed, the prompt alone after processing
CONVERTED = {"added_tokens": [{"id": 0, "content": "<pad>"}, {"id": 1, "content": "<eos>"},
                              {"id": 2, "content": "<bos>"}],
             "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                                "pair": [], "special_tokens": {}},
             "model": {"type": "BPE", "vocab": {"<pad>": 0, "<eos>": 1, "<bos>": 2}}}


@pytest.mark.skipif(not GEMMA.exists() or not SMOLLM.exists(), reason="make bundle fetches the lab's models")
def test_the_ggufs_say_what_llama_cpp_adds():
    assert special_token_flags(str(GEMMA)) == {"add_bos": True, "add_eos": False, "bos_id": 2, "eos_id": 1}
    assert special_token_flags(str(SMOLLM)) == {"add_bos": False, "add_eos": False, "bos_id": 1, "eos_id": 2}


def test_a_gguf_that_asks_for_bos_gets_it_before_every_sequence():
    patched = with_special_tokens(CONVERTED, {"add_bos": True, "add_eos": False, "bos_id": 2, "eos_id": 1})
    post = patched["post_processor"]
    assert post["single"] == [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    assert post["special_tokens"] == {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}
    assert [list(item)[0] for item in post["pair"]] == ["SpecialToken", "Sequence", "SpecialToken", "Sequence"]
    assert patched["added_tokens"] == CONVERTED["added_tokens"]  # nothing else changes


def test_nothing_asked_leaves_a_byte_level_tokenizer_as_converted_and_a_stray_bos_is_taken_out():
    byte_level = dict(CONVERTED, post_processor={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True})
    none = {"add_bos": False, "add_eos": False, "bos_id": 1, "eos_id": 2}
    assert with_special_tokens(byte_level, none) is byte_level
    stray = with_special_tokens(CONVERTED, {"add_bos": True, "add_eos": False, "bos_id": 2, "eos_id": 1})
    assert with_special_tokens(stray, none)["post_processor"]["single"] == [{"Sequence": {"id": "A", "type_id": 0}}]
    # a byte-level one that must add BOS keeps its offsets' processor beside the template
    both = with_special_tokens(byte_level, {"add_bos": True, "add_eos": True, "bos_id": 2, "eos_id": 1})
    assert [p["type"] for p in both["post_processor"]["processors"]] == ["ByteLevel", "TemplateProcessing"]
