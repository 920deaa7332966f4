"""docs/configuration.md documents every key the configuration accepts."""

import re

import pytest

from amplint.config.options import KNOWN_KEYS
from conftest import REPO

PAGE = (REPO / "docs" / "configuration.md").read_text()
TABLE = PAGE.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
DOCUMENTED = re.findall(r"^\| `([a-z-]+)` \|", TABLE, flags=re.M)


@pytest.mark.parametrize("key", KNOWN_KEYS)
def test_every_key_has_a_row(key):
    assert key in DOCUMENTED


def test_the_table_names_no_key_amplint_rejects():
    assert set(DOCUMENTED) <= set(KNOWN_KEYS)
