# -*- coding: utf-8 -*-
"""twinrail's Jinja filters for the vLLM engine: its environment's id, the
parallel sizes' check, each node's command line and environment (plain
functions in module_utils/engines/vllm/env.py and vllm_engine.py, unit-tested in
tests/unit/test_vllm_engine.py)."""

from __future__ import annotations

import shlex

from ansible.errors import AnsibleFilterError
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines.vllm import layout as vllm_engine
from ansible.module_utils.engines.vllm import env as vllm_env
from ansible.module_utils.engines.vllm import ranks as vllm_ranks

DOCUMENTATION = r"""
name: vllm
short_description: twinrail's filters for the vLLM engine
description:
  - "C(twinrail_vllm_env_id): The environment's id from its lock's text and the Python version it is built for."
  - "C(twinrail_vllm_parallel_problems): What is wrong with the tensor x pipeline sizes on these nodes (host -> GPUs) for the model (heads, kv_heads, layers), and eager mode with pipeline parallel without GPUs."
  - "C(twinrail_vllm_serve_args): One node's arguments to vLLM's serve, one shell-quoted string (rank 0 serves the API, the others run headless)."
  - "C(twinrail_vllm_group_problems): What is wrong with the group the nodes' journals show (host -> ranks from vllm_rank_facts): each rank once, rank 0 on the master, met at the rendezvous, weights loaded."
  - "C(twinrail_vllm_group_summary): One line naming each host's ranks and their pipeline and tensor ranks."
  - "C(twinrail_vllm_serve_env): One node's environment for vLLM (rail0 for gloo and NCCL, every rail's RDMA device with the RoCE GID of the node's tables (``links``, rdma_link_facts' rails), the CPU engine's KV cache and binding); a RoCE rail without a RoCE v2 GID of its address is an error naming host and rail."
"""


def env_id(lock_text, python_version):
    """The environment's id: its lock's text and the node's Python version."""
    return vllm_env.env_id(str(lock_text), str(python_version))


def parallel_problems(gpus, tensor, pipeline, model, eager=False):
    """What is wrong with tensor x pipeline on these nodes (host -> GPUs) for the model."""
    model = model or {}
    try:
        return vllm_engine.parallel_problems(
            tensor=int(tensor), pipeline=int(pipeline), gpus=dict(gpus), heads=model.get("heads"),
            kv_heads=model.get("kv_heads"), layers=model.get("layers"), eager=bool(eager))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"twinrail_vllm_parallel_problems: {exc}") from exc


def serve_args(settings):
    """One node's arguments to vLLM's serve, shell-quoted for the unit."""
    try:
        args = vllm_engine.serve_args(**settings)
    except TypeError as exc:
        raise AnsibleFilterError(f"twinrail_vllm_serve_args: {exc}") from exc
    return " ".join(shlex.quote(a) for a in args)


def serve_env(settings):
    """One node's environment for vLLM (rail0 for the group, the CPU engine's cache)."""
    try:
        return vllm_engine.serve_env(**settings)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"twinrail_vllm_serve_env: {exc}") from exc


def group_problems(by_host, master, rendezvous, tensor, pipeline):
    """What is wrong with the group the nodes' journals show (host -> ranks)."""
    return vllm_ranks.group_problems(dict(by_host), master, rendezvous, int(tensor), int(pipeline))


def group_summary(by_host):
    """One line naming each host's ranks."""
    return vllm_ranks.summary(dict(by_host))


class FilterModule:
    def filters(self):
        return {
            "twinrail_vllm_env_id": env_id,
            "twinrail_vllm_parallel_problems": parallel_problems,
            "twinrail_vllm_serve_args": serve_args,
            "twinrail_vllm_serve_env": serve_env,
            "twinrail_vllm_group_problems": group_problems,
            "twinrail_vllm_group_summary": group_summary,
        }
