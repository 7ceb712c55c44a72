"""The emulator's own tests (collected by the default pytest run: see testpaths in pyproject.toml)."""
