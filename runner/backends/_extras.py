"""Which of a backend's extra requirements are not installed, and the `pip install` line for them.

A backend's entry point may name the extras its libraries come from
(`transformers = "genrun.runner.backends.transformers.backend:create_backend [transformers]"`). The
core install has no torch, so a request for a backend whose extra is missing is refused before
anything is imported, with the line that installs it, instead of an ImportError deep in planning.
"""

from functools import cache
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, requires

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


def missing_extra_requirements(entry: EntryPoint) -> tuple[str, ...]:
    """Distributions the entry point's extras require that are not installed (empty when all are)."""
    if entry.dist is None or not entry.extras:
        return ()
    return tuple(sorted(set().union(*(_missing(entry.dist.name, extra) for extra in entry.extras))))


def install_line(entry: EntryPoint) -> str:
    """`pip install 'genrun[transformers]'` for the distribution and extras the entry point names."""
    name = entry.dist.name if entry.dist is not None else "genrun"
    extras = ",".join(entry.extras)
    line = f"pip install '{name}[{extras}]'"
    if canonicalize_name(name) == "genrun":  # `pip install genrun[...]` in a checkout would fetch a release
        line += f" (from a checkout of genrun: pip install -e '.[{extras}]')"
    return line


@cache
def _missing(dist_name: str, extra: str) -> frozenset[str]:
    """Requirements of `dist_name[extra]` that are not installed, following self-references (`genrun[transformers]`)."""
    missing: set[str] = set()
    for line in requires(dist_name) or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:  # a distribution's own metadata; pip would have refused to install it
            continue
        if requirement.marker is None or not requirement.marker.evaluate({"extra": extra}):
            continue  # a core requirement (pip installed it) or one of another extra
        if canonicalize_name(requirement.name) == canonicalize_name(dist_name):
            for nested in requirement.extras:
                missing |= _missing(dist_name, nested)
            continue
        try:
            distribution(requirement.name)
        except PackageNotFoundError:
            missing.add(requirement.name)
    return frozenset(missing)
