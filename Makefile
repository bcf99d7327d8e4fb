# twinrail: the two commands of the README, and the parts they are made of.
#   make lab    bring the lab up and run the whole suite against it
#   make test   lint, unit tests, the lab pass (what CI runs)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# ansible-lint loads the custom modules, which import from module_utils/
export ANSIBLE_MODULE_UTILS := $(CURDIR)/module_utils
PYTHON ?= python3
INVENTORY ?= inventory/lab
# print how long each part took
timed = start=$$(date +%s); $(1); echo "== $(2): $$(( $$(date +%s) - start )) s"

.PHONY: help prereqs venv bundle lab lab-up lab-down lab-status site test lint unit \
        molecule test-scale test-builds lab-vllm bundle-vllm bench-converge bench-split bench-noop bench-weights bench-service bench-acceptance bench-monitoring bench-aarch64 gpu-proof cuda-check vllm-locks vllm-gpu-check day2-samples clean

help:
	@sed -n '2,4p' Makefile

prereqs:
	@bash tools/prereqs.sh

venv: $(VENV)/.installed $(VENV)/bin/promtool
# promtool and amtool from Debian's packages (the ones the monitoring stage
# installs on the nodes), for the rules' tests and the metrics checks
$(VENV)/bin/promtool: tools/prometheus_tools.sh | $(VENV)/.installed
	bash tools/prometheus_tools.sh $(VENV)/bin
$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	# the project's own package (src/twinrail), editable: the tests import it
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

bundle: venv
	$(BIN)/python tools/bundle.py models
	$(BIN)/python tools/bundle.py runtime

lab-up: prereqs venv bundle
	$(BIN)/python tools/lab.py -i $(INVENTORY) up

# The vLLM engine's wheels (its lock's) and the chat model as safetensors
bundle-vllm: venv
	$(BIN)/python tools/bundle.py vllm

# The vLLM engine's CUDA locks made again from the package index
# (roles/runtime_build/files/vllm/cuda-*.lock: uv resolves, each wheel named
# with its sha256, no two distributions installing the same file)
vllm-locks: venv
	$(BIN)/python tools/vllm_lock.py

# The CUDA locks checked without a GPU: their wheels bundled and hash-checked,
# the device code of vLLM's and torch's libraries against each CUDA profile's
# GPUs, the x86-64 lock installed and imported (NCCL's version, torch's
# archs); records in tests/vllm-gpu-check/ (make test fails when stale)
vllm-gpu-check: venv
	$(BIN)/python tools/vllm_gpu_check.py

# The lab with the vLLM engine (its own inventory, outside make test's
# budget): the same containers and stages, site.yml, then its verifier
# (the openai SDK through the proxy, a second run changes nothing, a kill drill)
lab-vllm: prereqs venv bundle bundle-vllm
	$(BIN)/python tools/lab.py -i inventory/lab-vllm up
	@$(call timed,ansible-playbook -i inventory/lab-vllm site.yml,site.yml on the vLLM lab)
	@$(call timed,python -m pytest -q -p no:cacheprovider molecule/lab-vllm,the vLLM lab's verifier)

lab-down: venv
	$(BIN)/python tools/lab.py -i $(INVENTORY) down

lab-status: venv
	$(BIN)/python tools/lab.py -i $(INVENTORY) status

site: venv
	ansible-playbook -i $(INVENTORY) site.yml

lab: lab-up
	@$(call timed,ansible-playbook -i $(INVENTORY) site.yml,site.yml on the lab)
	@echo
	@$(BIN)/python tools/lab.py -i $(INVENTORY) service
	@echo
	@echo "The lab is up. Next:"
	@echo "  make lab-status                          nodes and rails"
	@echo "  $(VENV)/bin/ansible-playbook site.yml --tags <stage>  one stage again"
	@echo "  $(VENV)/bin/python tools/lab.py cut rail0  pull a cable (mend rail0 to plug it back)"
	@echo "  make lab-down                            remove nodes, cables and network"

test: prereqs venv bundle
	@$(call timed,$(MAKE) --no-print-directory lint,lint)
	@$(call timed,$(MAKE) --no-print-directory unit,unit tests)
	@$(call timed,$(MAKE) --no-print-directory molecule,lab pass (molecule -s lab))

lint: venv
	yamllint --strict .
	ansible-lint
	# each role's README is generated from its argument spec and defaults
	python tools/role_docs.py --check
	ansible-playbook --syntax-check -i $(INVENTORY) site.yml

unit: venv bundle
	# one worker per core: the tests are independent (tmp_path, local plays)
	python -m pytest -q -n auto tests/unit

# the tests that compile the runtime (make gpu-proof's CPU path: a static
# llama.cpp build, about seven minutes on two cores), outside make test's budget
test-builds: venv bundle
	python -m pytest -q tests/builds

# one lab, one pass (molecule/lab/molecule.yml): a fresh lab (a lab left
# over is removed first), README's quick start on it (twinrail init writes
# inventory/labsite/ and its vault: tools/lab_quickstart.py), then on that
# site check on the fresh nodes, converge, a second run with changed=0, the
# verifiers in stage order, the drills, day 2; each playbook prints its
# time (ansible.posix.timer), the verifier its slowest tests. One stage
# alone: molecule test -s <stage> (on inventory/lab).
molecule: prereqs venv bundle
	$(BIN)/python tools/lab.py down
	$(BIN)/python tools/lab.py up
	$(BIN)/python tools/lab_quickstart.py
	molecule test -s lab

# scale.yml on the converged lab (make lab first): a second worker added,
# re-run, drilled (scale/test_scale_out.py), then taken out and the lab
# shrunk back (scale/test_scale_in.py); not in make test (its budget)
test-scale: venv
	MOLECULE_PROJECT_DIRECTORY=$(CURDIR) MOLECULE_SCENARIO_DIRECTORY=$(CURDIR)/molecule/lab \
	  python -m pytest -q -s -p no:cacheprovider --ansible-inventory=$(INVENTORY) \
	  molecule/lab/scale/test_scale_out.py molecule/lab/scale/test_scale_in.py

bench-converge: prereqs venv bundle
	$(BIN)/python tools/bench_converge.py -i $(INVENTORY)

# docs/day2.md's sample outputs and the dashboard's screenshot, taken again
# from the lab (make lab first; it runs the day-2 verifiers, which write
# instead of compare, and leaves the lab grown to three nodes by scale.yml)
day2-samples: venv
	$(BIN)/python tools/day2_samples.py

# The CUDA path proven where a GPU is (tools/gpu_proof.py): prepare the
# trimmed source, a small model and the stage's build scripts here
# (build/gpu-proof/, at most 64 MiB), then run: on a machine with an NVIDIA
# GPU and the CUDA toolkit the CUDA build, else the CPU path. On a GPU
# machine that has a copy of the tree and build/gpu-proof but no venv:
#   python3 tools/gpu_proof.py run --out <dir>
gpu-proof: venv bundle
	$(BIN)/python tools/gpu_proof.py prepare
	$(BIN)/python tools/gpu_proof.py run

# The runtime stage's CUDA build compiled, linked and checked without a GPU
# (tools/cuda_check.py): for each CUDA profile, on the profile's own
# architecture (dgx-spark: aarch64 with Debian's cross compilers, run under
# qemu), the toolkit assembled from pinned packages of the Python package
# index, the stage's own build script (ccache kept between runs), NEEDED,
# RUNPATH, ELF machine and interpreter against the link gate and the
# profile, the device code's sm, and the binaries without a driver and with
# a stub one. Not in `make test`: a first build takes tens of minutes on two
# cores (docs/benchmarks.md).
CUDA_PROFILES ?= dgx-spark gpu-server
CUDA_CHECK_PACKAGES = ccache $(if $(filter dgx-spark,$(CUDA_PROFILES)),g++-aarch64-linux-gnu qemu-user-static)
cuda-check: venv bundle
	@dpkg -s $(CUDA_CHECK_PACKAGES) >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(CUDA_CHECK_PACKAGES)
	$(BIN)/python tools/cuda_check.py $(foreach p,$(CUDA_PROFILES),--profile $(p))

# what distribution and the proxies cost per token (tools/bench_split.py):
# llama-bench alone, llama-server with the cluster's --rpc layout, through
# the guard, through nginx and the guard, at 1 and 4 streams, and the
# guard's relay per chunk (make lab first)
bench-split: venv
	$(BIN)/python tools/bench_split.py

# needs the converged lab (make lab): re-runs only
bench-noop: venv
	$(BIN)/python tools/bench_converge.py -i $(INVENTORY) --noop

# needs the lab with the weights stage converged on the scenario's sets
# (molecule converge -s weights, or site.yml with molecule/lab/vars/weights-sets.yml)
bench-weights: prereqs venv bundle
	$(BIN)/python tools/bench_weights.py

# needs the lab with the service stage converged (make lab)
bench-service: venv
	$(BIN)/python tools/bench_service.py

# needs the converged lab (make lab): what the monitoring stage costs
bench-monitoring: venv
	$(BIN)/python tools/bench_monitoring.py --window 60

bench-aarch64: venv bundle
	$(BIN)/python tools/bench_aarch64.py

bench-acceptance: venv
	$(BIN)/python tools/bench_acceptance.py --runs 3

clean: lab-down
	rm -rf .cache
