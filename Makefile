VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test fuzz venv lint bench clean

$(VENV)/.created:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	touch $@

$(VENV)/.demo: $(VENV)/.created pyproject.toml
	$(PIP) install -q -e ".[cli]"
	touch $@

$(VENV)/.test: $(VENV)/.created pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[test,cli]"
	touch $@

demo: $(VENV)/.demo
	$(VENV)/bin/padless report

lint: $(VENV)/.test
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src/padless

test: lint
	$(PY) -m pytest

fuzz: $(VENV)/.test
	PADLESS_HYPOTHESIS=fuzz $(PY) -m pytest tests -k "properties or every or hostile or fuzz or elastic" -p no:cacheprovider

bench: $(VENV)/.test
	$(PY) benchmarks/bench_plan.py

clean:
	rm -rf $(VENV) build *.egg-info
