"""DEPLOYKIT_REQUIRE_ASSETS: a boolean, and under it a missing external thing fails naming itself."""

from __future__ import annotations

import pytest

from tests.assets.paths import REQUIRE_VARIABLE, assets_required, missing_asset, require_executable, require_module


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off", " 0 "])
def test_off_values(monkeypatch, value):
    monkeypatch.setenv(REQUIRE_VARIABLE, value)
    assert not assets_required()


@pytest.mark.parametrize("value", ["1", "true", "yes", "on"])
def test_on_values(monkeypatch, value):
    monkeypatch.setenv(REQUIRE_VARIABLE, value)
    assert assets_required()


def test_unset_is_off(monkeypatch):
    monkeypatch.delenv(REQUIRE_VARIABLE, raising=False)
    assert not assets_required()


def test_missing_asset_skips_or_fails_naming_it(monkeypatch):
    monkeypatch.setenv(REQUIRE_VARIABLE, "0")
    with pytest.raises(pytest.skip.Exception, match=r"the thing is not installed \(apt-get install thing\)"):
        missing_asset("the thing", "apt-get install thing")
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match=r"the thing is not installed .*DEPLOYKIT_REQUIRE_ASSETS is on"):
        missing_asset("the thing", "apt-get install thing")


def test_module_and_program_helpers_name_what_is_missing(monkeypatch):
    monkeypatch.setenv(REQUIRE_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match=r"the Python module deploykit_no_such_module is not installed"):
        require_module("deploykit_no_such_module", "pip install it")
    with pytest.raises(pytest.fail.Exception, match=r"the program deploykit-no-such-program is not installed"):
        require_executable("deploykit-no-such-program", "apt-get install it")
    assert require_module("json", "stdlib").dumps([]) == "[]"
