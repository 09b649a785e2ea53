# make lab   - create .venv if needed, install rdmalab, open JupyterLab on notebooks/
# make test  - create .venv if needed, install rdmalab with test extras, run every test
#              (unit tests, the conformance suite on the emulated NIC, every notebook)
#              (tests/workshop, as root: a real JupyterHub and four real Unix users; see workshop/README.md)
#              As root it installs the tools its tests use when missing: chromium, tshark, nodejs and npm
# make test-softroce - the same tests inside a QEMU guest with a real Soft-RoCE device, rxe0,
#              through Debian's pyverbs (root; the first run builds and caches the guest: ~5 min)
# make test-two-hosts - the lab across two QEMU guests, each with its own rxe0, joined by a virtual
#              Ethernet link (softroce/vm.sh --pair: tests/twohost on one, the other reached over ssh),
#              then the link's capture read with tshark and the lab's codec (softroce/read_link_capture.py)
# make lab-container - the lab in its container image (container/Dockerfile), on http://localhost:8888
# make book  - the book of executed lessons: every lesson run on soft0 (QUICK = False), the guide and docs,
#              as a static site in out/book/html (book/build.py; tests/book, in make test, builds and checks it)
# make image - build that image only (container/image.sh: Debian's docker.io and its base if missing, as root)
#              (tests/container, in make test, builds it, runs lessons 00 and 04 in it, and removes it)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.rdmalab-installed
# the class hub's proxy (tests/workshop, workshop/setup.sh), from the npm registry
CHP_DIR := $(HOME)/.cache/rdmalab/configurable-http-proxy
CHP     := $(CHP_DIR)/node_modules/.bin/configurable-http-proxy

.PHONY: lab test test-softroce test-two-hosts book lab-container image image-lock workshop-deps wire-deps browser-deps clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,workshop,book]'
	@$(PY) -m rdmalab.verbs.link_pyverbs
	@$(PY) -m rdmalab.lab --configure
	@touch $@

# rdmalab/lab.py runs `jupyter lab`, adding --allow-root for root and, headless or over SSH, printing
# the URL and the ssh -L command instead of opening a browser (tests/browser starts JupyterLab through it too)
lab: $(STAMP)
	$(PY) -m rdmalab.lab notebooks/

test: $(STAMP) workshop-deps wire-deps browser-deps
	$(PY) -m pytest --durations=15 $(PYTEST_ARGS)

# npm (Debian: nodejs npm, installed here when root), then configurable-http-proxy into ~/.cache/rdmalab.
# Without them tests/workshop skips and says why (.ci/run sets RDMALAB_WORKSHOP_TEST=1: there it fails).
workshop-deps: $(CHP)
$(CHP):
	@command -v npm >/dev/null || [ "$$(id -u)" != 0 ] || { echo "installing nodejs and npm (apt-get)"; \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; } \
	    > /tmp/rdmalab-npm.log 2>&1 || tail -5 /tmp/rdmalab-npm.log; }
	-@command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix $(CHP_DIR) configurable-http-proxy@5 \
	  || echo "no configurable-http-proxy (needs npm: apt-get install nodejs npm): tests/workshop will skip"

# tshark (Debian: tshark, installed here when root, never setuid), the judge of tests/wire's pcaps.
# Without it those tests skip and say why.
wire-deps:
	@command -v tshark >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || { echo "installing tshark (apt-get)"; \
	  { echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections && apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark; } \
	    > /tmp/rdmalab-tshark.log 2>&1 || tail -5 /tmp/rdmalab-tshark.log; }

# Chromium (Debian: chromium, installed here when root), the browser tests/browser drives: a test tool's
# own browser download does not work everywhere. Without it those tests skip and say why.
browser-deps:
	@test -x /usr/bin/chromium || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || { echo "installing chromium (apt-get)"; \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } \
	    > /tmp/rdmalab-chromium.log 2>&1 || tail -5 /tmp/rdmalab-chromium.log; }

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
