"""Issue 36 point 4: the simulator is a distribution of its own, outside the product.

The informer-bus wheel holds none of it and every product module imports without it; the demo,
the one product command that runs it, says in one line how to install it; the simulator has its
own command (``apiserver-sim``, ``python -m apiserver_sim``) and the product CLI has no
``apiserver-sim`` subcommand any more.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import apiserver_sim
from apiserver_sim.command import main
from informer_bus.cli import SUBCOMMANDS
from informer_bus.demo.supervisor import SIMULATOR_MISSING
from tests.support.paths import ROOT

PRODUCT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SIMULATOR = tomllib.loads((ROOT / "apiserver_sim" / "pyproject.toml").read_text())

_WITHOUT_SIMULATOR = """
import sys
sys.modules["apiserver_sim"] = None  # what a machine with only the informer-bus wheel has
"""


def test_the_product_wheel_ships_the_product_packages_only() -> None:
    packages = PRODUCT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert "apiserver_sim" not in packages
    for package in packages:
        assert not list((ROOT / package).rglob("apiserver_sim*")), package
    assert Path(apiserver_sim.__file__).parent == ROOT / "apiserver_sim"


def test_every_product_module_imports_without_the_simulator() -> None:
    packages = PRODUCT["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    code = _WITHOUT_SIMULATOR + (
        "import importlib, pkgutil\n"
        f"for package in {packages!r}:\n"
        "    root = importlib.import_module(package)\n"
        "    for module in pkgutil.walk_packages(root.__path__, package + '.'):\n"
        "        if not module.name.endswith('__main__'):\n"
        "            importlib.import_module(module.name)\n"
        "print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported\n"


def test_the_demo_without_the_simulator_says_how_to_install_it(tmp_path: Path) -> None:
    code = _WITHOUT_SIMULATOR + (
        "from informer_bus.cli import main\n"
        f"sys.exit(main(['demo', '--duration', '1', '--log-dir', {str(tmp_path)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == f"informer-bus demo: error: {SIMULATOR_MISSING}\n"
    assert "pip install -e ./apiserver_sim" in SIMULATOR_MISSING


def test_the_simulator_has_its_own_command_and_the_product_cli_none() -> None:
    assert SIMULATOR["project"]["scripts"] == {"apiserver-sim": "apiserver_sim.command:main"}
    assert SIMULATOR["project"]["name"] not in PRODUCT["project"]["dependencies"]
    assert "apiserver-sim" not in {sub.name for sub in SUBCOMMANDS}
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    script = Path(sys.executable).with_name("apiserver-sim")
    assert script.is_file(), "make install installs the simulator: pip install -e ./apiserver_sim"
