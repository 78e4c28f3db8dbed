VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# padless's own C++ is built with warnings as errors here and in CI (not for users' builds).
WERROR := -Ccmake.define.PADLESS_WERROR=ON

.PHONY: demo test fuzz venv lint bench clean install-check stub core

$(VENV)/.created:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	touch $@

$(VENV)/.demo: $(VENV)/.created pyproject.toml
	$(PIP) install -q -e ".[cli]"
	touch $@

$(VENV)/.test: $(VENV)/.created pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[test,cli]" $(WERROR)
	touch $@ $(VENV)/.core  # that install built the kernels too

# The compiled kernels (padless._core) again whenever a C++ source or the CMake file changes
# (made by a second make after .test, which sees the build the test install just did).
$(VENV)/.core: CMakeLists.txt $(wildcard csrc/*.cpp csrc/*.hpp)
	$(PIP) install -q --no-deps -e . $(WERROR)
	touch $@

core: $(VENV)/.test
	@$(MAKE) --no-print-directory $(VENV)/.core

demo: $(VENV)/.demo
	$(VENV)/bin/padless report

lint: core
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy src/padless

test: lint
	$(PY) -m pytest

fuzz: core
	PADLESS_HYPOTHESIS=fuzz $(PY) -m pytest tests -k "properties or every or hostile or fuzz or elastic" -p no:cacheprovider

bench: core
	$(PY) benchmarks/bench_plan.py

# the type stub of the compiled module, after a change of its bindings (a test compares them)
stub: core
	$(PY) -m nanobind.stubgen -q -m padless._core -o src/padless/_core.pyi

# a wheel and an sdist as a user gets them, installed and run read-only (tools/check_install.sh)
install-check:
	tools/check_install.sh

clean:
	rm -rf $(VENV) build *.egg-info src/padless/_core*.so
