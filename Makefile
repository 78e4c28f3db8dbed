VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# padless's own C++ is built with warnings as errors here and in CI (not for users' builds).
WERROR := -Ccmake.define.PADLESS_WERROR=ON

.PHONY: demo test fuzz sanitize venv lint bench clean install-check stub core docs

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

# the docs site into site/ (open site/index.html): mkdocs-material, the API reference from the
# docstrings (mkdocstrings), plots of the built-in corpus; warnings are errors (mkdocs.yml)
docs: core
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

test: lint docs
	$(PY) -m pytest

# many random examples of the property tests, and every binding of padless._core driven with
# random and adversarial arguments in subprocesses (tests/test_fuzz_bindings.py)
fuzz: core
	PADLESS_HYPOTHESIS=fuzz $(PY) -m pytest tests -k "properties or every or hostile or fuzz or elastic" -p no:cacheprovider

# padless._core built with AddressSanitizer + UndefinedBehaviorSanitizer into build/sanitize (the
# build in .venv stays as it is), and the kernel, hostile, ingest and fuzz tests run against it:
# tools/sanitize/sitecustomize.py points every Python started with PADLESS_CORE_SO at that build.
# gcc's sanitizer runtimes are preloaded since python itself is not built with them; CPython
# keeps memory to the end by design, hence no leak check.
SAN_CXX ?= g++
SAN_DIR := build/sanitize
SAN_TESTS = tests/test_kernels.py tests/test_kernel_limits.py tests/test_collate_kernels.py \
	tests/test_hostile.py tests/test_ingest.py tests/test_ingest_hostile.py \
	$(wildcard tests/test_binding_attacks_*.py) tests/test_fuzz_bindings.py
SAN_ENV = LD_PRELOAD=$$($(SAN_CXX) -print-file-name=libasan.so):$$($(SAN_CXX) -print-file-name=libubsan.so) \
	ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PYTHONPATH=$(CURDIR)/tools/sanitize PADLESS_CORE_SO=$$(ls $(CURDIR)/$(SAN_DIR)/_core*.so)

sanitize: $(VENV)/.test
	cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DPADLESS_SANITIZE=ON \
		-DCMAKE_CXX_COMPILER=$(SAN_CXX) -DPython_EXECUTABLE=$(CURDIR)/$(PY) > /dev/null
	cmake --build $(SAN_DIR) --parallel $$(nproc)
	$(SAN_ENV) $(PY) -c "import os, padless._core as c; \
		assert os.path.samefile(c.__file__, os.environ['PADLESS_CORE_SO']), c.__file__; \
		assert any('libasan' in m for m in open('/proc/self/maps')); \
		print('sanitize: testing', c.__file__)"
	$(SAN_ENV) $(PY) -m pytest $(SAN_TESTS) -p no:cacheprovider

bench: core
	$(PY) benchmarks/bench_plan.py

# the type stub of the compiled module, after a change of its bindings (a test compares them)
stub: core
	$(PY) -m nanobind.stubgen -q -m padless._core -o src/padless/_core.pyi

# a wheel and an sdist as a user gets them, installed and run read-only (tools/check_install.sh)
install-check:
	tools/check_install.sh

clean:
	rm -rf $(VENV) build site *.egg-info src/padless/_core*.so
