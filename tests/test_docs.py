"""The docs tell the truth: every command is documented, every column too,
and CI runs the README's test command as written."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.schema import TABLES
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()
SCHEMA = (ROOT / "docs" / "schema.md").read_text()
runner = CliRunner()

COMMANDS = [["ingest"], ["query"], ["files"], ["diagnose"], ["rediagnose"], ["report"], ["serve"], ["db", "upgrade"], ["db", "downgrade"], ["db", "current"]]


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, re.S)


def test_readme_opens_with_two_setup_commands_and_ci_runs_the_second():
    blocks = _shell_blocks(README)
    first, second = blocks[0].strip(), blocks[1].strip()
    assert "frlake ingest" in first and "pytest" in second
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci.splitlines()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_and_is_in_the_readme(command):
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0
    assert len(result.output) > 100
    assert f"frlake {' '.join(command)}" in README


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_column_is_documented(table):
    section = SCHEMA.split(f"### `{table}`", 1)[1].split("\n### ", 1)[0]
    for field in TABLES[table]:
        assert f"`{field.name}`" in section, f"{table}.{field.name} is not in docs/schema.md"


def test_example_queries_run(corpus_lake):
    import frlake

    con = frlake.connect(corpus_lake.lake, corpus_lake.db_url)
    blocks = re.findall(r"```sql\n(.*?)```", SCHEMA, re.S)
    queries = [q.strip() for block in blocks for q in block.split(";") if q.strip()]
    assert len(queries) >= 9
    for q in queries:
        q = "\n".join(line for line in q.splitlines() if not line.startswith("--"))
        assert con.execute(q).fetchall() is not None


def test_every_api_route_is_documented(tmp_path):
    from frlake.config import Settings
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    api_doc = (ROOT / "docs" / "api.md").read_text()
    app = create_app(ServerConfig(Settings.resolve(tmp_path / "lake")))
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("api."):
            path = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", rule.rule)
            path = path.replace("<attempt>", "<n>")
            assert path in api_doc, f"{path} is not in docs/api.md"


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    block = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    exec(compile(block, "README.md", "exec"), {})
