"""How to install an optional extra, in both forms: from a package index and from a checkout.

A user who cloned the repository and ran `pip install -e .` gets nothing from
`pip install 'genrun[plot]'` (it would fetch a release instead); both commands are named.
"""


def install_hint(extra: str) -> str:
    """`pip install 'genrun[plot]'` (from a checkout: `pip install -e '.[plot]'`)."""
    return f"pip install 'genrun[{extra}]' (from a checkout of genrun: pip install -e '.[{extra}]')"
