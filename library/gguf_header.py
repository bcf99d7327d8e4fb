#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Cut a GGUF model's headers where its files lie, for the controller to read."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_header
short_description: Cut the headers of a GGUF model's files on the node that holds them
description:
  - >-
    Reads, on the node (the master, where a model whose weights come from
    C(source: master) lands), each file of the model whose first file is
    C(path): that file alone, or every C(<prefix>-NNNNN-of-MMMMM.gguf) of a
    split model. Of each it returns the header (metadata and tensor table,
    everything before the tensors' data: a few MiB for a 235B model),
    compressed, and the file's size. The weights themselves are not read.
  - >-
    The controller's memory plan (C(twinrail_memory_plan)'s C(gguf_headers))
    reads the figures from these headers with the C(gguf) package, which
    the nodes do not have. Python's standard library only. Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  path:
    description: The model's (first) GGUF file on the node.
    type: path
    required: true
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Cut the model's headers on the master
  gguf_header:
    path: /data/incoming/moe-552b-q2_9/moe-552b-q2_9-00001-of-00005.gguf
  register: __headers
"""

RETURN = r"""
files:
  description: Per file of the model, in order - file (its name), size (bytes), header_bytes, header (zlib, base64).
  returned: success
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.weights.gguf_cut import HeaderError, cut


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}}, supports_check_mode=True)
    path = module.params["path"]
    if not os.path.isfile(path):
        module.fail_json(msg=f"preflight: {path}: the model's first GGUF file is not on this node (twinrail_weights' "
                             "source directory and inference_service_model_file name it)")
    try:
        files = cut(path)
    except (HeaderError, OSError) as exc:
        module.fail_json(msg=f"preflight: {exc}")
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
