"""Energy and cost per generated token (module_utils/acceptance/energy.py),
from the lab's real soak (tests/fixtures/lab/acceptance_lab_ramp_soak.json)
and a real GPU's power (an H100 under load, tests/fixtures/gpu-telemetry/);
the sampler reading Prometheus's real answers (tests/fixtures/monitoring/),
served on loopback."""

from __future__ import annotations

import http.server
import json

from conftest import FIXTURES
from test_guard import serve

from ansible.module_utils.acceptance.client import Sampler
from ansible.module_utils.acceptance.energy import energy, sentence
from twinrail.guard import gpu

SOAK = json.loads((FIXTURES / "lab" / "acceptance_lab_ramp_soak.json").read_text())["soak"]
H100 = gpu.telemetry(gpu.parse_query((FIXTURES / "gpu-telemetry" /
                                      "nvidia_smi_query_gpu_csv_allfields_1x_h100_80gb_hbm3_load_drv590.48.01.txt"
                                      ).read_text()))[0]["power_watts"]


def test_joules_per_token_and_the_cost_of_a_million():
    got = energy([H100, None, H100], SOAK["tokens"], SOAK["seconds"], 0.30)
    joules = H100 * SOAK["seconds"] / SOAK["tokens"]
    assert got["power_w"] == 631.95 and got["samples"] == 2 and got["unknown"] is None
    assert got["joules_per_token"] == round(joules, 3)
    assert got["cost_per_million_tokens"] == round(joules / 3.6 * 0.30, 4)
    assert sentence(got).startswith(f"energy per token: {round(joules, 3)} J (the GPUs' mean 631.95 W over "
                                    f"{SOAK['seconds']:g} s, {SOAK['tokens']} tokens); ")
    # no price: the energy, and no cost
    plain = energy([H100], SOAK["tokens"], SOAK["seconds"])
    assert plain["cost_per_million_tokens"] is None and sentence(plain).endswith("no electricity price set, no cost")


def test_no_power_read_is_unknown_never_zero():
    got = energy([None] * 40, SOAK["tokens"], SOAK["seconds"], 0.30)
    assert got["joules_per_token"] is None and got["power_w"] is None and got["cost_per_million_tokens"] is None
    assert sentence(got).startswith("energy per token: unknown: no GPU power was read during the soak")
    assert energy([H100], 0, SOAK["seconds"])["unknown"] == "the soak generated no token"
    assert sentence(None) == "energy per token: unknown (no soak was run)"


class Prometheus(http.server.BaseHTTPRequestHandler):
    """Prometheus's real answers: the GPUs' power where none is read, and a sum with a value."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = "api_v1_query_gpu_power_sum_no_gpu_lab.json" if "gpu" in self.path else "api_v1_query_sum_up_lab.json"
        body = (FIXTURES / "monitoring" / name).read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_sampler_reads_prometheus_sum_and_none_where_it_has_no_series():
    server, port = serve(Prometheus)
    try:
        base = f"http://127.0.0.1:{port}/monitoring/api/v1/query?query="
        assert Sampler("", 1, base + "sum(twinrail_gpu_power_watts)").power() is None
        assert Sampler("", 1, base + "sum(up)").power() == 6.0
        assert Sampler("", 1, "").power() is None
    finally:
        server.shutdown()
    # Prometheus gone: None, not an error
    assert Sampler("", 1, base + "sum(up)").power() is None
