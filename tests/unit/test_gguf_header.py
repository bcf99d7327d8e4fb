"""A model's figures read where its weights are: the headers of its GGUF
files cut on the master (library/gguf_header.py and module_utils/weights/gguf_cut.py, standard library only), read on the
controller by the gguf package's own reader (gguf_figures.
figures_from_headers). On the real SmolLM2 file of the lab's bundle, and on
a split model written by the gguf package's own writer."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest
from ansible.module_utils.testing import patch_module_args

from ansible.module_utils.weights import gguf_cut as header_module
from ansible.module_utils.weights import gguf_figures
from conftest import REPO, filter_plugins
from test_memory_plan import SMOLLM2, model, run_module


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


# the module (library/gguf_header.py) by its path, and the filters
gguf_header_module_under_test = _load("gguf_header_module", REPO / "library" / "gguf_header.py")
filters = filter_plugins()


def test_the_header_ends_where_the_readers_tensor_data_begins():
    from gguf import GGUFReader

    assert SMOLLM2.exists(), "run `tools/bundle.py models` (make test does) first"
    length = header_module.header_length(str(SMOLLM2))
    reader = GGUFReader(str(SMOLLM2), "r")
    alignment = int(reader.fields["general.alignment"].contents()) if "general.alignment" in reader.fields else 32
    # the data starts at the header's end, padded to the alignment
    assert reader.data_offset - alignment < length <= reader.data_offset, (length, reader.data_offset)


def test_the_figures_from_the_cut_headers_are_the_files_own():
    cut = header_module.cut(str(SMOLLM2))
    assert [entry["file"] for entry in cut] == [SMOLLM2.name]
    assert cut[0]["size"] == SMOLLM2.stat().st_size and cut[0]["header_bytes"] < 8 << 20
    assert gguf_figures.figures_from_headers(cut, "lab-master:/x") == gguf_figures.model_figures(str(SMOLLM2))


def write_model(path, split_max_tensors: int = 0) -> None:
    """A small llama-shaped model, by the gguf package's writer (split in
    files of split_max_tensors tensors when given)."""
    import gguf

    writer = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_head_count(8)
    writer.add_head_count_kv(2)
    writer.add_name("split-test")
    for layer in range(2):
        for name, shape in (("attn_q", (64, 64)), ("attn_k", (16, 64)), ("ffn_up", (128, 64))):
            writer.add_tensor(f"blk.{layer}.{name}.weight", np.ones(shape, dtype=np.float32))
    writer.add_tensor("token_embd.weight", np.ones((100, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_split_model_is_summed_over_its_files_here_and_from_its_headers(tmp_path):
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    write_model(whole / "m.gguf")
    write_model(split / "m.gguf", split_max_tensors=3)
    files = sorted(p.name for p in split.iterdir())
    assert files == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"], files
    one = gguf_figures.model_figures(str(whole / "m.gguf"))
    assert one["params_b"] * 1e9 == 2 * (64 * 64 + 16 * 64 + 128 * 64) + 100 * 64 and one["files"] == 1
    first = str(split / files[0])
    summed = gguf_figures.model_figures(first)
    assert summed == dict(one, files=3)
    cut = header_module.cut(first)
    assert [entry["file"] for entry in cut] == files
    assert gguf_figures.figures_from_headers(cut, "spark-a:" + first) == summed
    # a file of the split missing: named, nothing guessed
    (split / files[1]).unlink()
    with pytest.raises(header_module.HeaderError, match="without m-00002-of-00003.gguf"):
        header_module.cut(first)
    with pytest.raises(gguf_figures.GGUFError, match="without m-00002-of-00003.gguf"):
        gguf_figures.model_figures(first)


def test_a_file_cut_short_or_not_gguf_is_refused_by_name(tmp_path):
    short = tmp_path / "short.gguf"
    short.write_bytes(SMOLLM2.read_bytes()[:100_000])
    with pytest.raises(header_module.HeaderError, match=r"short.gguf: the file ends inside its header"):
        header_module.header_length(str(short))
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(header_module.HeaderError, match="other.gguf: not a GGUF file"):
        header_module.header_length(str(other))


def test_the_module_cuts_on_the_node_and_the_plan_reads_them(tmp_path, capsys):
    copy = tmp_path / "SmolLM2.gguf"
    shutil.copyfile(SMOLLM2, copy)
    with patch_module_args({"path": str(copy)}), pytest.raises(SystemExit) as exited:
        gguf_header_module_under_test.main()
    result = json.loads(capsys.readouterr().out)
    assert exited.value.code == 0 and not result["changed"] and len(result["files"]) == 1
    code, plan = run_module({
        "model": model(name="smollm2", params_b=999, bits_per_param=16, gguf=""),
        "memory_mb": {"lab-master": 24000, "lab-worker1": 24000}, "soft_watermark_pct": 85,
        "hard_watermark_pct": 92, "gguf_headers": result["files"], "gguf_where": f"lab-master:{copy}"}, capsys)
    assert code == 0, plan
    assert plan["source"] == f"lab-master:{copy} (1 file(s), their headers)"
    assert plan["lines"][0] == f"model figures from {plan['source']}"
    # the figures are the file's (134.5 M parameters), not the inventory's 999 B
    assert plan["plan"]["file_bytes"] < 200 << 20
    with patch_module_args({"path": str(tmp_path / "absent.gguf")}), pytest.raises(SystemExit):
        gguf_header_module_under_test.main()
    assert "is not on this node" in json.loads(capsys.readouterr().out)["msg"]


@pytest.mark.parametrize("model_, sets, model_file, expected", [
    ({"name": "m", "gguf": ""}, [{"model": "m", "source": "master", "path": "/data/m"}], "m-00001-of-00002.gguf",
     "/data/m/m-00001-of-00002.gguf"),
    ({"name": "m", "gguf": "/c/m.gguf"}, [{"model": "m", "source": "master", "path": "/data/m"}], "m.gguf", ""),
    ({"name": "m", "gguf": ""}, [{"model": "m", "source": "controller", "path": "/c"}], "m.gguf", ""),
    ({"name": "m", "gguf": ""}, [{"model": "other", "source": "master", "path": "/d"}], "m.gguf", ""),
])
def test_the_figures_are_read_on_the_master_only_for_a_set_from_the_master(model_, sets, model_file, expected):
    assert filters.model_on_master(model_, sets, model_file) == expected
