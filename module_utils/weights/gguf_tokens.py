# -*- coding: utf-8 -*-
"""What a GGUF says its tokenizer adds around a prompt, carried into a
Hugging Face tokenizer converted from it (tools/bundle.py vllm).

transformers' GGUF conversion writes a tokenizer.json whose post-processor
is the prompt alone: a model whose GGUF asks for <bos> (Gemma 3:
``tokenizer.ggml.add_bos_token`` true) then gets no BOS under vLLM and
answers nonsense, while llama.cpp, reading the same GGUF, adds it. The
GGUF's flags are the truth: the converted tokenizer's post-processor is
rewritten from them (a TemplateProcessing of [<bos>] $A [<eos>])."""

from __future__ import annotations

from ansible.module_utils.weights.gguf_figures import GGUFError, _field, _reader


def special_token_flags(path: str) -> dict:
    """The GGUF's special-token settings: add_bos, add_eos (False where
    the key is absent, as llama.cpp reads it), bos_id, eos_id."""
    reader = _reader(path)
    flags = {}
    for key in ("add_bos", "add_eos"):
        value = _field(reader, f"tokenizer.ggml.{key}_token", required=False)
        flags[key] = bool(value) if value is not None else False
    for key in ("bos", "eos"):
        value = _field(reader, f"tokenizer.ggml.{key}_token_id", required=flags[f"add_{key}"])
        flags[f"{key}_id"] = int(value) if value is not None else None
    return flags


def _token_of(tokenizer: dict, token_id: int) -> str:
    for added in tokenizer.get("added_tokens") or []:
        if added.get("id") == token_id:
            return added["content"]
    vocab = (tokenizer.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        for token, index in vocab.items():
            if index == token_id:
                return token
    elif isinstance(vocab, list) and 0 <= token_id < len(vocab):  # unigram: [token, score] pairs
        return vocab[token_id][0]
    raise GGUFError(f"the tokenizer has no token of id {token_id}")


def with_special_tokens(tokenizer: dict, flags: dict) -> dict:
    """The tokenizer.json (as loaded) with the post-processor the GGUF's
    flags say: its BOS before each sequence where add_bos, its EOS after it
    where add_eos; the rest untouched."""
    around = {"bos": flags["add_bos"], "eos": flags["add_eos"]}
    tokens = {kind: _token_of(tokenizer, flags[f"{kind}_id"]) for kind, on in around.items() if on}

    def sequence(name: str, type_id: int) -> list[dict]:
        out = [{"SpecialToken": {"id": tokens["bos"], "type_id": type_id}}] if "bos" in tokens else []
        out.append({"Sequence": {"id": name, "type_id": type_id}})
        if "eos" in tokens:
            out.append({"SpecialToken": {"id": tokens["eos"], "type_id": type_id}})
        return out

    current = tokenizer.get("post_processor")
    if not tokens and not _adds(current):
        return tokenizer  # nothing asked, nothing added: as converted
    template = {
        "type": "TemplateProcessing", "single": sequence("A", 0), "pair": sequence("A", 0) + sequence("B", 1),
        "special_tokens": {token: {"id": token, "ids": [flags[f"{kind}_id"]], "tokens": [token]}
                           for kind, token in tokens.items()}}
    kept = [p for p in _parts(current) if p.get("type") not in ("TemplateProcessing", "BertProcessing",
                                                                 "RobertaProcessing")]
    patched = dict(tokenizer)
    # a byte-level tokenizer keeps its offsets' processor beside the template
    patched["post_processor"] = {"type": "Sequence", "processors": kept + [template]} if kept else template
    return patched


def _parts(processor: dict | None) -> list[dict]:
    if not processor:
        return []
    if processor.get("type") == "Sequence":
        return [part for child in processor.get("processors") or [] for part in _parts(child)]
    return [processor]


def _adds(processor: dict | None) -> bool:
    """Whether a post-processor adds special tokens of its own."""
    for part in _parts(processor):
        if part.get("type") in ("BertProcessing", "RobertaProcessing"):
            return True
        if part.get("type") == "TemplateProcessing" and any("SpecialToken" in item for item in part.get("single") or []):
            return True
    return False
