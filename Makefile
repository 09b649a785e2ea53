# make lab   - create .venv if needed, install rdmalab, open JupyterLab on notebooks/
# make test  - create .venv if needed, install rdmalab with test extras, run every test
#              (unit tests, the conformance suite on the emulated NIC, every notebook)
# make test-softroce - the same tests inside a QEMU guest with a real Soft-RoCE device, rxe0,
#              through Debian's pyverbs (root; the first run builds and caches the guest: ~5 min)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.rdmalab-installed

.PHONY: lab test test-softroce clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@$(PY) -m rdmalab.verbs.link_pyverbs
	@touch $@

# rdmalab/lab.py runs `jupyter lab`, adding --allow-root for root and, headless or over SSH, printing
# the URL and the ssh -L command instead of opening a browser (tests/browser starts JupyterLab through it too)
lab: $(STAMP)
	$(PY) -m rdmalab.lab notebooks/

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test-softroce:
	softroce/vm.sh sh softroce/guest-tests.sh $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
