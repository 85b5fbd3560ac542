"""README.md gives the test command; .ci/run runs exactly that command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from polaris_testing import REPO

README = REPO / "README.md"
CI = REPO / ".ci" / "run"


def readme_test_command() -> str:
    section = re.search(r"^## Tests\s*$(.*?)(?=^## |\Z)", README.read_text(encoding="utf-8"), re.M | re.S)
    assert section, "README.md has no '## Tests' section"
    block = re.search(r"^```[^\n]*\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, "the Tests section has no fenced command"
    lines = block.group(1).strip().splitlines()
    assert len(lines) == 1, "the test command must be one line a newcomer can paste"
    return lines[0]


def test_the_readme_command_creates_a_venv_installs_the_test_extra_and_runs_pytest() -> None:
    command = readme_test_command()
    assert command.startswith("python3 -m venv ")
    assert "pip install -e '.[test]'" in command
    assert "-m pytest" in command


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_runs_exactly_the_readme_command() -> None:
    assert os.access(CI, os.X_OK), ".ci/run must be executable"
    assert CI.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in CI.read_text()
    subprocess.run(["bash", "-n", str(CI)], check=True)
    printed = subprocess.run([str(CI), "--print-test-command"], capture_output=True, text=True, check=True)
    assert printed.stdout == readme_test_command() + "\n"


def test_the_readme_claims_no_command_that_does_not_exist() -> None:
    text = README.read_text(encoding="utf-8")
    assert "## Quickstart" in text
    assert (REPO / "llama_index_polaris" / "engine" / "config.py").is_file()  # named as the settings table
    assert "`SETTINGS`" in text


def fake_checkout(tmp_path, command: str):
    (tmp_path / ".ci").mkdir()
    shutil.copy2(CI, tmp_path / ".ci" / "run")
    (tmp_path / "README.md").write_text(f"# X\n\n## Tests\n\n```\n{command}\n```\n\n## Other\n")
    return tmp_path / ".ci" / "run"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("exit_code", "expected"), [(0, 0), (1, 1), (5, 1)])
def test_ci_passes_on_the_commands_exit_code_and_fails_when_no_tests_ran(tmp_path, exit_code, expected) -> None:
    ci = fake_checkout(tmp_path, f"true && exit {exit_code}")
    result = subprocess.run([str(ci)], capture_output=True, text=True)
    assert result.returncode == expected, result.stderr
    assert ("collected no tests" in result.stderr) == (exit_code == 5)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_ci_refuses_a_readme_without_a_one_line_command(tmp_path) -> None:
    ci = fake_checkout(tmp_path, "echo one\necho two")
    result = subprocess.run([str(ci)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "must give the test command as one line" in result.stderr


def test_every_install_line_works_from_a_clone() -> None:
    """Polaris is not on the package registry: `pip install 'llama-index-polaris[x]'` fails for a
    newcomer, so no page, notebook or message tells them to run it; from a clone it is
    `pip install -e '.[x]'`."""
    places = [README, *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.ipynb")),
              *sorted((REPO / "llama_index_polaris").rglob("*.py"))]
    registry = re.compile(r"pip install ['\"]?llama-index-polaris")
    found = [f"{p.relative_to(REPO)}:{n}" for p in places
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if registry.search(line)]
    assert found == []
    first = json.loads((REPO / "examples" / "quickstart.ipynb").read_text(encoding="utf-8"))["cells"][0]
    assert "pip install -e '.[notebook]'" in "".join(first["source"])
