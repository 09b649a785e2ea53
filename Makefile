# make lab   - create .venv if needed, install rdmalab, open JupyterLab on notebooks/
# make test  - create .venv if needed, install rdmalab with test extras, run every test
#              (unit tests, the conformance suite on the emulated NIC, every notebook)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.rdmalab-installed

.PHONY: lab test clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt-get install python3-venv"; exit 1; }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
