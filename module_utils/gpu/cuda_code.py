# -*- coding: utf-8 -*-
"""Which GPUs a library's CUDA code runs on: the device code cuobjdump lists
in it (``--list-elf``: a cubin per architecture; ``--list-ptx``: PTX the
driver compiles at load), or torch's own list (``torch.cuda.get_arch_list()``),
judged by NVIDIA's compatibility rules (CUDA C++ Programming Guide, "Binary
Compatibility"; CUDA 12.9's family-specific targets):

- a cubin for sm_XY runs on compute capability X.Z for Z >= Y (same major);
- sm_XYa (architecture-specific features) runs on X.Y alone;
- sm_XYf (family-specific) runs on X.Z for Z >= Y;
- PTX for compute_XY is compiled by the driver for any X.Y or newer (the
  first start pays for it, and its result is cached).
"""

from __future__ import annotations

import re

# "ELF file    1: _C.abi3.1.sm_90a.cubin", "PTX file    1: x.1.sm_120.ptx";
# torch's "sm_90", "compute_120"
_CODE = re.compile(r"\b(?P<kind>sm|compute)_(?P<cc>\d{2,3})(?P<suffix>[af]?)\b")
_LINE = re.compile(r"^(?P<what>ELF|PTX) file\s+\d+:\s+(?P<name>\S+)")


def arch_code(cc: str) -> tuple[int, int]:
    """"121" -> (12, 1), "90" -> (9, 0)."""
    return int(cc[:-1]), int(cc[-1])


def listed(cuobjdump_out: str) -> list[dict]:
    """The device code of one ``cuobjdump --list-elf`` or ``--list-ptx``
    output: [{"kind": "cubin"|"ptx", "cc": "90", "suffix": "a"|"f"|""}]."""
    codes = set()
    for line in cuobjdump_out.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        found = _CODE.findall(m["name"])
        if found:
            _, cc, suffix = found[-1]
            codes.add(("cubin" if m["what"] == "ELF" else "ptx", cc, suffix))
    return [{"kind": k, "cc": cc, "suffix": s} for k, cc, s in sorted(codes, key=lambda c: (c[0], int(c[1]), c[2]))]


def from_names(arch_list: list[str]) -> list[dict]:
    """Code by name, as torch.cuda.get_arch_list() and the lock's code list
    (<lock>.code.json) write it: sm_XY[a|f] are cubins, compute_XY PTX."""
    out = []
    for item in arch_list:
        m = _CODE.fullmatch(item.strip())
        if m:
            out.append({"kind": "cubin" if m["kind"] == "sm" else "ptx", "cc": m["cc"], "suffix": m["suffix"]})
    return out


def name(code: dict) -> str:
    return f"{'sm' if code['kind'] == 'cubin' else 'compute'}_{code['cc']}{code['suffix']}"


def runs_on(code: dict, gpu_cc: str) -> bool:
    major, minor = arch_code(code["cc"])
    gpu = arch_code(gpu_cc)
    if code["kind"] == "ptx":
        return gpu >= (major, minor)
    if code["suffix"] == "a":
        return gpu == (major, minor)
    return gpu[0] == major and gpu[1] >= minor


def coverage(codes: list[dict], gpu_cc: str) -> dict:
    """How a GPU of compute capability `gpu_cc` ("121") runs this code:
    {"runs": "cubin"|"ptx"|None, "by": the code that runs it (its own
    cubin first, then the nearest PTX)}."""
    cubins = [c for c in codes if c["kind"] == "cubin" and runs_on(c, gpu_cc)]
    if cubins:
        best = max(cubins, key=lambda c: (arch_code(c["cc"]), c["suffix"] == "a"))
        return {"runs": "cubin", "by": name(best)}
    ptx = [c for c in codes if c["kind"] == "ptx" and runs_on(c, gpu_cc)]
    if ptx:
        return {"runs": "ptx", "by": name(max(ptx, key=lambda c: arch_code(c["cc"])))}
    return {"runs": None, "by": None}


def said(gpu_cc: str, what: str, found: dict, codes: list[dict]) -> str:
    """The verdict in words, naming the code that runs or what is there."""
    if found["runs"] == "cubin":
        return f"sm_{gpu_cc}: {what} runs its {found['by']} cubin"
    if found["runs"] == "ptx":
        return f"sm_{gpu_cc}: {what} has no cubin for it; the driver compiles its {found['by']} PTX at the first start"
    return (f"sm_{gpu_cc}: {what} has no code that runs on it (it has {', '.join(name(c) for c in codes) or 'none'})")


def compute_capability(value) -> str | None:
    """nvidia-smi's compute_cap ("9.0", "12.1", read as a number or text)
    as this module's "90", "121"; None for no reading."""
    m = re.fullmatch(r"(\d{1,2})\.(\d)", str(value).strip()) if value is not None else None
    return f"{m[1]}{m[2]}" if m else None
