"""A small LoRA adapter for the bundled model, written at test time (nothing is downloaded).

``write_lora_adapter`` writes what PEFT saves and vLLM loads (``adapter_config.json`` and
``adapter_model.safetensors``): rank-``rank`` A and B matrices for the attention query and value
projections of every layer of a Llama-style model, read from the base model's ``config.json``.
Both matrices are random and non-zero (a freshly initialised PEFT adapter has B = 0, which would
leave the model's output unchanged), so an answer through the adapter differs from the base
model's for the same greedy prompt: that difference is how the tests see the adapter applied.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGET_MODULES = ("q_proj", "v_proj")
B_STD = 0.1
"""Spread of B's entries: with A's rows scaled to unit gain and ``lora_alpha = 2 r``, the
adapter adds to q and v a term about half their own size, which changes the greedy answer."""


def write_lora_adapter(base_model_dir: Path, out_dir: Path, rank: int = 8, seed: int = 0) -> Path:
    """Write a LoRA adapter of ``base_model_dir`` into ``out_dir`` (created); returns it."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base_model_dir / "config.json").read_text())
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    outputs = {
        "q_proj": heads * head_dim,
        "v_proj": int(config.get("num_key_value_heads") or heads) * head_dim,
    }
    generator = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for layer in range(int(config["num_hidden_layers"])):
        for module in TARGET_MODULES:
            name = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            a = torch.randn(rank, hidden, generator=generator) / hidden**0.5
            b = torch.randn(outputs[module], rank, generator=generator) * B_STD
            tensors[f"{name}.lora_A.weight"] = a.contiguous()
            tensors[f"{name}.lora_B.weight"] = b.contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base_model_dir),
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(TARGET_MODULES),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out_dir / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    return out_dir
