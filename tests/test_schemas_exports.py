"""`genrun.schemas` imports its names on first use (a reading command needs a few of ~100 pydantic models): what type
checkers read (its `TYPE_CHECKING` imports) and what runs (`_EXPORTS`) must name the same things, each the object its
submodule defines; and a reading command's start-up builds none of the models it does not use."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import genrun.schemas as schemas


def _type_checking_imports() -> dict[str, tuple[str, ...]]:
    tree = ast.parse(Path(schemas.__file__).read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    return {node.module: tuple(alias.name for alias in node.names) for node in block.body if isinstance(node, ast.ImportFrom) and node.module}


def test_the_lazy_names_are_the_type_checked_names_and_resolve_to_their_submodules_objects() -> None:
    assert _type_checking_imports() == schemas._EXPORTS
    for module, names in schemas._EXPORTS.items():
        defined = importlib.import_module(f"genrun.schemas.{module}")
        for name in names:
            assert getattr(schemas, name) is getattr(defined, name), name
    assert sorted(schemas.__all__) == sorted(name for names in schemas._EXPORTS.values() for name in names)


def test_an_unknown_name_is_an_attribute_error_and_a_submodule_still_imports() -> None:
    try:
        schemas.NoSuchModel  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchModel" in str(exc)
    else:
        raise AssertionError("an unknown name resolved")
    from genrun.schemas import layout  # a submodule, not an exported name

    assert layout.MANIFEST


def test_ls_starts_without_building_the_models_it_does_not_read(tmp_path: Path) -> None:
    """`genrun ls` reads listings, never a request or a budget: their models are not built (once, every command built
    all of them at start-up: a quarter of a second of each `ls`)."""
    code = ("import sys\nfrom genrun.runner.cli import main\nmain(['ls', '--store', sys.argv[1]])\n"
            "print(sorted(m for m in ('genrun.schemas.request', 'genrun.schemas.budget', 'genrun.schemas.inputs') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
