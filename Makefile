# make lab   - create .venv if needed, install rdmalab, open JupyterLab on notebooks/
# make test  - create .venv if needed, install rdmalab with test extras, run every test
#              (unit tests, the conformance suite on the emulated NIC, every notebook)
#              (tests/workshop, as root: a real JupyterHub and four real Unix users; see workshop/README.md)
#              As root it installs the tools its tests use where they do not run: chromium, tshark, nodejs and
#              npm, docker.io (tools/need.sh; what it installed: /tmp/rdmalab-installed.log)
# make test-softroce - the same tests inside a QEMU guest with a real Soft-RoCE device, rxe0,
#              through Debian's pyverbs (root; the first run builds and caches the guest: ~5 min)
# make test-two-hosts - the lab across two QEMU guests, each with its own rxe0, joined by a virtual
#              Ethernet link (softroce/vm.sh --pair: tests/twohost on one, the other reached over ssh),
#              then the link's capture read with tshark and the lab's codec (softroce/read_link_capture.py)
# make lab-container - the lab in its container image (container/Dockerfile), on http://localhost:8888
# make book  - the book of executed lessons: every lesson run on soft0 (QUICK = False), the guide and docs,
#              as a static site in out/book/html (book/build.py; tests/book, in make test, builds and checks it)
# make image - build that image only (container/image.sh: Debian's docker.io and its base if missing, as root)
#              (tests/container, in make test, builds it, runs lessons 00 and 06 in it, and removes it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.rdmalab-installed
# the class hub's proxy (tests/workshop, workshop/setup.sh), from the npm registry
CHP_DIR := $(HOME)/.cache/rdmalab/configurable-http-proxy
CHP     := $(CHP_DIR)/node_modules/.bin/configurable-http-proxy

.PHONY: lab test test-softroce test-two-hosts book lab-container image image-lock workshop-deps wire-deps browser-deps torch-deps clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,workshop,book]'
	@$(PY) -m rdmalab.verbs.link_pyverbs
	@$(PY) -m rdmalab.lab --configure
	@echo "$$(date -u +%H:%M:%S) installed $(VENV): $$($(PY) -m pip list 2>/dev/null | tail -n +3 | wc -l) Python packages (pip), $$($(PY) --version)" \
	  >> $${RDMALAB_INSTALL_LOG:-/tmp/rdmalab-installed.log}
	@touch $@

# rdmalab/lab.py runs `jupyter lab`, adding --allow-root for root and, headless or over SSH, printing
# the URL and the ssh -L command instead of opening a browser (tests/browser starts JupyterLab through it too)
lab: $(STAMP)
	$(PY) -m rdmalab.lab notebooks/

test: $(STAMP) workshop-deps wire-deps browser-deps torch-deps
	$(PY) -m pytest --durations=15 $(PYTEST_ARGS)

# Each tool below is judged by whether it runs, not by its name on the PATH (tools/need.sh: as root it installs
# Debian's package over a missing or broken one). Where it cannot, the tests that need it skip and say why
# (.ci/run sets RDMALAB_*_TEST=1: there they fail).
# npm, then the class hub's proxy, configurable-http-proxy, into ~/.cache/rdmalab (tests/workshop, workshop/setup.sh)
workshop-deps:
	@$(CHP) --version >/dev/null 2>&1 || { tools/need.sh npm && \
	  npm install --silent --no-audit --no-fund --prefix $(CHP_DIR) configurable-http-proxy@5 && \
	  echo "$$(date -u +%H:%M:%S) installed configurable-http-proxy $$($(CHP) --version) (npm): tests/workshop's class hub" \
	    >> $${RDMALAB_INSTALL_LOG:-/tmp/rdmalab-installed.log}; } \
	  || echo "no configurable-http-proxy (needs npm: apt-get install nodejs npm): tests/workshop will skip"

# tshark, the judge of tests/wire's pcaps (installed never setuid)
wire-deps:
	@tools/need.sh tshark || echo "no tshark: tests/wire's pcap checks will skip"

# Chromium, the browser tests/browser drives (Debian's: a test tool's own browser download does not work everywhere)
browser-deps:
	@tools/need.sh chromium || echo "no chromium: tests/browser will skip"

# PyTorch, an optional extra (lesson 11's DDP part; tests/test_ddp.py): installed into .venv where RDMALAB_TORCH_TEST=1
# (.ci/run) and PyTorch does not import there; otherwise those tests skip and say how to add it. TORCH names the
# build: the version pinned so that a wheel on disk (a CPU build, as .ci/run's machine has) is taken over PyPI's newer
# CUDA one (GBs of libraries this lab never uses); elsewhere say TORCH='torch --index-url https://download.pytorch.org/whl/cpu'
TORCH ?= torch==2.13.0
torch-deps: $(STAMP)
	@[ "$${RDMALAB_TORCH_TEST:-0}" != 1 ] || $(PY) -c 'import torch' 2>/dev/null || { \
	  $(PY) -m pip install --quiet $(TORCH) && \
	  echo "$$(date -u +%H:%M:%S) installed torch $$($(PY) -c 'import torch; print(torch.__version__)') (pip): lesson 11's DDP part" \
	    >> $${RDMALAB_INSTALL_LOG:-/tmp/rdmalab-installed.log}; }

book: $(STAMP)
	$(PY) book/build.py

lab-container:
	container/image.sh run

image:
	container/image.sh build

# re-pin binder/requirements.txt (what Binder and the image install) from pyproject.toml's dependencies
image-lock:
	container/image.sh lock

test-softroce:
	softroce/vm.sh sh softroce/guest-tests.sh $(PYTEST_ARGS)

test-two-hosts:
	RDMALAB_VM_PCAP=$(HOME)/.cache/rdmalab/pair-link.pcap softroce/vm.sh --pair sh softroce/pair-tests.sh $(PYTEST_ARGS)
	$(PY) softroce/read_link_capture.py $(HOME)/.cache/rdmalab/pair-link.pcap

clean:
	rm -rf $(VENV) build *.egg-info
