"""l3codec.jit: shared device functions compile in one namespace, and names may not clash."""

import types

import pytest

from l3codec.jit import compile_device_functions, device


def _module(name, scale):
    module = types.ModuleType(name)
    module.SCALE = scale

    @device
    def scaled(x):
        return x * SCALE  # noqa: F821 - resolved in the compiled namespace

    module.scaled = scaled
    return module


def test_device_functions_see_the_shared_namespace():
    compiled = compile_device_functions([_module("a", 3)], lambda f: f)
    assert compiled.scaled(2) == 6


def test_a_name_with_two_meanings_is_refused():
    with pytest.raises(RuntimeError, match="SCALE means different things"):
        compile_device_functions([_module("a", 3), _module("b", 4)], lambda f: f)
