# Every target runs from a fresh clone: `make dev` creates .venv with the tool and its dev tools.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= stack/vllm-musa-0.28.0-py312.yaml
TARGET ?= vllm-openai

.PHONY: dev lint typecheck test test-fast check lock image demo demo-publish demo-v028 ab bench clean fetch image-offline

$(BIN)/python: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	PIP_CONFIG_FILE=/dev/null $(BIN)/pip install --quiet --upgrade pip
	PIP_CONFIG_FILE=/dev/null $(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/python

dev: $(BIN)/python  ## create .venv with the tool and its dev tools

lint: dev  ## ruff, the import contracts (pyproject.toml [tool.importlinter]), the workflows and renovate.json against their schemas
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/check-jsonschema --builtin-schema vendor.renovate .github/renovate.json

typecheck: dev  ## mypy --strict
	$(BIN)/mypy

test: dev  ## lint, typecheck, then every test: those that need Docker or a registry, and beside them the rest
	$(MAKE) lint typecheck
	@mkdir -p build
	$(BIN)/pytest -m "not docker and not registry" >build/test-plain.log 2>&1 & plain=$$!; \
	$(BIN)/pytest -m "docker or registry"; served=$$?; \
	wait $$plain; plain_rc=$$?; \
	echo "== the tests that need no Docker and no registry (build/test-plain.log):"; \
	tail -n 40 build/test-plain.log; \
	test $$served -eq 0 && test $$plain_rc -eq 0

test-fast: dev  ## lint, typecheck, then the tests that need no Docker and no registry, on every core
	$(MAKE) lint typecheck
	$(BIN)/pytest -m "not docker and not registry" -n auto

lock: dev  ## lock STACK (default the v0.28.0 py312 stack)
	$(BIN)/python build_image.py lock $(STACK)

image: dev  ## build TARGET (default vllm-openai) of STACK from its lock; gates run before any tag
	$(BIN)/python build_image.py build $(STACK) --target $(TARGET)

fetch: dev  ## fill the cache with every input of STACK (wheels, sources, rustup-init, keys)
	$(BIN)/python build_image.py fetch $(STACK)

image-offline: dev  ## build TARGET of STACK with the network off, from fetched inputs only
	$(BIN)/python build_image.py build $(STACK) --target $(TARGET) --offline $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

demo: dev  ## the demo end to end: index on 127.0.0.1, lock, build + gate + tag both targets
	$(BIN)/python -m demo.run_demo $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

demo-publish: dev  ## push the images of `make demo` as nightly tags to 127.0.0.1:5000 (started as root with ci/start-registry.sh when down)
	$(BIN)/python -m demo.run_demo --publish

demo-v028: dev  ## the real vLLM 0.28.0 sdist, patched and built by the stand-in vllm-musa, from the committed lock
	$(BIN)/python -m demo.run_demo --stack stack/demo-v028.yaml $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

SLOWDOWN ?= 0
ab: demo  ## serve-check and A/B the demo image against a candidate slowed by SLOWDOWN percent (report: build/ab/)
	$(BIN)/python -m demo.ab_demo --slowdown $(SLOWDOWN)

bench: dev  ## speed against uv, pip and pip-compile in the same run (bench/README.md)
	$(BIN)/python -m bench.closure
	$(BIN)/python -m bench.lock_download

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
